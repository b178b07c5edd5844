// The client against real kbq servers (test/servers.js): every resource, streaming, errors,
// retries, cancellation, deprecation and the environment.

import assert from "node:assert/strict";
import net from "node:net";
import { after, before, describe, test } from "node:test";

import * as kbq from "../src/index.js";
import { KEY, READ_KEY, startKbq } from "./support/servers.js";

let main;
let limited;
let deprecated;
let client;

before(async () => {
  [main, limited, deprecated] = await Promise.all([startKbq(), startKbq({ limited: true }), startKbq({ deprecated: true })]);
  client = new kbq.Client({ baseUrl: main.url, apiKey: KEY });
});

after(async () => {
  await Promise.all([main, limited, deprecated].filter(Boolean).map((s) => s.stop()));
});

describe("graph", () => {
  test("traverse, search, entity and documents answer as the API does", async () => {
    const walk = await client.graph.traverse({ entity_name: "Alan Turing", depth: 1 });
    assert.equal(walk.entity_name, "Alan Turing");
    assert.deepEqual([walk.entities_found[0].name, walk.entities_found[0].depth], ["Alan Turing", 0]);
    assert.ok(walk.entities_found.slice(1).every((e) => e.depth === 1));
    assert.equal(walk.total_entities, walk.entities_found.length);
    const some = await client.graph.traverse({ entity_name: "Alan Turing", relationship_types: ["influenced"], direction: "in", depth: 1, limit: 3 });
    assert.ok(some.entities_found.length <= 3);
    assert.ok(some.relationships.every((r) => r.relationship_type === "influenced"));

    const found = await client.graph.search({ query: "turing", limit: 5 });
    const names = found.results.map((e) => e.name);
    assert.ok(names.indexOf("Turing machine") < names.indexOf("Alan Turing"), names.join());

    const turing = await client.graph.entity("Alan Turing");
    assert.equal(turing.properties.born, 1912);
    assert.equal(await client.graph.entity("Nobody at all"), null);
    assert.equal(await client.graph.entity("a/b %2F c"), null);

    const docs = await client.graph.documents({ entity_name: "Alan Turing", max_depth: 1, limit: 3 });
    assert.ok(docs.results.length > 0 && docs.results.length <= 3);
  });

  test("stats, the sources and the calling key", async () => {
    const stats = await client.graph.stats();
    assert.ok(stats.entities > 0 && stats.relationships > 0 && stats.documents > 0);
    const listed = await client.ingest.listSources();
    assert.equal(listed.total, listed.sources.length);
    const me = await client.keyInfo();
    assert.equal(me.workspace, "default");
    assert.equal(me.can.read, true);
  });

  test("merges: a page at a time, limit checked", async () => {
    // The demo has no ingested sources, hence no merges: one empty, last page.
    assert.deepEqual(await client.graph.merges({ limit: 10 }), { merges: [], next_after: null });
    assert.deepEqual(await client.graph.merges(), { merges: [], next_after: null });
    assert.deepEqual(await client.graph.merges({ entity_name: "Alan Turing", after: "A" }), { merges: [], next_after: null });
    const e = await client.graph.merges({ limit: 0 }).catch((x) => x);
    assert.ok(e instanceof kbq.BadRequestError, String(e));
    assert.deepEqual([e.status, e.code, e.field], [400, "invalid_request", "limit"]);
  });
});

test("rag methods", async () => {
  for (const method of ["semantic", "keyword", "hybrid"]) {
    const answer = await client.rag[method]({ query: "Enigma codebreakers", limit: 2 });
    assert.equal(answer.method, method);
    assert.ok(answer.results.length <= 2 && answer.total === answer.results.length);
  }
  const none = await client.rag.keyword({ query: "Enigma", filters: { source: "no-such-source" } });
  assert.deepEqual(none.results, []);
});

test("ingest and delete", async () => {
  let report = await client.ingest.entities([{ name: "JS Client Test", entity_type: "test", properties: { n: 1 } }]);
  assert.deepEqual(report, { received: 1, written: 1, failures: [] });
  report = await client.ingest.relationships([{ source_name: "JS Client Test", target_name: "Alan Turing", relationship_type: "tests" }]);
  assert.equal(report.written, 1);
  report = await client.ingest.documents([
    { title: "JS client", content: "written by the JavaScript client", source: "js", source_id: "js-1", content_type: "text/plain", entity_name: "JS Client Test" },
  ]);
  assert.equal(report.written, 1);
  const nd = await client.ingest.ndjson([{ kind: "entity", name: "JS Ndjson", entity_type: "test" }]);
  assert.deepEqual([nd.records, nd.entities], [1, 1]);
  const hit = await client.rag.keyword({ query: "written by the JavaScript client", limit: 1 });
  assert.equal((await client.ingest.deleteDocument(hit.results[0].id)).deleted, true);
  assert.equal((await client.ingest.deleteEntity("JS Client Test")).deleted, true);
  assert.equal((await client.ingest.deleteEntity("JS Ndjson")).deleted, true);
  assert.equal(await client.graph.entity("JS Client Test"), null);
});

describe("sources", () => {
  test("a source is ingested, read, followed and retracted", async () => {
    // The built-in provider extracts nothing: the job stores the chunks, asks no model, succeeds.
    const job = await client.ingest.addSource({
      source: "js sources",
      source_id: "notes/engine 1.md",
      content: "# JS notes\n\nThe JavaScript client wrote this note about the Difference Engine.",
      content_type: "text/markdown",
      url: "https://example.com/js/1",
    });
    assert.deepEqual([job.source, job.source_id], ["js sources", "notes/engine 1.md"]);
    assert.ok(["queued", "running", "succeeded"].includes(job.status), job.status);
    assert.equal(typeof job.counts.entities_added, "number");

    const done = await client.ingest.wait(job.job_id, { timeout: 30_000 });
    assert.equal(done.status, "succeeded", done.error);
    assert.ok(done.counts.chunks >= 1 && done.chunks_done === done.chunks_total && done.chunks_total === done.counts.chunks);
    assert.deepEqual([done.counts.model_calls, done.error], [0, null]);
    assert.deepEqual(await client.ingest.job(job.job_id), done);
    const found = await client.rag.keyword({ query: "JavaScript client wrote this note", filters: { source: "js sources" } });
    assert.deepEqual(found.results.map((r) => [r.title, r.url]), [["JS notes", "https://example.com/js/1"]]);

    // A job that has ended: one `progress` and the `end`, both the job as it ended.
    const stream = await client.ingest.jobEvents(job.job_id);
    assert.ok(stream instanceof kbq.JobEventStream && stream.requestId);
    const events = [];
    for await (const e of stream) events.push(e);
    assert.deepEqual(events, [{ event: "progress", data: done }, { event: "end", data: done }]);
    assert.deepEqual(stream.final, done);
    // Cancelling a job that has ended answers it as it ended.
    assert.deepEqual(await client.ingest.cancelJob(job.job_id), done);

    const gone = await client.ingest.deleteSource("js sources", "notes/engine 1.md");
    assert.deepEqual(gone, { deleted: true, chunks: done.counts.chunks, entities: 0, relationships: 0 });
    const none = await client.rag.keyword({ query: "JavaScript client wrote this note", filters: { source: "js sources" } });
    assert.deepEqual(none.results, []);
    const e = await client.ingest.deleteSource("js sources", "notes/engine 1.md").catch((x) => x);
    assert.ok(e instanceof kbq.NotFoundError);
    assert.equal(e.code, "not_found");
  });

  test("a running job is followed to its end", async () => {
    const job = await client.ingest.addSource({ source: "js-sources", source_id: "followed", content: "A note followed as it is read. ".repeat(200) });
    const stream = await client.ingest.jobEvents(job.job_id);
    const seen = [];
    for await (const e of stream) seen.push(e.event);
    assert.equal(seen.at(-1), "end");
    assert.ok(seen.slice(0, -1).every((name) => name === "progress") && seen.length >= 2);
    assert.equal(stream.final.status, "succeeded");
    assert.deepEqual(await client.ingest.job(job.job_id), stream.final);
    const again = await (await client.ingest.jobEvents(job.job_id)).untilEnd();
    assert.deepEqual(again, stream.final);
    assert.equal((await client.ingest.deleteSource("js-sources", "followed")).deleted, true);
  });

  test("files are uploaded from bytes, a Blob or a File", async () => {
    const markdown = new TextEncoder().encode("# Uploaded\n\nA Markdown file the JavaScript client uploaded as bytes.");
    let job = await client.ingest.uploadSource(markdown, { source: "js-uploads", file_name: "uploaded.md" });
    // The source id defaults to the file name, whose extension tells the format.
    assert.deepEqual([job.source, job.source_id], ["js-uploads", "uploaded.md"]);
    assert.equal((await client.ingest.wait(job.job_id, { timeout: 30_000 })).status, "succeeded");
    let hit = (await client.rag.keyword({ query: "uploaded as bytes", filters: { source: "js-uploads" } })).results;
    assert.deepEqual([hit[0].title, hit[0].content_type], ["Uploaded", "text/markdown"]);

    // A Blob's type tells the format; with no name, the source id is needed.
    const page = new Blob(["<html><head><title>Blob page</title></head><body><p>Uploaded as a Blob.</p></body></html>"], { type: "text/html" });
    job = await client.ingest.uploadSource(page, { source: "js-uploads", source_id: "page" });
    assert.equal((await client.ingest.wait(job.job_id, { timeout: 30_000 })).status, "succeeded");
    hit = (await client.rag.keyword({ query: "Uploaded as a Blob", filters: { source: "js-uploads" } })).results;
    assert.deepEqual([hit[0].title, hit[0].content_type], ["Blob page", "text/html"]);

    const uploads = [["js-uploads", "uploaded.md"], ["js-uploads", "page"]];
    if (typeof File !== "undefined") {
      // A File's name is the file name (Node 20+ and browsers have File); `source` defaults to "upload".
      job = await client.ingest.uploadSource(new File(["Plain words in a File."], "js-file.txt"), { title: "Given title" });
      assert.deepEqual([job.source, job.source_id], ["upload", "js-file.txt"]);
      assert.equal((await client.ingest.wait(job.job_id, { timeout: 30_000 })).status, "succeeded");
      hit = (await client.rag.keyword({ query: "Plain words in a File", filters: { source: "upload" } })).results;
      assert.deepEqual([hit[0].title, hit[0].content_type], ["Given title", "text/plain"]);
      uploads.push(["upload", "js-file.txt"]);
    }

    for (const [source, sourceId] of uploads) assert.equal((await client.ingest.deleteSource(source, sourceId)).deleted, true);
  });

  test("waiting stops at its timeout, or when aborted", async () => {
    const job = await client.ingest.addSource({ source: "js-sources", source_id: "waited", content: "Waited for. ".repeat(100) });
    // No time to wait: the job as it stands, whatever its status.
    const now = await client.ingest.wait(job.job_id, { timeout: 0 });
    assert.equal(now.job_id, job.job_id);
    const controller = new AbortController();
    controller.abort();
    await assert.rejects(client.ingest.wait(job.job_id, { signal: controller.signal }), kbq.APIUserAbortError);
    assert.equal((await client.ingest.wait(job.job_id)).status, "succeeded");
    assert.equal((await client.ingest.deleteSource("js-sources", "waited")).deleted, true);
  });

  test("errors", async () => {
    let e = await client.ingest.uploadSource(new Uint8Array([77, 90]), { source_id: "program", file_name: "program.exe" }).catch((x) => x);
    assert.ok(e instanceof kbq.APIError, String(e));
    assert.deepEqual([e.status, e.code, e.field], [415, "unsupported_media_type", "content_type"]);
    e = await client.ingest.addSource({ source: "js-sources", source_id: "png", content: "not a picture", content_type: "image/png" }).catch((x) => x);
    assert.equal(e.code, "unsupported_media_type");
    e = await client.ingest.uploadSource(new Uint8Array([1, 2, 3])).catch((x) => x);
    assert.ok(e instanceof kbq.BadRequestError);
    assert.equal(e.field, "source_id");
    e = await client.ingest.addSource({ source: "js-sources", source_id: "", content: "text" }).catch((x) => x);
    assert.deepEqual([e.status, e.field], [400, "source_id"]);
    await assert.rejects(client.ingest.uploadSource("a path or text"), kbq.KbqError);
    await assert.rejects(client.ingest.job("no-such-job"), kbq.NotFoundError);
    await assert.rejects(client.ingest.jobEvents("no-such-job"), kbq.NotFoundError);
    await assert.rejects(client.ingest.cancelJob("no-such-job"), kbq.NotFoundError);
    const reader = new kbq.Client({ baseUrl: main.url, apiKey: READ_KEY });
    await assert.rejects(reader.ingest.addSource({ source: "js-sources", source_id: "read-only", content: "text" }), kbq.PermissionDeniedError);
  });
});

describe("admin", () => {
  /** The error `promise` rejects with. */
  const failure = (promise) => promise.then((v) => assert.fail(`resolved: ${JSON.stringify(v)}`), (e) => e);

  test("workspaces and their keys, and the workspace option", async () => {
    const made = await client.admin.createWorkspace({ name: "js-team" });
    assert.deepEqual([made.name, made.index_bytes, made.counts], ["js-team", 0, { entities: 0, relationships: 0, documents: 0, memories: 0 }]);
    assert.ok(made.created_at);
    let e = await failure(client.admin.createWorkspace({ name: "js-team" }));
    assert.ok(e instanceof kbq.APIError && !(e instanceof kbq.BadRequestError), String(e));
    assert.deepEqual([e.status, e.code], [409, "conflict"]);
    e = await failure(client.admin.createWorkspace({ name: "JS Team" }));
    assert.ok(e instanceof kbq.BadRequestError);
    assert.equal(e.field, "name");
    // Its own quota, over the server's (none here): set, then back to the server's.
    const bounded = await client.admin.createWorkspace({ name: "js-bounded", quota: { max_entities: 3 } });
    assert.deepEqual([bounded.quota.max_entities, bounded.own_quota.max_entities], [3, 3]);
    const unbounded = await client.admin.setWorkspaceQuota("js-bounded", {});
    assert.deepEqual([unbounded.quota.max_entities, unbounded.own_quota.max_entities], [null, null]);
    e = await failure(client.admin.setWorkspaceQuota("default", { max_entities: 1 }));
    assert.deepEqual([e.status, e.code], [409, "conflict"]);
    await client.admin.deleteWorkspace("js-bounded");

    const minted = await client.admin.mintKey("js-team", { scopes: ["read", "write"], name: "js team" });
    assert.deepEqual([minted.workspace, minted.scopes, minted.name], ["js-team", ["read", "write"], "js team"]);
    assert.match(minted.id, /^[0-9a-f]{32}$/);
    // The minted key acts in its workspace: an empty knowledge base, then its own writes,
    // which the default workspace does not see.
    const team = new kbq.Client({ baseUrl: main.url, apiKey: minted.key });
    assert.equal(team.workspace, null);
    assert.equal(await team.graph.entity("Alan Turing"), null);
    assert.equal((await team.ingest.entities([{ name: "JS Team Only", entity_type: "test" }])).written, 1);
    assert.equal((await team.graph.entity("JS Team Only")).name, "JS Team Only");
    e = await failure(team.admin.listWorkspaces());
    assert.ok(e instanceof kbq.PermissionDeniedError);
    assert.equal(e.code, "insufficient_scope");
    assert.equal(await client.graph.entity("JS Team Only"), null);
    e = await failure(new kbq.Client({ baseUrl: main.url, apiKey: minted.key, workspace: "default" }).graph.entity("Alan Turing"));
    assert.ok(e instanceof kbq.PermissionDeniedError);
    assert.deepEqual([e.status, e.code], [403, "workspace_forbidden"]);

    // The operator's key reaches the workspace with the option; other keys may not.
    const operator = new kbq.Client({ baseUrl: main.url, apiKey: KEY, workspace: "js-team" });
    assert.equal(operator.workspace, "js-team");
    assert.equal((await operator.graph.entity("JS Team Only")).name, "JS Team Only");
    assert.equal(await operator.graph.entity("Alan Turing"), null);
    // The admin API names its workspaces in the path: the header changes nothing there.
    assert.equal((await operator.admin.getWorkspace("default")).name, "default");
    e = await failure(new kbq.Client({ baseUrl: main.url, apiKey: READ_KEY, workspace: "js-team" }).graph.entity("JS Team Only"));
    assert.ok(e instanceof kbq.PermissionDeniedError);
    assert.deepEqual([e.status, e.code], [403, "workspace_forbidden"]);
    e = await failure(new kbq.Client({ baseUrl: main.url, apiKey: KEY, workspace: "js-nowhere" }).graph.entity("Ada"));
    assert.ok(e instanceof kbq.NotFoundError);
    assert.deepEqual([e.status, e.code], [404, "workspace_not_found"]);

    const listed = await client.admin.listWorkspaces();
    assert.deepEqual([listed.workspaces[0].name, listed.workspaces[0].created_at], ["default", null]);
    const listedTeam = listed.workspaces.find((w) => w.name === "js-team");
    assert.equal(listedTeam.counts.entities, 1);
    const shown = await client.admin.getWorkspace("js-team");
    assert.deepEqual([shown.created_at, shown.counts], [made.created_at, listedTeam.counts]);
    e = await failure(client.admin.getWorkspace("js-nowhere"));
    assert.ok(e instanceof kbq.NotFoundError);
    assert.equal(e.code, "workspace_not_found");
    e = await failure(new kbq.Client({ baseUrl: main.url, apiKey: READ_KEY }).admin.listWorkspaces());
    assert.ok(e instanceof kbq.PermissionDeniedError);
    assert.equal(e.code, "insufficient_scope");

    // Keys are listed without their secrets, and revoked.
    const teamAdmin = await client.admin.mintKey("js-team", { scopes: ["admin"], name: "js team admin" });
    const keys = await client.admin.listKeys("js-team");
    assert.deepEqual(
      keys.keys.map((k) => [k.id, k.name, k.scopes, k.workspace]),
      [
        [minted.id, "js team", ["read", "write"], "js-team"],
        [teamAdmin.id, "js team admin", ["admin"], "js-team"],
      ],
    );
    assert.ok(!JSON.stringify(keys).includes(minted.key));
    // An `admin` key of another workspace holds every scope there, but manages no workspace.
    const teamAdminClient = new kbq.Client({ baseUrl: main.url, apiKey: teamAdmin.key });
    assert.equal((await teamAdminClient.graph.entity("JS Team Only")).name, "JS Team Only");
    e = await failure(teamAdminClient.admin.listKeys("js-team"));
    assert.ok(e instanceof kbq.PermissionDeniedError);
    assert.equal(e.code, "insufficient_scope");
    assert.deepEqual(await client.admin.revokeKey("js-team", minted.id), { id: minted.id, revoked: true });
    await assert.rejects(team.graph.entity("JS Team Only"), kbq.AuthenticationError);
    e = await failure(client.admin.revokeKey("js-team", minted.id));
    assert.ok(e instanceof kbq.NotFoundError);
    assert.equal(e.code, "not_found");
    assert.deepEqual((await client.admin.listKeys("js-team")).keys.map((k) => k.id), [teamAdmin.id]);

    // Deleting the workspace stops its keys at once; `default` cannot be deleted.
    assert.deepEqual(await client.admin.deleteWorkspace("js-team"), { name: "js-team", deleted: true });
    await assert.rejects(teamAdminClient.graph.entity("JS Team Only"), kbq.AuthenticationError);
    e = await failure(client.admin.deleteWorkspace("js-team"));
    assert.ok(e instanceof kbq.NotFoundError);
    assert.equal(e.code, "workspace_not_found");
    e = await failure(client.admin.deleteWorkspace("default"));
    assert.deepEqual([e.status, e.code], [409, "conflict"]);
    assert.ok(!(await client.admin.listWorkspaces()).workspaces.some((w) => w.name === "js-team"));
  });

  test("the export streams every record and ends with its counts", async () => {
    const records = [];
    for await (const r of client.admin.export()) records.push(r);
    const end = records.at(-1);
    assert.equal(end.kind, "end");
    const kinds = records.slice(0, -1).map((r) => r.kind);
    assert.ok(!kinds.includes("end"));
    assert.ok(end.entities > 0);
    assert.equal(end.entities, kinds.filter((k) => k === "entity").length);
    assert.equal(end.relationships, kinds.filter((k) => k === "relationship").length);
    assert.equal(end.documents, kinds.filter((k) => k === "document").length);
    assert.ok(records.some((r) => r.kind === "entity" && r.name === "Alan Turing"));

    // Another workspace's export holds its own knowledge only.
    await client.admin.createWorkspace({ name: "js-export" });
    const operator = new kbq.Client({ baseUrl: main.url, apiKey: KEY, workspace: "js-export" });
    await operator.ingest.entities([{ name: "Exported Only", entity_type: "test" }]);
    const theirs = [];
    for await (const r of client.admin.export({ workspace: "js-export" })) theirs.push(r);
    assert.deepEqual(theirs.filter((r) => r.kind === "entity").map((r) => r.name), ["Exported Only"]);
    assert.equal(theirs.at(-1).entities, 1);
    const drain = async (iterable) => {
      for await (const _ of iterable);
    };
    let e = await failure(drain(client.admin.export({ workspace: "js-nowhere" })));
    assert.ok(e instanceof kbq.NotFoundError);
    assert.equal(e.code, "workspace_not_found");
    e = await failure(drain(client.admin.export({ workspace: "Not A Name" })));
    assert.ok(e instanceof kbq.BadRequestError);
    assert.equal(e.field, "workspace");
    // A caller that stops early lets go: the next request is answered.
    for await (const _ of client.admin.export()) break;
    assert.equal((await client.admin.getWorkspace("js-export")).counts.entities, 1);
    await client.admin.deleteWorkspace("js-export");
  });
});

test("a streamed chat reports each call and ends with the answer chat returns", async () => {
  const reply = await client.agent.chat({ message: "Who influenced Alan Turing?" });
  assert.equal(reply.success, true);
  assert.deepEqual(reply.tool_calls.map((c) => c.tool), ["KnowledgeGraphTool", "HybridSearchTool"]);

  const stream = await client.agent.chatStream({ message: "Who influenced Alan Turing?" });
  assert.ok(stream.requestId);
  const events = [];
  for await (const e of stream) events.push(e);
  assert.deepEqual(
    events.map((e) => e.event),
    ["tool_call.started", "tool_call.started", "tool_call.completed", "tool_call.completed", "delta", "done"],
  );
  assert.equal(events[0].data.index, 0);
  assert.ok(events.filter((e) => e.event === "tool_call.completed").every((e) => e.data.duration_ms >= 0));
  assert.equal(events[4].data.text, reply.response);
  assert.deepEqual(stream.final, reply);
  assert.deepEqual(events[5].data, reply);

  const again = await (await client.agent.chatStream({ message: "Who influenced Alan Turing?" })).untilDone();
  assert.deepEqual(again, reply);
});

test("an abort signal cancels a request and a stream", async () => {
  const controller = new AbortController();
  controller.abort();
  await assert.rejects(client.graph.entity("Alan Turing", { signal: controller.signal }), kbq.APIUserAbortError);
  const streaming = new AbortController();
  const stream = await client.agent.chatStream({ message: "Who influenced Alan Turing?" }, { signal: streaming.signal });
  streaming.abort();
  await assert.rejects(async () => {
    for await (const _ of stream) {
      // the body is aborted
    }
  });
});

test("health", async () => {
  const report = await client.agent.health();
  assert.equal(report.status, "healthy");
  assert.equal(report.providers[0].name, "builtin");
});

test("errors name the status, the code and the field", async () => {
  let e = await client.graph.traverse({ entity_name: "Alan Turing", depth: 99 }).catch((x) => x);
  assert.ok(e instanceof kbq.BadRequestError && e instanceof kbq.APIError);
  assert.deepEqual([e.status, e.code, e.field], [400, "invalid_request", "depth"]);
  assert.ok(e.requestId);

  e = await new kbq.Client({ baseUrl: main.url, apiKey: "not-a-key" }).graph.entity("Alan Turing").catch((x) => x);
  assert.ok(e instanceof kbq.AuthenticationError);
  assert.deepEqual([e.status, e.code], [401, "INVALID_API_KEY"]);

  const reader = new kbq.Client({ baseUrl: main.url, apiKey: READ_KEY });
  assert.ok(await reader.graph.entity("Alan Turing"));
  e = await reader.ingest.deleteEntity("Alan Turing").catch((x) => x);
  assert.ok(e instanceof kbq.PermissionDeniedError);
  assert.equal(e.code, "insufficient_scope");

  e = await new kbq.Client({ baseUrl: "http://127.0.0.1:1", apiKey: KEY, maxRetries: 0 }).graph.entity("x").catch((x) => x);
  assert.ok(e instanceof kbq.APIConnectionError);
  assert.equal(e.status, null);

  // A listener that never answers: the timeout, not a race with a fast answer, ends the request.
  const silent = net.createServer(() => {});
  await new Promise((r) => silent.listen(0, "127.0.0.1", r));
  const silentUrl = `http://127.0.0.1:${silent.address().port}`;
  e = await new kbq.Client({ baseUrl: silentUrl, apiKey: KEY, timeout: 200, maxRetries: 0 })
    .agent.chat({ message: "Who influenced Alan Turing?" })
    .catch((x) => x);
  silent.close();
  silent.unref();
  assert.ok(e instanceof kbq.APITimeoutError, String(e));
});

test("reads are retried after a 429 as Retry-After asks; chats only when asked", async () => {
  const once = new kbq.Client({ baseUrl: limited.url, apiKey: KEY, maxRetries: 0 });
  await once.graph.entity("Alan Turing");
  const e = await once.graph.entity("Alan Turing").catch((x) => x);
  assert.ok(e instanceof kbq.RateLimitError);
  assert.ok(e.retryAfter >= 1000, String(e.retryAfter));
  await new Promise((r) => setTimeout(r, e.retryAfter));

  const patient = new kbq.Client({ baseUrl: limited.url, apiKey: KEY, maxRetries: 3 });
  const began = Date.now();
  for (let i = 0; i < 3; i++) assert.equal((await patient.graph.entity("Alan Turing")).name, "Alan Turing");
  assert.ok(Date.now() - began >= 1500);

  await patient.agent.chat({ message: "hello" });
  await assert.rejects(patient.agent.chat({ message: "hello" }), kbq.RateLimitError);
  assert.equal((await patient.agent.chat({ message: "hello", retry: true })).success, true);
});

test("answers from a deprecated version are reported", async () => {
  const seen = [];
  const c = new kbq.Client({ baseUrl: deprecated.url, apiKey: KEY, onDeprecation: (m) => seen.push(m) });
  assert.equal((await c.graph.entity("Alan Turing")).name, "Alan Turing");
  assert.equal(seen.length, 1);
  assert.match(seen[0], /deprecated; it will be removed after/);
});

test("the environment gives the base URL and the key", () => {
  const saved = { ...process.env };
  try {
    process.env.KBQ_BASE_URL = main.url + "/";
    process.env.KBQ_API_KEY = KEY;
    assert.equal(new kbq.Client().baseUrl, main.url);
    delete process.env.KBQ_API_KEY;
    assert.throws(() => new kbq.Client(), /KBQ_API_KEY/);
  } finally {
    process.env = saved;
  }
});
