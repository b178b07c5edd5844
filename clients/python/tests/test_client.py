"""The client against a running kbq: every resource, typed answers, streaming, errors,
retries, deprecation and the environment."""

import dataclasses
import socket
import time
import warnings

import pytest

import kbq
from kbq import types as t


def test_graph_answers_are_typed(client):
    walk = client.graph.traverse("Alan Turing", depth=1)
    assert isinstance(walk, t.TraversalResponse)
    assert walk.entity_name == "Alan Turing"
    assert isinstance(walk.entities_found[0], t.EntityAtDepth)
    assert (walk.entities_found[0].name, walk.entities_found[0].depth) == ("Alan Turing", 0)
    assert all(e.depth == 1 for e in walk.entities_found[1:])
    assert walk.total_entities == len(walk.entities_found)
    assert all(isinstance(r, t.Relationship) for r in walk.relationships)
    out = client.graph.traverse("Alan Turing", relationship_types=["influenced"], direction="in", depth=1, limit=3)
    assert len(out.entities_found) <= 3
    assert all(r.relationship_type == "influenced" for r in out.relationships)

    found = client.graph.search("turing", limit=5)
    assert isinstance(found, t.SearchResponse)
    names = [e.name for e in found.results]
    # A prefix match ranks before a match inside a name.
    assert names.index("Turing machine") < names.index("Alan Turing")

    entity = client.graph.entity("Alan Turing")
    assert isinstance(entity, t.Entity)
    assert entity.properties["born"] == 1912
    assert client.graph.entity("Nobody at all") is None
    # Names with a slash or a percent sign reach the server whole.
    assert client.graph.entity("a/b %2F c") is None

    docs = client.graph.documents("Alan Turing", max_depth=1, limit=3)
    assert isinstance(docs, t.DocumentsResponse)
    assert 0 < len(docs.results) <= 3


def test_graph_merges(client):
    # The demo has no ingested sources, hence no merges: one empty, last page.
    page = client.graph.merges(limit=10)
    assert isinstance(page, t.MergesResponse)
    assert (page.merges, page.next_after) == ([], None)
    page = client.graph.merges(entity_name="Alan Turing", after="A")
    assert (page.merges, page.next_after) == ([], None)
    with pytest.raises(kbq.BadRequestError) as e:
        client.graph.merges(limit=0)
    assert (e.value.status_code, e.value.code, e.value.field) == (400, "invalid_request", "limit")


def test_rag_methods(client):
    for method in (client.rag.semantic, client.rag.keyword, client.rag.hybrid):
        answer = method("Enigma codebreakers", limit=2)
        assert isinstance(answer, t.RagAnswer)
        assert answer.total == len(answer.results) <= 2
        assert all(isinstance(r, t.RagResult) for r in answer.results)
    answer = client.rag.keyword("Enigma", filters={"source": "no-such-source"})
    assert answer.results == []
    answer = client.rag.hybrid("Who influenced Alan Turing?", graph_depth=0)
    assert answer.method == "hybrid"


def test_ingest_and_delete(client):
    report = client.ingest.entities(
        [t.NewEntity(name="Py Client Test", entity_type="test", properties={"n": 1})]
    )
    assert (report.received, report.written, report.failures) == (1, 1, [])
    report = client.ingest.relationships(
        [{"source_name": "Py Client Test", "target_name": "Alan Turing", "relationship_type": "tests"}]
    )
    assert report.written == 1
    report = client.ingest.documents(
        [
            t.NewDocument(
                title="Py client", content="written by the Python client", source="py",
                source_id="py-1", content_type="text/plain", entity_name="Py Client Test",
            )
        ]
    )
    assert report.written == 1
    nd = client.ingest.ndjson([{"kind": "entity", "name": "Py Ndjson", "entity_type": "test"}])
    assert isinstance(nd, t.NdjsonReport)
    assert (nd.records, nd.entities) == (1, 1)
    assert client.graph.entity("Py Client Test").properties == {"n": 1}
    found = client.rag.keyword("written by the Python client", limit=1)
    doc_id = found.results[0].id
    assert client.ingest.delete_document(doc_id).deleted is True
    assert client.ingest.delete_entity("Py Client Test").deleted is True
    assert client.ingest.delete_entity("Py Ndjson").deleted is True
    assert client.graph.entity("Py Client Test") is None


def test_a_source_is_ingested_read_followed_and_retracted(client):
    # The built-in provider extracts nothing: the job stores the source's chunks, asks no
    # model and succeeds.
    job = client.ingest.add_source(
        source="py sources",
        source_id="notes/engine 1.md",
        content="# Py notes\n\nThe Python client wrote this note about the Analytical Engine.",
        content_type="text/markdown",
        url="https://example.com/notes/1",
    )
    assert isinstance(job, t.JobView)
    assert (job.source, job.source_id) == ("py sources", "notes/engine 1.md")
    assert job.status in ("queued", "running", "succeeded")
    assert isinstance(job.counts, t.JobCounts)

    done = client.ingest.wait(job.job_id, timeout=30)
    assert done.status == "succeeded", done.error
    assert done.counts.chunks == done.chunks_done == done.chunks_total >= 1
    assert (done.counts.model_calls, done.error) == (0, None)
    assert client.ingest.job(job.job_id) == done
    found = client.rag.keyword("Python client wrote this note", filters={"source": "py sources"})
    assert [r.title for r in found.results] == ["Py notes"]
    assert found.results[0].url == "https://example.com/notes/1"

    # A job that has ended: one `progress` and the `end`, both the job as it ended.
    with client.ingest.job_events(job.job_id) as stream:
        events = list(stream)
    assert [e.event for e in events] == ["progress", "end"]
    assert all(isinstance(e, kbq.JobEvent) and e.data == done for e in events)
    assert stream.final == done and stream.request_id
    # Cancelling a job that has ended answers it as it ended.
    assert client.ingest.cancel_job(job.job_id) == done

    gone = client.ingest.delete_source("py sources", "notes/engine 1.md")
    assert isinstance(gone, t.SourceRetraction)
    assert (gone.deleted, gone.chunks) == (True, done.counts.chunks)
    assert client.rag.keyword("Python client wrote this note", filters={"source": "py sources"}).results == []
    with pytest.raises(kbq.NotFoundError) as e:
        client.ingest.delete_source("py sources", "notes/engine 1.md")
    assert e.value.code == "not_found"


def test_a_running_job_is_followed_to_its_end(client):
    job = client.ingest.add_source("py-sources", "followed", "A note followed as it is read. " * 200)
    stream = client.ingest.job_events(job.job_id)
    assert isinstance(stream, kbq.JobEventStream)
    ended = stream.until_end()
    assert ended.status == "succeeded" and ended.chunks_done == ended.chunks_total
    assert stream.final == ended == client.ingest.job(job.job_id)
    assert client.ingest.delete_source("py-sources", "followed").deleted


def test_files_are_uploaded_from_a_path_bytes_or_a_file_object(client, tmp_path):
    path = tmp_path / "uploaded.md"
    path.write_text("# Uploaded\n\nA Markdown file the Python client uploaded from a path.")
    job = client.ingest.upload_source(path, source="py-uploads")
    # The source id defaults to the file name, whose extension tells the format.
    assert (job.source, job.source_id) == ("py-uploads", "uploaded.md")
    assert client.ingest.wait(job.job_id, timeout=30).status == "succeeded"
    hit = client.rag.keyword("uploaded from a path", filters={"source": "py-uploads"}).results
    assert (hit[0].title, hit[0].content_type) == ("Uploaded", "text/markdown")

    # Bytes have no name: the content type tells the format, and the source id is needed.
    html = b"<html><head><title>Bytes page</title></head><body><p>Uploaded as bytes.</p></body></html>"
    job = client.ingest.upload_source(html, source="py-uploads", source_id="page", content_type="text/html")
    assert client.ingest.wait(job.job_id, timeout=30).status == "succeeded"
    hit = client.rag.keyword("Uploaded as bytes", filters={"source": "py-uploads"}).results
    assert (hit[0].title, hit[0].content_type) == ("Bytes page", "text/html")
    # A file object's name is its file name; `source` defaults to `upload`.
    with open(path, "rb") as f:
        job = client.ingest.upload_source(f, title="Given title")
    assert (job.source, job.source_id) == ("upload", "uploaded.md")
    assert client.ingest.wait(job.job_id, timeout=30).status == "succeeded"
    hit = client.rag.keyword("uploaded from a path", filters={"source": "upload"}).results
    assert hit[0].title.startswith("Given title")

    for source, source_id in [("py-uploads", "uploaded.md"), ("py-uploads", "page"), ("upload", "uploaded.md")]:
        assert client.ingest.delete_source(source, source_id).deleted


def test_source_errors(client, url, read_key):
    with pytest.raises(kbq.APIError) as e:
        client.ingest.upload_source(b"MZ", source_id="program", file_name="program.exe")
    assert (e.value.status_code, e.value.code, e.value.field) == (415, "unsupported_media_type", "content_type")
    with pytest.raises(kbq.APIError) as e:
        client.ingest.add_source("py-sources", "pdf", "not a PDF", content_type="image/png")
    assert e.value.code == "unsupported_media_type"
    with pytest.raises(kbq.BadRequestError) as e:
        client.ingest.upload_source(b"no name")
    assert e.value.field == "source_id"
    with pytest.raises(kbq.BadRequestError) as e:
        client.ingest.add_source("py-sources", "", "text")
    assert e.value.field == "source_id"
    with pytest.raises(kbq.NotFoundError):
        client.ingest.job("no-such-job")
    with pytest.raises(kbq.NotFoundError):
        client.ingest.job_events("no-such-job")
    with pytest.raises(kbq.NotFoundError):
        client.ingest.cancel_job("no-such-job")
    with kbq.Client(base_url=url, api_key=read_key) as reader:
        with pytest.raises(kbq.PermissionDeniedError):
            reader.ingest.add_source("py-sources", "read-only", "text")


def test_chat_and_its_stream_end_in_the_same_answer(client):
    reply = client.agent.chat("Who influenced Alan Turing?")
    assert isinstance(reply, t.ChatResponse)
    assert reply.success and reply.stop_reason == "answered"
    assert [c.tool for c in reply.tool_calls] == ["KnowledgeGraphTool", "HybridSearchTool"]
    assert isinstance(reply.tool_calls[0], t.ToolCallRecord)

    with client.agent.chat_stream("Who influenced Alan Turing?") as stream:
        events = list(stream)
    names = [e.event for e in events]
    assert names == [
        "tool_call.started", "tool_call.started",
        "tool_call.completed", "tool_call.completed",
        "delta", "done",
    ], names
    started = [e.data for e in events if e.event == "tool_call.started"]
    assert all(isinstance(s, t.ToolCallStarted) for s in started)
    completed = [e.data for e in events if e.event == "tool_call.completed"]
    assert all(isinstance(c, t.ToolCallCompleted) and c.duration_ms >= 0 for c in completed)
    assert isinstance(events[-2].data, t.ChatDelta)
    assert events[-2].data.text == reply.response
    assert stream.final == events[-1].data == reply
    assert stream.request_id

    again = client.agent.chat_stream("Who influenced Alan Turing?").until_done()
    assert again == reply


def test_stats_sources_and_the_calling_key(client):
    stats = client.graph.stats()
    assert isinstance(stats, t.GraphStats)
    assert stats.entities > 0 and stats.relationships > 0 and stats.documents > 0
    listed = client.ingest.list_sources()
    assert isinstance(listed, t.SourceList)
    assert listed.total == len(listed.sources)
    me = client.key_info()
    assert isinstance(me, t.CallingKey)
    assert (me.workspace, me.can.read, "read" in me.scopes) == ("default", True, True)


async def test_the_calling_key_async(aclient):
    me = await aclient.key_info()
    assert me.workspace == "default"
    assert (await aclient.graph.stats()).entities > 0


def test_health(client):
    report = client.agent.health()
    assert isinstance(report, t.HealthReport)
    assert report.status == "healthy"
    assert report.providers[0].name == "builtin"


async def test_the_async_client(aclient):
    walk = await aclient.graph.traverse("Alan Turing", depth=1)
    assert walk.entities_found[0].name == "Alan Turing"
    assert await aclient.graph.entity("Nobody at all") is None
    page = await aclient.graph.merges(limit=10)
    assert (page.merges, page.next_after) == ([], None)
    reply = await aclient.agent.chat("Who influenced Alan Turing?")
    stream = await aclient.agent.chat_stream("Who influenced Alan Turing?")
    names = [e.event async for e in stream]
    assert names[-1] == "done"
    assert stream.final == reply
    with pytest.raises(kbq.BadRequestError):
        await aclient.graph.search("")

    job = await aclient.ingest.add_source("py-async", "one", "Written by the async client.")
    stream = await aclient.ingest.job_events(job.job_id)
    assert isinstance(stream, kbq.AsyncJobEventStream)
    events = [e async for e in stream]
    assert events[-1].event == "end" and {e.event for e in events[:-1]} == {"progress"}
    assert stream.final.status == "succeeded"
    assert await aclient.ingest.wait(job.job_id, timeout=30) == stream.final
    assert await aclient.ingest.job(job.job_id) == stream.final
    uploaded = await aclient.ingest.upload_source(b"Uploaded by the async client.", source="py-async", file_name="two.txt")
    assert (await aclient.ingest.wait(uploaded.job_id, timeout=30)).status == "succeeded"
    assert (await aclient.ingest.cancel_job(uploaded.job_id)).status == "succeeded"
    assert (await aclient.ingest.delete_source("py-async", "one")).deleted
    assert (await aclient.ingest.delete_source("py-async", "two.txt")).chunks == 1


def test_errors_name_the_status_the_code_and_the_field(url, key, read_key, client):
    with pytest.raises(kbq.BadRequestError) as e:
        client.graph.traverse("Alan Turing", depth=99)
    assert (e.value.status_code, e.value.code, e.value.field) == (400, "invalid_request", "depth")
    assert e.value.request_id
    assert "depth" in str(e.value)

    with kbq.Client(base_url=url, api_key="not-a-key") as bad:
        with pytest.raises(kbq.AuthenticationError) as e:
            bad.graph.entity("Alan Turing")
    assert (e.value.status_code, e.value.code) == (401, "INVALID_API_KEY")

    with kbq.Client(base_url=url, api_key=read_key) as reader:
        assert reader.graph.entity("Alan Turing") is not None
        with pytest.raises(kbq.PermissionDeniedError) as e:
            reader.ingest.delete_entity("Alan Turing")
    assert (e.value.status_code, e.value.code) == (403, "insufficient_scope")

    with kbq.Client(base_url=url.rsplit(":", 1)[0] + ":1", api_key=key, max_retries=0) as gone:
        with pytest.raises(kbq.APIConnectionError) as e:
            gone.graph.entity("Alan Turing")
    assert e.value.status_code is None

    # A listener that never answers: the connection is made and the answer never comes, so
    # the timeout is what ends the request (a tiny timeout against kbq raced a fast answer).
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        silent_url = "http://127.0.0.1:%d" % silent.getsockname()[1]
        with kbq.Client(base_url=silent_url, api_key=key, timeout=0.2, max_retries=0) as hurried:
            with pytest.raises(kbq.APITimeoutError):
                hurried.agent.chat("Who influenced Alan Turing?")
    assert issubclass(kbq.APITimeoutError, kbq.APIConnectionError)
    assert issubclass(kbq.RateLimitError, kbq.APIError)


def test_reads_are_retried_after_429_as_retry_after_asks(limited_url, key):
    with kbq.Client(base_url=limited_url, api_key=key, max_retries=0) as once:
        once.graph.entity("Ada")
        with pytest.raises(kbq.RateLimitError) as e:
            once.graph.entity("Ada")
    assert e.value.retry_after is not None and e.value.retry_after >= 1
    time.sleep(e.value.retry_after)

    with kbq.Client(base_url=limited_url, api_key=key, max_retries=3) as patient:
        began = time.monotonic()
        for _ in range(3):
            assert patient.graph.entity("Ada").name == "Ada"
        # One request a second: the second and third each waited for their turn.
        assert time.monotonic() - began >= 1.5


def test_chats_are_not_retried_unless_asked(limited_url, key):
    with kbq.Client(base_url=limited_url, api_key=key, max_retries=3) as c:
        c.agent.chat("hello")
        with pytest.raises(kbq.RateLimitError):
            c.agent.chat("hello")
        assert c.agent.chat("hello", retry=True).success


def test_deprecation_headers_warn(deprecated_url, key):
    with kbq.Client(base_url=deprecated_url, api_key=key) as c:
        with pytest.warns(DeprecationWarning, match="removed after"):
            assert c.graph.entity("Ada").name == "Ada"


def test_environment_variables(monkeypatch, url, key):
    monkeypatch.setenv("KBQ_BASE_URL", url)
    monkeypatch.setenv("KBQ_API_KEY", key)
    with kbq.Client() as c:
        assert c.base_url == url.rstrip("/")
        assert c.graph.entity("Alan Turing").name == "Alan Turing"
    monkeypatch.delenv("KBQ_API_KEY")
    with pytest.raises(kbq.KbqError, match="KBQ_API_KEY"):
        kbq.Client()


def test_models_ignore_fields_a_newer_server_adds():
    from kbq._models import build

    entity = build(t.Entity, {"id": "e", "name": "n", "entity_type": "x", "properties": {}, "new": 1})
    assert entity == t.Entity(id="e", name="n", entity_type="x", properties={})
    assert dataclasses.is_dataclass(entity)
    warnings.simplefilter("default")


def test_waiting_reads_again_sooner_first_and_stops_at_the_timeout():
    from kbq._base import Poll

    forever = Poll(None)
    assert [forever.next_wait() for _ in range(6)] == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
    assert Poll(0).next_wait() is None
    assert 0 < Poll(0.1).next_wait() <= 0.1


def test_workspaces_and_their_keys_through_the_admin_api(client, url, key, read_key):
    made = client.admin.create_workspace("py-team")
    assert isinstance(made, t.WorkspaceView)
    assert (made.name, made.index_bytes) == ("py-team", 0)
    assert made.counts == t.WorkspaceCounts(entities=0, relationships=0, documents=0, memories=0)
    assert made.created_at
    with pytest.raises(kbq.APIError) as e:
        client.admin.create_workspace("py-team")
    assert (e.value.status_code, e.value.code) == (409, "conflict")
    with pytest.raises(kbq.BadRequestError) as e:
        client.admin.create_workspace("Py Team")
    assert e.value.field == "name"
    # Its own quota, over the server's (none here): set, then back to the server's.
    bounded = client.admin.create_workspace("py-bounded", {"max_entities": 3})
    assert bounded.quota.max_entities == 3 and bounded.own_quota.max_entities == 3
    unbounded = client.admin.set_workspace_quota("py-bounded", {})
    assert unbounded.quota.max_entities is None and unbounded.own_quota.max_entities is None
    with pytest.raises(kbq.APIError) as e:
        client.admin.set_workspace_quota("default", {"max_entities": 1})
    assert (e.value.status_code, e.value.code) == (409, "conflict")
    client.admin.delete_workspace("py-bounded")

    minted = client.admin.mint_key("py-team", ["read", "write"], "py team")
    assert isinstance(minted, t.MintedKey)
    assert (minted.workspace, minted.scopes, minted.name) == ("py-team", ["read", "write"], "py team")
    # The minted key acts in its workspace: an empty knowledge base, then its own writes,
    # which the default workspace does not see.
    with kbq.Client(base_url=url, api_key=minted.key) as team:
        assert team.graph.entity("Alan Turing") is None
        assert team.ingest.entities([{"name": "Py Team Only", "entity_type": "test"}]).written == 1
        assert team.graph.entity("Py Team Only").name == "Py Team Only"
        with pytest.raises(kbq.PermissionDeniedError) as e:
            team.admin.list_workspaces()
        assert e.value.code == "insufficient_scope"
    assert client.graph.entity("Py Team Only") is None
    with kbq.Client(base_url=url, api_key=minted.key, workspace="default") as escaping:
        with pytest.raises(kbq.PermissionDeniedError) as e:
            escaping.graph.entity("Alan Turing")
    assert (e.value.status_code, e.value.code) == (403, "workspace_forbidden")

    # The operator's key reaches the workspace with `workspace=`; other keys may not.
    with kbq.Client(base_url=url, api_key=key, workspace="py-team") as operator:
        assert operator.workspace == "py-team"
        assert operator.graph.entity("Py Team Only").name == "Py Team Only"
        assert operator.graph.entity("Alan Turing") is None
        # The admin API names its workspaces in the path: the header changes nothing there.
        assert operator.admin.get_workspace("default").name == "default"
    with kbq.Client(base_url=url, api_key=read_key, workspace="py-team") as reader:
        with pytest.raises(kbq.PermissionDeniedError) as e:
            reader.graph.entity("Py Team Only")
    assert (e.value.status_code, e.value.code) == (403, "workspace_forbidden")
    with kbq.Client(base_url=url, api_key=key, workspace="py-nowhere") as lost:
        with pytest.raises(kbq.NotFoundError) as e:
            lost.graph.entity("Ada")
    assert (e.value.status_code, e.value.code) == (404, "workspace_not_found")

    listed = client.admin.list_workspaces()
    assert isinstance(listed, t.WorkspaceList)
    assert (listed.workspaces[0].name, listed.workspaces[0].created_at) == ("default", None)
    by_name = {w.name: w for w in listed.workspaces}
    assert by_name["py-team"].counts.entities == 1
    shown = client.admin.get_workspace("py-team")
    assert (shown.name, shown.created_at, shown.counts) == ("py-team", made.created_at, by_name["py-team"].counts)
    with pytest.raises(kbq.NotFoundError) as e:
        client.admin.get_workspace("py-nowhere")
    assert e.value.code == "workspace_not_found"
    with kbq.Client(base_url=url, api_key=read_key) as reader:
        with pytest.raises(kbq.PermissionDeniedError) as e:
            reader.admin.list_workspaces()
    assert e.value.code == "insufficient_scope"

    # Keys are listed without their secrets, and revoked.
    admin_of_team = client.admin.mint_key("py-team", ["admin"], "py team admin")
    keys = client.admin.list_keys("py-team")
    assert isinstance(keys, t.KeyList) and all(isinstance(k, t.KeyView) for k in keys.keys)
    assert [(k.id, k.name, k.scopes, k.workspace) for k in keys.keys] == [
        (minted.id, "py team", ["read", "write"], "py-team"),
        (admin_of_team.id, "py team admin", ["admin"], "py-team"),
    ]
    assert minted.key not in repr(keys)
    # An `admin` key of another workspace holds every scope there, but manages no workspace.
    with kbq.Client(base_url=url, api_key=admin_of_team.key) as team_admin:
        assert team_admin.graph.entity("Py Team Only").name == "Py Team Only"
        with pytest.raises(kbq.PermissionDeniedError) as e:
            team_admin.admin.list_keys("py-team")
    assert e.value.code == "insufficient_scope"
    assert client.admin.revoke_key("py-team", minted.id) == t.KeyRevocation(id=minted.id, revoked=True)
    with kbq.Client(base_url=url, api_key=minted.key) as revoked:
        with pytest.raises(kbq.AuthenticationError):
            revoked.graph.entity("Py Team Only")
    with pytest.raises(kbq.NotFoundError) as e:
        client.admin.revoke_key("py-team", minted.id)
    assert e.value.code == "not_found"
    assert [k.id for k in client.admin.list_keys("py-team").keys] == [admin_of_team.id]

    # Deleting the workspace stops its keys at once; `default` cannot be deleted.
    assert client.admin.delete_workspace("py-team") == t.WorkspaceDeletion(name="py-team", deleted=True)
    with kbq.Client(base_url=url, api_key=admin_of_team.key) as orphan:
        with pytest.raises(kbq.AuthenticationError):
            orphan.graph.entity("Py Team Only")
    with pytest.raises(kbq.NotFoundError) as e:
        client.admin.delete_workspace("py-team")
    assert e.value.code == "workspace_not_found"
    with pytest.raises(kbq.APIError) as e:
        client.admin.delete_workspace("default")
    assert (e.value.status_code, e.value.code) == (409, "conflict")
    assert "py-team" not in [w.name for w in client.admin.list_workspaces().workspaces]


async def test_the_async_client_manages_workspaces(url, key):
    async with kbq.AsyncClient(base_url=url, api_key=key) as operator:
        assert (await operator.admin.create_workspace("py-async-team")).name == "py-async-team"
        minted = await operator.admin.mint_key("py-async-team", ["read"], "py async")
        assert [k.id for k in (await operator.admin.list_keys("py-async-team")).keys] == [minted.id]
        names = [w.name for w in (await operator.admin.list_workspaces()).workspaces]
        assert names[0] == "default" and "py-async-team" in names
    async with kbq.AsyncClient(base_url=url, api_key=key, workspace="py-async-team") as inside:
        assert inside.workspace == "py-async-team"
        assert await inside.graph.entity("Alan Turing") is None
    async with kbq.AsyncClient(base_url=url, api_key=minted.key) as reader:
        assert (await reader.graph.search("turing")).results == []
    async with kbq.AsyncClient(base_url=url, api_key=key) as operator:
        assert (await operator.admin.get_workspace("py-async-team")).counts.entities == 0
        assert (await operator.admin.revoke_key("py-async-team", minted.id)).revoked
        assert (await operator.admin.delete_workspace("py-async-team")).deleted


def test_the_export_streams_every_record_and_ends_with_its_counts(client, url, key):
    records = list(client.admin.export())
    end = records[-1]
    assert end["kind"] == "end", end
    kinds = [r["kind"] for r in records[:-1]]
    assert "end" not in kinds
    assert end["entities"] == kinds.count("entity") > 0
    assert end["relationships"] == kinds.count("relationship")
    assert end["documents"] == kinds.count("document")
    names = {r["name"] for r in records if r["kind"] == "entity"}
    assert "Alan Turing" in names

    # Another workspace's export holds its own knowledge only.
    client.admin.create_workspace("py-export")
    with kbq.Client(base_url=url, api_key=key, workspace="py-export") as operator:
        operator.ingest.entities([{"name": "Exported Only", "entity_type": "test"}])
    theirs = list(client.admin.export(workspace="py-export"))
    assert [r["name"] for r in theirs if r["kind"] == "entity"] == ["Exported Only"]
    assert theirs[-1]["entities"] == 1
    with pytest.raises(kbq.NotFoundError) as e:
        list(client.admin.export(workspace="py-nowhere"))
    assert e.value.code == "workspace_not_found"
    with pytest.raises(kbq.BadRequestError) as e:
        list(client.admin.export(workspace="Not A Name"))
    assert e.value.field == "workspace"
    client.admin.delete_workspace("py-export")


async def test_the_async_export_streams_the_same_records(client, aclient):
    records = [r async for r in aclient.admin.export()]
    assert records[-1]["kind"] == "end"
    assert len(records) == len(list(client.admin.export()))


def test_records_are_read_across_pieces_and_a_cut_export_raises():
    from kbq._base import Records

    text = b'{"kind":"entity","name":"A"}\n{"kind":"document","content":"x\\ny"}\n{"kind":"end"}\n'
    records = Records()
    read = []
    for i in range(0, len(text), 7):
        read += records.feed(text[i : i + 7])
    read += records.finish()
    assert [r["kind"] for r in read] == ["entity", "document", "end"]
    assert read[1]["content"] == "x\ny"
    # Without its end record, or with a record after it, the export is refused.
    cut = Records()
    cut.feed(text[: text.index(b'{"kind":"end"}')])
    with pytest.raises(kbq.KbqError):
        cut.finish()
    late = Records()
    with pytest.raises(kbq.KbqError):
        late.feed(text + b'{"kind":"entity","name":"B"}\n')
