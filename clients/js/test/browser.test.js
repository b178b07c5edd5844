// The client in headless Chromium (Debian's package, /usr/bin/chromium or CHROMIUM): a page
// served from one loopback origin calls kbq on another, once with the page's origin in
// kbq's server.cors_origins (every call works, the streams and a file's upload included) and
// once without (the browser refuses: APIConnectionError).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createServer } from "node:http";
import { after, before, test } from "node:test";

import { chromium } from "playwright-core";

import { KEY, startKbq } from "./support/servers.js";

const CLIENT = readFileSync(new URL("../src/index.js", import.meta.url));

/** The page: calls kbq at `kbq`, and leaves what happened in `window.result`. */
const PAGE = (kbq) => `<!doctype html>
<script type="module">
  import { Client } from "/client.js";
  const client = new Client({ baseUrl: ${JSON.stringify(kbq)}, apiKey: ${JSON.stringify(KEY)}, maxRetries: 0 });
  try {
    const entity = await client.graph.entity("Alan Turing");
    const stream = await client.agent.chatStream({ message: "Who influenced Alan Turing?" });
    const events = [];
    for await (const e of stream) events.push(e.event);
    let error = null;
    try { await client.graph.traverse({ entity_name: "Alan Turing", depth: 99 }); } catch (e) { error = [e.name, e.field, e.requestId !== null]; }
    // A File, as an <input type="file"> gives it: uploaded, followed to its end, retracted.
    const file = new File(["<h1>From a page</h1><p>Uploaded by a browser.</p>"], "page.html", { type: "text/html" });
    const job = await client.ingest.uploadSource(file, { source: "browser" });
    const progress = await client.ingest.jobEvents(job.job_id);
    for await (const _ of progress) {}
    const gone = await client.ingest.deleteSource("browser", "page.html");
    const upload = [job.source_id, progress.final.status, gone.deleted];
    window.result = { name: entity.name, events, final: stream.final.success, error, upload };
  } catch (e) {
    window.result = { thrown: e.name };
  }
</script>`;

let page;
let pageOrigin;
let allowed;
let refused;
let browser;

before(async () => {
  page = createServer((req, res) => {
    const url = new URL(req.url, "http://localhost");
    if (url.pathname === "/client.js") {
      res.writeHead(200, { "content-type": "text/javascript" }).end(CLIENT);
    } else {
      res.writeHead(200, { "content-type": "text/html" }).end(PAGE(url.searchParams.get("kbq")));
    }
  });
  await new Promise((resolve) => page.listen(0, "127.0.0.1", resolve));
  pageOrigin = `http://127.0.0.1:${page.address().port}`;
  [allowed, refused] = await Promise.all([startKbq({ corsOrigins: [pageOrigin] }), startKbq()]);
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--no-sandbox"],
  });
});

after(async () => {
  await browser?.close();
  page?.close();
  await Promise.all([allowed, refused].filter(Boolean).map((s) => s.stop()));
});

async function visit(kbq) {
  const tab = await browser.newPage();
  try {
    await tab.goto(`${pageOrigin}/?kbq=${encodeURIComponent(kbq)}`);
    await tab.waitForFunction(() => window.result !== undefined, null, { timeout: 30_000 });
    return await tab.evaluate(() => window.result);
  } finally {
    await tab.close();
  }
}

test("a page of an allowed origin calls kbq, streams a chat, uploads a file and reads errors", async () => {
  const result = await visit(allowed.url);
  assert.equal(result.name, "Alan Turing");
  assert.deepEqual(result.events, ["tool_call.started", "tool_call.started", "tool_call.completed", "tool_call.completed", "delta", "done"]);
  assert.equal(result.final, true);
  // The error body and the request id are readable across origins.
  assert.deepEqual(result.error, ["BadRequestError", "depth", true]);
  assert.deepEqual(result.upload, ["page.html", "succeeded", true]);
});

test("a page of an origin kbq does not list is refused by the browser", async () => {
  const result = await visit(refused.url);
  assert.deepEqual(result, { thrown: "APIConnectionError" });
});
