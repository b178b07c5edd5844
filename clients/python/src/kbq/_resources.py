"""The resources of a client (``client.graph``, ``client.rag``, ``client.ingest``,
``client.agent``, ``client.admin``), written once for both clients: each method builds its
call and hands it to the client, whose ``_send`` returns the answer (:class:`~kbq.Client`)
or a coroutine of it (:class:`~kbq.AsyncClient`)."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

from . import _operations as ops
from . import types as t


class _Resource:
    def __init__(self, client: Any) -> None:
        self._client = client


class Graph(_Resource):
    """The graph queries (scope ``read``)."""

    def traverse(
        self,
        entity_name: str,
        relationship_types: Optional[Sequence[str]] = None,
        direction: str = "both",
        depth: int = 2,
        limit: int = 50,
    ) -> t.TraversalResponse:
        """Walks the graph from ``entity_name``: ``direction`` ``in``, ``out`` or ``both``,
        ``depth`` 1 to 5 hops, at most ``limit`` entities (1 to 500)."""
        return self._client._send(
            ops.traverse(entity_name, relationship_types, direction, depth, limit)
        )

    def search(
        self, query: str, entity_type: Optional[str] = None, limit: int = 20
    ) -> t.SearchResponse:
        """Entities whose names contain ``query`` (case-folded): exact, then prefix, then
        substring matches, then by name."""
        return self._client._send(ops.search(query, entity_type, limit))

    def entity(self, name: str) -> Optional[t.Entity]:
        """The entity named exactly ``name``, or ``None`` when there is none."""
        return self._client._send(ops.entity(name))

    def documents(
        self,
        entity_name: str,
        entity_type: Optional[str] = None,
        relationship_types: Optional[Sequence[str]] = None,
        max_depth: Optional[int] = None,
        limit: Optional[int] = None,
        resolve_documents: Optional[bool] = None,
    ) -> t.DocumentsResponse:
        """Walks from ``entity_name`` and returns the documents of the entities reached,
        scored; ``None`` leaves a field to the server's default."""
        return self._client._send(
            ops.documents(
                entity_name, entity_type, relationship_types, max_depth, limit, resolve_documents
            )
        )

    def merges(
        self,
        entity_name: Optional[str] = None,
        after: Optional[str] = None,
        limit: Optional[int] = None,
    ) -> t.MergesResponse:
        """A page of the names ingestion merged into entities (aliases), by alias in
        code-point order: only those merged into ``entity_name`` when given, those after
        ``after`` (the ``next_after`` of the page before), at most ``limit`` (1 to 1000,
        the server's default 100). ``next_after`` is ``None`` on the last page."""
        return self._client._send(ops.merges(entity_name, after, limit))

    def stats(self) -> t.GraphStats:
        """What the workspace holds: its entities, relationships and documents."""
        return self._client._send(ops.stats())


class Rag(_Resource):
    """Document retrieval (scope ``read``); ``filters`` is a :class:`~kbq.types.Filters` or
    a dict of ``source``, ``content_type``, ``entity_name``."""

    def semantic(
        self, query: str, limit: Optional[int] = None, filters: Optional[ops.Filters] = None
    ) -> t.RagAnswer:
        return self._client._send(ops.rag("semantic", query, limit, filters))

    def keyword(
        self, query: str, limit: Optional[int] = None, filters: Optional[ops.Filters] = None
    ) -> t.RagAnswer:
        return self._client._send(ops.rag("keyword", query, limit, filters))

    def hybrid(
        self,
        query: str,
        limit: Optional[int] = None,
        filters: Optional[ops.Filters] = None,
        graph_depth: Optional[int] = None,
    ) -> t.RagAnswer:
        return self._client._send(ops.rag("hybrid", query, limit, filters, graph_depth))


class Ingest(_Resource):
    """Upserts and deletes, and raw documents (sources) read into the graph by jobs (scope
    ``write``). Records are the :mod:`kbq.types` dataclasses (``NewEntity``,
    ``NewRelationship``, ``NewDocument``) or dicts of the same fields. Upserts are idempotent,
    so they are retried after a 429 or 503 like the queries; so is a source's submission (kbq
    refuses it before starting a job)."""

    def entities(self, records: Sequence[Union[t.NewEntity, Mapping[str, Any]]]) -> t.BatchReport:
        return self._client._send(ops.ingest("entities", records))

    def relationships(
        self, records: Sequence[Union[t.NewRelationship, Mapping[str, Any]]]
    ) -> t.BatchReport:
        return self._client._send(ops.ingest("relationships", records))

    def documents(
        self, records: Sequence[Union[t.NewDocument, Mapping[str, Any]]]
    ) -> t.BatchReport:
        return self._client._send(ops.ingest("documents", records))

    def ndjson(self, records: Union[bytes, str, Sequence[Mapping[str, Any]]]) -> t.NdjsonReport:
        """Imports NDJSON: bytes or text as they are, or records (dicts with ``kind``), one
        per line."""
        return self._client._send(ops.ingest_ndjson(records))

    def delete_entity(self, name: str) -> t.EntityDeletion:
        return self._client._send(ops.delete_entity(name))

    def delete_document(self, id: str) -> t.DocumentDeletion:
        return self._client._send(ops.delete_document(id))

    def add_source(
        self,
        source: str,
        source_id: str,
        content: str,
        content_type: Optional[str] = None,
        title: Optional[str] = None,
        url: Optional[str] = None,
    ) -> t.JobView:
        """Submits a document's text as the source ``source_id`` of ``source``:
        ``content_type`` ``text/plain`` (the server's default), ``text/markdown`` or
        ``text/html``. Answers at once with its job, queued: kbq chunks the text and extracts
        entities and relationships in the background (:meth:`wait` for it, or follow it
        with :meth:`job_events`). Submitting the same pair again replaces what it said."""
        return self._client._send(
            ops.submit_source(source, source_id, content, content_type, title, url)
        )

    def upload_source(
        self,
        file: ops.Upload,
        source: Optional[str] = None,
        source_id: Optional[str] = None,
        title: Optional[str] = None,
        url: Optional[str] = None,
        *,
        content_type: Optional[str] = None,
        file_name: Optional[str] = None,
    ) -> t.JobView:
        """Uploads a document (Markdown, HTML, PDF, DOCX or plain text) as a source; answers
        with its job, as :meth:`add_source` does. ``file`` is a path, the bytes, or a file
        opened in binary mode. Its format is ``content_type`` when given, else the file
        name's extension: ``file_name``, else the path's or the file object's name.
        ``source`` defaults to ``upload`` and ``source_id`` to the file name."""
        return self._client._send(
            ops.upload_source(file, source, source_id, title, url, content_type, file_name)
        )

    def job(self, job_id: str) -> t.JobView:
        """An ingestion job: its status, progress and counts (``NotFoundError`` when this
        key has no job of that id)."""
        return self._client._send(ops.job(job_id))

    def wait(self, job_id: str, timeout: Optional[float] = None) -> t.JobView:
        """Reads the job until it has ended (``succeeded``, ``failed`` or ``cancelled``),
        every 0.25 s at first and at most every 2 s, and returns it; when ``timeout``
        seconds pass first, returns it as it stands. Check its ``status`` either way."""
        return self._client._poll(
            ops.job(job_id), lambda job: job.status in ops.FINAL_STATUSES, timeout
        )

    def job_events(self, job_id: str) -> Any:
        """Follows a job: a :class:`~kbq.JobEventStream` (an
        :class:`~kbq.AsyncJobEventStream` from the async client) of ``progress`` events, each
        with the job, at once and at each change, then one ``end`` event with the job as it
        ended."""
        return self._client._stream(ops.job_events(job_id))

    def cancel_job(self, job_id: str) -> t.JobView:
        """Cancels a job; answers it ``cancelled``, or as it had ended."""
        return self._client._send(ops.cancel_job(job_id))

    def delete_source(self, source: str, source_id: str) -> t.SourceRetraction:
        """Retracts a source: its chunks, and the entities and relationships no other source
        (nor an import) supports (``NotFoundError`` when it was never ingested)."""
        return self._client._send(ops.delete_source(source, source_id))

    def list_sources(self) -> t.SourceList:
        """The sources ingested into the workspace: the 1,000 most recent, newest first,
        and ``total``, how many there are."""
        return self._client._send(ops.list_sources())


class Agent(_Resource):
    """The tool-using agent."""

    def chat(
        self,
        message: str,
        system_prompt: Optional[str] = None,
        history: Optional[ops.History] = None,
        temperature: Optional[float] = None,
        max_tokens: Optional[int] = None,
        *,
        retry: bool = False,
    ) -> t.ChatResponse:
        """Answers ``message``; the answer lists every tool call. Not retried after a 429 or
        503 unless ``retry=True`` (a chat may store memories)."""
        return self._client._send(
            ops.chat(message, system_prompt, history, temperature, max_tokens, False, retry)
        )

    def chat_stream(
        self,
        message: str,
        system_prompt: Optional[str] = None,
        history: Optional[ops.History] = None,
        temperature: Optional[float] = None,
        max_tokens: Optional[int] = None,
        *,
        retry: bool = False,
    ) -> Any:
        """:meth:`chat`, streamed: a :class:`~kbq.ChatStream` (an
        :class:`~kbq.AsyncChatStream` from the async client) of the turn's events as they
        happen, ending with ``done``, whose data is the answer :meth:`chat` returns."""
        return self._client._stream(
            ops.chat(message, system_prompt, history, temperature, max_tokens, True, retry)
        )

    def health(self) -> t.HealthReport:
        """The providers' health: ``healthy``, ``degraded`` or ``unhealthy`` (an unhealthy
        report is returned, not raised)."""
        return self._client._send(ops.health())


class Admin(_Resource):
    """The admin API: workspaces, and the keys of each (an ``admin`` key of ``default``, an
    operator's; any other key gets ``PermissionDeniedError``, code ``insufficient_scope``).
    A workspace that does not exist raises ``NotFoundError``, code ``workspace_not_found``."""

    def create_workspace(
        self, name: str, quota: Optional[Mapping[str, int]] = None
    ) -> t.WorkspaceView:
        """Creates the workspace ``name`` (1-63 characters of ``a-z``, ``0-9`` and ``-``,
        starting with a letter): an empty knowledge base of its own, with no keys yet. One
        that exists (``default`` always does) raises an ``APIError`` with status 409, code
        ``conflict``. ``quota`` (``max_entities``, ``max_documents``,
        ``max_document_bytes``, 0 for no bound; ``graph_per_minute``, ``graph_burst``,
        ``agent_per_minute``, ``agent_burst``, the rate budgets its keys share, 0 a minute for
        none) sets its own bounds over the server's."""
        return self._client._send(ops.create_workspace(name, quota))

    def set_workspace_quota(self, name: str, quota: Mapping[str, int]) -> t.WorkspaceView:
        """Sets what the workspace ``name`` may hold, as a whole: each of ``max_entities``,
        ``max_documents`` and ``max_document_bytes`` given replaces the server's bound (0
        for no bound), and each of ``graph_per_minute``, ``graph_burst``,
        ``agent_per_minute`` and ``agent_burst`` its rate budget (0 a minute for none); each
        left out goes back to the server's. ``default`` has no quota (409 ``conflict``)."""
        return self._client._send(ops.set_workspace_quota(name, quota))

    def list_workspaces(self) -> t.WorkspaceList:
        """Every workspace, ``default`` first, then by name, with what each holds."""
        return self._client._send(ops.list_workspaces())

    def get_workspace(self, name: str) -> t.WorkspaceView:
        """The workspace ``name``, as the list shows it."""
        return self._client._send(ops.get_workspace(name))

    def delete_workspace(self, name: str) -> t.WorkspaceDeletion:
        """Deletes a workspace and everything in it: its knowledge, its sources and jobs, and
        its keys, which stop working at once. ``default`` cannot be deleted (409
        ``conflict``)."""
        return self._client._send(ops.delete_workspace(name))

    def mint_key(self, workspace: str, scopes: Sequence[str], name: str) -> t.MintedKey:
        """Mints a key of ``workspace`` with ``scopes`` (``read``, ``write``, ``agent``,
        ``admin``; at least one, each once) and a ``name`` for people and logs. The answer's
        ``key`` is the secret, shown this once: kbq keeps only its hash. Not retried after a
        429 or 503."""
        return self._client._send(ops.mint_key(workspace, scopes, name))

    def list_keys(self, workspace: str) -> t.KeyList:
        """The keys minted for ``workspace``, oldest first, never their secrets (configured
        keys are not listed)."""
        return self._client._send(ops.list_keys(workspace))

    def revoke_key(self, workspace: str, key_id: str) -> t.KeyRevocation:
        """Revokes the key ``key_id`` (a ``MintedKey``'s or ``KeyView``'s ``id``) of
        ``workspace``: it stops working at once. ``NotFoundError`` (code ``not_found``) when
        the workspace has no key of that id."""
        return self._client._send(ops.revoke_key(workspace, key_id))

    def export(self, workspace: Optional[str] = None) -> Any:
        """The knowledge base of ``workspace`` (default ``default``) in kbq's import format,
        as it streams in: an iterator (an async iterator from the async client) of records,
        each a ``dict`` of a line, the last of kind ``end`` with the counts written. It is
        read a piece at a time, never held whole: write each record to a file as a line of
        JSON for a backup that ``kbq import`` reads. A stream that stops before its ``end``
        record raises ``KbqError``. ``NotFoundError`` (code ``workspace_not_found``) when
        there is no such workspace."""
        return self._client._records(ops.export(workspace))
