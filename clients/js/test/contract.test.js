// The client against kbq's OpenAPI document: schema.d.ts is what openapi-typescript makes of
// the served document, every operation a client calls has a method, every error code has its
// status, the types check, and the README's examples run.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { OPERATIONS, STATUS_OF_CODE } from "../src/index.js";
import { KEY, startKbq } from "./support/servers.js";

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL("..", import.meta.url));
const bin = (name) => join(ROOT, "node_modules", ".bin", name);

/** Operations of the document this library leaves to others, each with the reason. */
const NOT_HERE = {
  probes_livez: "a probe for load balancers",
  probes_livez_head: "a probe for load balancers",
  probes_readyz: "a probe for load balancers",
  probes_readyz_head: "a probe for load balancers",
  probes_metrics: "Prometheus scrapes it",
  docs_openapi_json: "the contract itself",
  openai_completions: "the official openai client speaks it",
  openai_embeddings: "the official openai client speaks it",
  openai_models: "the official openai client speaks it",
};

let server;
before(async () => {
  server = await startKbq();
});
after(() => server?.stop());

test("schema.d.ts is generated from the served document", async () => {
  const dir = mkdtempSync(join(tmpdir(), "kbq-js-schema-"));
  const doc = join(dir, "openapi.json");
  writeFileSync(doc, await (await fetch(server.url + "/openapi.json")).text());
  const out = join(dir, "schema.d.ts");
  await run(bin("openapi-typescript"), [doc, "--default-non-nullable", "false", "-o", out]);
  const generated = readFileSync(out, "utf8");
  rmSync(dir, { recursive: true, force: true });
  assert.equal(
    generated,
    readFileSync(join(ROOT, "src", "schema.d.ts"), "utf8"),
    "src/schema.d.ts is not what the served document generates: run KBQ_OPENAPI=<kbq>/openapi.json npm run generate",
  );
});

test("every operation has a method on its path", async () => {
  const doc = await (await fetch(server.url + "/openapi.json")).json();
  const served = {};
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) served[op.operationId] = [method.toUpperCase(), path];
  }
  assert.deepEqual(Object.keys(served).sort(), [...Object.keys(OPERATIONS), ...Object.keys(NOT_HERE)].sort());
  for (const [op, methodPath] of Object.entries(OPERATIONS)) assert.deepEqual(served[op], methodPath, op);
});

test("every error code has its status", async () => {
  // A stream's `error` event names a code only: its class comes from this table.
  const schema = (await (await fetch(server.url + "/openapi.json")).json()).components.schemas.ErrorCode;
  assert.deepEqual(Object.keys(STATUS_OF_CODE).sort(), [...schema.enum].sort());
  for (const [code, status] of Object.entries(STATUS_OF_CODE)) assert.ok(schema.description.includes(`\`${code}\` (${status})`), code);
});

test("the declared types check, and fit the client's use", async () => {
  await run(bin("tsc"), ["-p", join(ROOT, "test", "types", "tsconfig.json")]);
});

test("the README's examples run", async () => {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const blocks = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
  assert.ok(blocks.length >= 5);
  const env = { ...process.env, KBQ_BASE_URL: server.url, KBQ_API_KEY: KEY };
  for (const block of blocks) {
    const code = block.replace('{ baseUrl: "http://127.0.0.1:8080", apiKey: "devkey" }', "");
    await run(process.execPath, ["--input-type=module", "-e", code], { cwd: ROOT, env });
  }
});
