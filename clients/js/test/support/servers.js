// Starts real kbq servers for the tests: the binary in KBQ_BIN (scripts/test and
// tests/it/clients.rs set it), else ../../target/debug/kbq; an in-memory store with the demo
// knowledge base and the built-in provider; the config given as TOML.

import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

export const KEY = "js-test-key";
export const READ_KEY = "js-read-key";

const sha = (s) => createHash("sha256").update(s).digest("hex");

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

/**
 * A kbq serving on a loopback port: `{ url, stop }`. `limited`: one graph request and one
 * chat a second, no burst; `deprecated`: v1 deprecated, with a sunset far ahead;
 * `corsOrigins`: the browser origins allowed.
 */
export async function startKbq({ limited = false, deprecated = false, corsOrigins = [] } = {}) {
  const bin = process.env.KBQ_BIN ?? fileURLToPath(new URL("../../../../target/debug/kbq", import.meta.url));
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "kbq-js-"));
  const config = join(dir, "kbq.toml");
  writeFileSync(
    config,
    `data_dir = ${JSON.stringify(dir)}
[server]
listen = "127.0.0.1:${port}"
workers = 2
cors_origins = ${JSON.stringify(corsOrigins)}
[store]
url = "mem://"
[limits]
graph_per_minute = ${limited ? 60 : 0}
agent_per_minute = ${limited ? 60 : 0}
graph_burst = 1
agent_burst = 1
${deprecated ? '[versions.v1]\ndeprecated_at = "2026-06-01"\nsunset_at = "2099-01-01"' : ""}
[[auth.keys]]
name = "test"
sha256 = "${sha(KEY)}"
[[auth.keys]]
name = "reader"
sha256 = "${sha(READ_KEY)}"
scopes = ["read"]
`,
  );
  // Only this server's own KBQ_ variables.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("KBQ_")));
  env.KBQ_CONFIG = config;
  env.RUST_LOG = "warn";
  const child = spawn(bin, ["serve"], { env, stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  child.stderr.on("data", (d) => (log += d));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`kbq exited: ${log}`);
    try {
      if ((await fetch(url + "/readyz")).status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`kbq was not ready after 60 s: ${log}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    // Stops the server, then removes its configuration and data directory.
    stop: () =>
      new Promise((resolve) => {
        child.once("exit", () => {
          rmSync(dir, { recursive: true, force: true });
          resolve();
        });
        child.kill("SIGTERM");
      }),
  };
}
