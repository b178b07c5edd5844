// Type-checked by the tests (tsc, strict), never run: the declared types fit what the client
// returns and takes.

import {
  APIError,
  BadRequestError,
  Client,
  type ChatResponse,
  type ChatStreamEvent,
  type Entity,
  type TraversalResponse,
} from "@kbq/client";

export async function use(client: Client): Promise<void> {
  const walk: TraversalResponse = await client.graph.traverse({ entity_name: "Alan Turing", depth: 1 });
  const first: string = walk.entities_found[0].name;
  const depth: number = walk.entities_found[0].depth;
  const maybe: Entity | null = await client.graph.entity(first);
  if (maybe) console.log(maybe.properties, depth);
  const reply: ChatResponse = await client.agent.chat({ message: "hi", max_tokens: 100 });
  console.log(reply.tool_calls.map((c) => c.tool));
  const stream = await client.agent.chatStream({ message: "hi" }, { signal: new AbortController().signal });
  for await (const e of stream) {
    const event: ChatStreamEvent = e;
    if (event.event === "tool_call.completed") console.log(event.data.duration_ms, event.data.error);
    if (event.event === "done") console.log(event.data.success);
  }
  try {
    await client.rag.hybrid({ query: "q", limit: 3, graph_depth: 1, filters: { source: "s" } });
    await client.ingest.entities([{ name: "n", entity_type: "t" }]);
  } catch (e) {
    if (e instanceof BadRequestError) console.log(e.field, e.status);
    if (e instanceof APIError) console.log(e.requestId, e.retryAfter);
  }
}
