// The page at /ui/ in headless Chromium (Debian's, /usr/bin/chromium or CHROMIUM), driven by
// playwright-core, against a real kbq (KBQ_BIN, else target/debug/kbq) with the demo
// knowledge base and its built-in agent. Each flow saves screenshots (KBQ_UI_SHOTS, else
// ui/test-results/) and fails on any console error, page error, failed request or error
// answer it did not expect. The timings (first paint, drawing 50, 200 and 2,000 entities) are
// written to timings.json beside the screenshots: reported, not asserted.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";

import { chromium } from "playwright-core";

const KEY = "ui-test-key";
const SHOTS = process.env.KBQ_UI_SHOTS ?? fileURLToPath(new URL("../test-results/", import.meta.url));
mkdirSync(SHOTS, { recursive: true });
const timings = {};

let kbq;
let url;
let browser;
/** The server's data directory, removed once it has stopped. */
let dir;

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
    server.on("error", reject);
  });
}

async function call(method, path, body) {
  const res = await fetch(`${url}${path}`, {
    method,
    headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  assert.ok(res.ok, `${method} ${path}: ${res.status} ${await res.clone().text()}`);
  return res.json();
}

/** A hub named `name` with `n` leaves of type `leafType`. */
async function hub(name, n, leafType = "leaf") {
  const entities = [{ name, entity_type: "hub" }];
  const relationships = [];
  for (let i = 0; i < n; i++) {
    entities.push({ name: `${name} leaf ${i}`, entity_type: leafType });
    relationships.push({ source_name: name, target_name: `${name} leaf ${i}`, relationship_type: "has" });
  }
  for (let i = 0; i < entities.length; i += 5000) await call("POST", "/data/v1/ingest/entities", entities.slice(i, i + 5000));
  for (let i = 0; i < relationships.length; i += 5000) await call("POST", "/data/v1/ingest/relationships", relationships.slice(i, i + 5000));
}

before(async () => {
  const bin = process.env.KBQ_BIN ?? fileURLToPath(new URL("../../target/debug/kbq", import.meta.url));
  const port = await freePort();
  dir = mkdtempSync(join(tmpdir(), "kbq-ui-"));
  url = `http://127.0.0.1:${port}`;
  // kbq reads every KBQ_ variable as configuration: only its own go to it.
  const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("KBQ_")));
  Object.assign(env, { KBQ_API_KEYS: KEY, KBQ_DATA_DIR: dir, KBQ_LOG__LEVEL: "warn" });
  kbq = spawn(bin, ["serve", "--listen", `127.0.0.1:${port}`, "--store", "mem://"], {
    env,
    stdio: ["ignore", "ignore", "inherit"],
  });
  let exited = null;
  kbq.on("exit", (code) => { exited = code; });
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${url}/readyz`)).ok) break;
    } catch (e) {
      if (i % 50 === 49) console.log(`waiting for kbq: ${e.cause?.code ?? e.message}`);
    }
    assert.equal(exited, null, "kbq stopped");
    assert.ok(i < 600, "kbq did not become ready");
    await new Promise((r) => setTimeout(r, 100));
  }
  // Drawings of known sizes: 50, 200 and 2,000 entities, and a hub of 10,000.
  await hub("Hub of 49", 49);
  await hub("Hub of 199", 199);
  // The wheel: itself, 9 leaves and 10 spokes of 198 leaves each, 2,000 entities; one walk
  // from a spoke (it, the wheel and its leaves) is 200, the most a request answers.
  await hub("Wheel", 9);
  const spokes = [];
  for (let i = 0; i < 10; i++) {
    await hub(`Spoke ${i}`, 198);
    spokes.push({ source_name: "Wheel", target_name: `Spoke ${i}`, relationship_type: "holds" });
  }
  await call("POST", "/data/v1/ingest/relationships", spokes);
  await hub("Big hub", 10000);
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    // WebGL from SwiftShader: a headless machine has no GPU.
    args: ["--no-sandbox", "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--disable-quic"],
  });
});

after(async () => {
  await browser?.close();
  if (kbq && kbq.exitCode === null) {
    const exited = new Promise((resolve) => kbq.once("exit", resolve));
    kbq.kill();
    await exited;
  }
  if (dir) rmSync(dir, { recursive: true, force: true });
  writeFileSync(join(SHOTS, "timings.json"), `${JSON.stringify(timings, null, 2)}\n`);
});

/**
 * A new tab that records every console error, page error, failed request and error answer;
 * `expected(url, status)` says which error answers a flow provokes on purpose.
 */
async function tab({ width = 1280, height = 800, expected = () => false } = {}) {
  const context = await browser.newContext({ viewport: { width, height } });
  const page = await context.newPage();
  const problems = [];
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    // Chromium reports an error answer in the console too; those are judged below.
    if (/Failed to load resource: the server responded with a status of/.test(m.text())) return;
    problems.push(`console: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("requestfailed", (r) => {
    // A stream the page closes on purpose (a view left) is aborted, not failed.
    if (r.failure()?.errorText === "net::ERR_ABORTED" && r.url().includes("/events")) return;
    problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`);
  });
  page.on("response", (r) => {
    if (r.status() >= 400 && !expected(r.url(), r.status())) problems.push(`answer ${r.status()}: ${r.url()}`);
  });
  page.done = async () => {
    await context.close();
    assert.deepEqual(problems, [], "the page had problems");
  };
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: join(SHOTS, `${name}.png`) });
}

async function signIn(page, path = "") {
  await page.goto(`${url}/ui/${path}`);
  await page.fill("#key", KEY);
  await page.click("#signin-form button[type=submit]");
}

/** Waits for the drawing's `n`th layout, and answers its entities and milliseconds. */
async function drawn(page, n) {
  await page.waitForFunction((k) => Number(document.querySelector("#graph").dataset.ready ?? 0) >= k, n, { timeout: 60_000 });
  return {
    nodes: Number(await page.getAttribute("#graph", "data-nodes")),
    ms: Number(await page.getAttribute("#graph", "data-layout-ms")),
  };
}

test("a wrong key gets a clear message and shows nothing else", async () => {
  const page = await tab({ expected: (u, s) => u.endsWith("/v1/key") && s === 401 });
  await page.goto(`${url}/ui/`);
  await page.fill("#key", "not-a-key");
  await page.click("#signin-form button[type=submit]");
  const error = page.locator("#signin-error");
  await error.filter({ hasText: "kbq refused this key" }).waitFor();
  assert.match(await error.textContent(), /kbq refused this key: .*key/i);
  assert.equal(await page.isVisible("#nav"), false);
  await shot(page, "sign-in-refused");
  await page.done();
});

test("explore: search Turing, open Alan Turing, expand a neighbour, filter a type, open a document", async () => {
  const page = await tab();
  await signIn(page);
  // With nothing asked, the view opens the most connected entity and lists the others.
  const start = await drawn(page, 1);
  assert.ok(start.nodes > 10, `the starting view: ${start.nodes}`);
  assert.ok((await page.locator("#start-list li").count()) === 10);
  assert.match(page.url(), /#\/graph\?entity=/);
  await shot(page, "sign-in");
  // By keyboard: type, arrow down to Alan Turing, Enter.
  await page.focus("#search");
  await page.keyboard.type("Turing");
  await page.waitForSelector("#search-list li:has-text('Alan Turing')");
  const names = await page.locator("#search-list li").allTextContents();
  const at = names.findIndex((n) => n.startsWith("Alan Turing"));
  for (let i = 0; i < at; i++) await page.keyboard.press("ArrowDown");
  await page.keyboard.press("Enter");
  const opened = await drawn(page, 2);
  assert.ok(opened.nodes >= 10, `Alan Turing's neighbourhood: ${opened.nodes}`);
  assert.equal(await page.textContent("#panel-title"), "Alan Turing");
  assert.match(page.url(), /#\/graph\?entity=Alan\+Turing/);
  await shot(page, "graph");

  // Expand a neighbour, chosen from the relationships in the side panel.
  await page.click("#panel-rels button:text-is('Max Newman')");
  await page.waitForFunction(() => document.querySelector("#panel-title").textContent === "Max Newman");
  await page.click("#expand");
  const expanded = await drawn(page, 3);
  assert.ok(expanded.nodes > opened.nodes, `${expanded.nodes} after expanding, ${opened.nodes} before`);
  assert.match(page.url(), /expand=Max\+Newman/);

  // Filter by type: organizations hidden, the legend and the address say so.
  const visible = () => page.getAttribute("#graph", "data-visible").then(Number);
  const before = await visible();
  await page.uncheck("#legend-items input[data-type=organization]");
  assert.ok((await visible()) < before, "hiding organizations hides some entities");
  assert.match(page.url(), /hide=organization/);
  await shot(page, "graph-expanded-filtered");

  // Prune an entity Max Newman's expansion reached: gone, and the address says so.
  await page.click("#node-list-box summary");
  await page.click("#node-list button:text-is('Tommy Flowers')");
  await page.waitForFunction(() => document.querySelector("#panel-title").textContent === "Tommy Flowers");
  await page.click("#prune");
  const pruned = Number(await page.getAttribute("#graph", "data-nodes"));
  assert.equal(pruned, expanded.nodes - 1);
  assert.match(page.url(), /pruned=Tommy\+Flowers/);
  await page.click("#node-list-box summary");

  // The address bar holds the view: a new tab opens the same one.
  const same = await tab();
  await signIn(same, `#${page.url().split("#")[1]}`);
  const again = await drawn(same, 1);
  assert.equal(again.nodes, pruned);
  assert.equal(await same.getAttribute("#graph", "data-visible"), await page.getAttribute("#graph", "data-visible"));
  await same.done();

  // A document of the selected entity: its text, where it came from.
  await page.click("#node-list-box summary");
  await page.click("#node-list button:text-is('Alan Turing')");
  const first = page.locator("#panel-docs button").first();
  await first.waitFor();
  await first.click();
  await page.waitForSelector("#doc-dialog[open]");
  assert.match(await page.textContent("#doc-content"), /Turing/);
  assert.match(await page.textContent("#doc-meta"), /kbq-demo/);
  await shot(page, "document");
  await page.keyboard.press("Escape");
  await page.done();
});

test("chat: the agent's tool calls stream, then its answer, and an entity links to the graph", async () => {
  const page = await tab();
  await signIn(page, "#/chat");
  await page.waitForSelector("#view-chat:not([hidden])");
  await page.fill("#chat-input", "Who influenced Alan Turing?");
  await page.keyboard.press("Enter");
  await page.waitForSelector("#messages li.assistant[data-done=true]", { timeout: 60_000 });
  const tools = await page.locator("#messages li.assistant .tools li").evaluateAll((lis) => lis.map((li) => [li.dataset.tool, li.dataset.done]));
  assert.ok(tools.length >= 1, "at least one tool call");
  assert.ok(tools.every(([, done]) => done === "true"), JSON.stringify(tools));
  assert.ok(tools.some(([tool]) => tool === "KnowledgeGraphTool"), JSON.stringify(tools));
  assert.match(await page.textContent("#messages li.assistant .answer"), /Alan Turing/);
  await shot(page, "chat");
  // History is kept in the tab and sent back.
  const sent = page.waitForRequest((r) => r.url().endsWith("/v1/agent/chat"));
  await page.fill("#chat-input", "And whom did he influence?");
  await page.keyboard.press("Enter");
  const history = JSON.parse((await sent).postData()).history;
  assert.deepEqual(history.map((h) => h.role), ["user", "assistant"]);
  await page.waitForSelector("#messages li.assistant:nth-of-type(4)[data-done=true]", { timeout: 60_000 });
  await page.click("#messages li.assistant .tools a:text-is('Alan Turing') >> nth=0");
  await drawn(page, 1);
  assert.equal(await page.textContent("#panel-title"), "Alan Turing");
  await page.done();
});

test("sources: upload a Markdown file, watch its job finish, see it listed, delete it", async () => {
  const page = await tab();
  await signIn(page, "#/sources");
  await page.waitForSelector("#view-sources:not([hidden])");
  await page.setInputFiles("#upload", {
    name: "bombe.md",
    mimeType: "text/markdown",
    buffer: Buffer.from("# The Bombe\n\nAlan Turing designed the Bombe at Bletchley Park to break Enigma.\n"),
  });
  await page.click("#upload-form button[type=submit]");
  await page.waitForSelector("#jobs li[data-status]");
  assert.equal(await page.getAttribute("#jobs li", "data-status"), "succeeded");
  await page.waitForSelector("#sources tbody tr:has-text('bombe.md')");
  await shot(page, "sources");
  await page.click("#sources tbody tr:has-text('bombe.md') button");
  await page.waitForFunction(() => ![...document.querySelectorAll("#sources tbody tr")].some((tr) => tr.textContent.includes("bombe.md")));
  assert.match(await page.textContent("#sources-total"), /Deleted bombe\.md/);
  await page.done();
});

test("status: readiness, counts, providers and live request figures", async () => {
  const page = await tab();
  await signIn(page, "#/status");
  await page.waitForFunction(() => Number(document.querySelector("#view-status").dataset.ticks ?? 0) >= 2, null, { timeout: 20_000 });
  assert.match(await page.textContent("#readiness"), /ready/);
  assert.match(await page.textContent("#counts"), /entities/);
  assert.match(await page.textContent("#providers"), /builtin/);
  assert.match(await page.textContent("#routes"), /\/v1\/key/);
  await shot(page, "status");
  await page.done();
});

test("a hub of 10,000 stays responsive: a bounded neighbourhood, and what was left out", async () => {
  const page = await tab();
  await signIn(page, "#/graph?entity=Big+hub");
  const first = await drawn(page, 1);
  assert.equal(first.nodes, 50);
  assert.match(await page.textContent("#truncated-text"), /Showing the first 50 entities reached \(the limit, 50\): more are reachable/);
  await page.click("#load-more");
  const more = await drawn(page, 2);
  assert.ok(more.nodes > 50, `${more.nodes} after loading more`);
  await shot(page, "hub");
  await page.done();
});

test("a narrow window: nothing overflows, every control is reachable", async () => {
  const page = await tab({ width: 400, height: 800 });
  await signIn(page, "#/graph?entity=Alan+Turing");
  await drawn(page, 1);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 1, `the page is ${overflow}px wider than the window`);
  // Every control has a label (its own, or one of aria-label/aria-labelledby).
  const unlabelled = await page.evaluate(() => [...document.querySelectorAll("input, select, textarea, button")]
    .filter((c) => !(c.labels?.length || c.getAttribute("aria-label") || c.getAttribute("aria-labelledby") || c.textContent.trim()))
    .map((c) => c.outerHTML));
  assert.deepEqual(unlabelled, []);
  await shot(page, "narrow");
  await page.done();
});

test("timings: first paint, and drawing 50, 200 and 2,000 entities", async () => {
  const page = await tab();
  await page.goto(`${url}/ui/`);
  await page.waitForFunction(() => performance.getEntriesByName("first-contentful-paint").length > 0);
  timings.first_contentful_paint_ms = await page.evaluate(() => performance.getEntriesByName("first-contentful-paint")[0].startTime);
  await page.fill("#key", KEY);
  await page.click("#signin-form button[type=submit]");
  await drawn(page, 1);
  const views = [
    ["50", "#/graph?entity=Hub+of+49"],
    ["200", "#/graph?entity=Hub+of+199&limit=200"],
    ["2000", `#/graph?entity=Wheel&limit=200&expand=${[...Array(10).keys()].map((i) => `Spoke+${i}`).join("|")}`],
  ];
  timings.open_to_drawn_ms = {};
  for (const [size, hash] of views) {
    const before = Number((await page.getAttribute("#graph", "data-ready")) ?? 0);
    await page.evaluate((h) => { location.hash = h; }, hash);
    const d = await drawn(page, before + 1);
    assert.equal(d.nodes, Number(size), `the drawing of ${size}`);
    timings.open_to_drawn_ms[size] = d.ms;
  }
  await shot(page, "wheel-2000");
  console.log(`timings: ${JSON.stringify(timings)}`);
  await page.done();
});
