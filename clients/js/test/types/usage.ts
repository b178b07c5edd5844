// Type-checked by the tests (tsc, strict), never run: the declared types fit what the client
// returns and takes.

import {
  APIError,
  BadRequestError,
  Client,
  type ChatResponse,
  type ChatStreamEvent,
  type Entity,
  type JobEvent,
  type JobStatus,
  type JobView,
  type KeyList,
  type KeyScope,
  type MergesResponse,
  type MintedKey,
  type SourceRetraction,
  type TraversalResponse,
  type WorkspaceView,
} from "@kbq/client";

export async function use(client: Client): Promise<void> {
  const walk: TraversalResponse = await client.graph.traverse({ entity_name: "Alan Turing", depth: 1 });
  const first: string = walk.entities_found[0].name;
  const depth: number = walk.entities_found[0].depth;
  const maybe: Entity | null = await client.graph.entity(first);
  if (maybe) console.log(maybe.properties, depth);
  const page: MergesResponse = await client.graph.merges({ limit: 10 });
  for (const m of page.merges) console.log(m.alias, m.entity, m.chunks.map((c) => `${c.source}/${c.source_id}#${c.position}`));
  if (page.next_after) await client.graph.merges({ entity_name: first, after: page.next_after });
  await client.graph.merges();
  const reply: ChatResponse = await client.agent.chat({ message: "hi", max_tokens: 100 });
  console.log(reply.tool_calls.map((c) => c.tool));
  const stream = await client.agent.chatStream({ message: "hi" }, { signal: new AbortController().signal });
  for await (const e of stream) {
    const event: ChatStreamEvent = e;
    if (event.event === "tool_call.completed") console.log(event.data.duration_ms, event.data.error);
    if (event.event === "done") console.log(event.data.success);
  }
  const job: JobView = await client.ingest.addSource({ source: "s", source_id: "1", content: "text", content_type: "text/markdown" });
  const uploaded = await client.ingest.uploadSource(new Uint8Array([104, 105]), { file_name: "hi.txt", title: "Hi" });
  await client.ingest.uploadSource(new Blob(["<p>hi</p>"], { type: "text/html" }), { source_id: "page" });
  const ended: JobView = await client.ingest.wait(job.job_id, { timeout: 60_000 });
  const status: JobStatus = ended.status;
  console.log(status, ended.counts.entities_added, ended.error, uploaded.source_id);
  const events = await client.ingest.jobEvents(job.job_id);
  for await (const e of events) {
    const event: JobEvent = e;
    console.log(event.event, event.data.chunks_done, event.data.chunks_total);
  }
  const last: JobView = await events.untilEnd();
  console.log(last.status, (await client.ingest.cancelJob(job.job_id)).status, (await client.ingest.job(job.job_id)).updated_at);
  const gone: SourceRetraction = await client.ingest.deleteSource("s", "1");
  console.log(gone.deleted, gone.chunks, gone.entities, gone.relationships);
  try {
    await client.rag.hybrid({ query: "q", limit: 3, graph_depth: 1, filters: { source: "s" } });
    await client.ingest.entities([{ name: "n", entity_type: "t" }]);
  } catch (e) {
    if (e instanceof BadRequestError) console.log(e.field, e.status);
    if (e instanceof APIError) console.log(e.requestId, e.retryAfter);
  }
  const made: WorkspaceView = await client.admin.createWorkspace({ name: "team" });
  console.log(made.created_at ?? "default", made.counts.entities, made.index_bytes);
  const scopes: KeyScope[] = ["read", "write"];
  const minted: MintedKey = await client.admin.mintKey("team", { scopes, name: "team key" });
  const inTeam = new Client({ apiKey: minted.key });
  const asOperator = new Client({ workspace: made.name });
  const where: string | null = asOperator.workspace;
  console.log(where, await inTeam.graph.entity("x"), await asOperator.graph.entity("x"));
  for (const w of (await client.admin.listWorkspaces()).workspaces) console.log(w.name, w.counts.memories);
  console.log((await client.admin.getWorkspace("team")).name);
  const keys: KeyList = await client.admin.listKeys("team");
  for (const k of keys.keys) console.log(k.id, k.name, k.scopes.join(), k.workspace, k.created_at);
  console.log((await client.admin.revokeKey("team", minted.id)).revoked);
  console.log((await client.admin.deleteWorkspace("team", { signal: new AbortController().signal })).deleted);
}
