// @kbq/client: the JavaScript client of kbq's v1 API (graph queries, RAG search, ingestion,
// the agent with its streamed chat) and of its admin API (workspaces and their keys).
// fetch-based, no runtime dependency: Node 18+ and browsers. Types: index.d.ts, over
// schema.d.ts generated from kbq's OpenAPI document.

export const VERSION = "1.1.0";

/** Where kbq listens when neither `baseUrl` nor `KBQ_BASE_URL` says. */
export const DEFAULT_BASE_URL = "http://127.0.0.1:8080";
const DEFAULT_TIMEOUT_MS = 60_000;
const DEFAULT_MAX_RETRIES = 2;
const DEFAULT_MAX_RETRY_WAIT_MS = 30_000;
/** Statuses after which kbq did nothing, so that a retry is safe. */
const RETRY_STATUSES = [429, 503];

// ---------------------------------------------------------------------------------------
// Errors

/** Every error this library throws. */
export class KbqError extends Error {
  constructor(message) {
    super(message);
    this.name = new.target.name;
  }
}

/**
 * kbq answered with an error, or (APIConnectionError, APITimeoutError) did not answer.
 * `status` (also `statusCode`), `code`, `message`, `field`, `requestId`, `retryAfter` (ms), `body`.
 */
export class APIError extends KbqError {
  constructor(message, { status = null, code = null, field = null, requestId = null, retryAfter = null, body = null } = {}) {
    super(message);
    this.status = status;
    this.statusCode = status;
    this.code = code;
    this.field = field;
    this.requestId = requestId;
    this.retryAfter = retryAfter;
    this.body = body;
  }
}
export class APIConnectionError extends APIError {}
export class APITimeoutError extends APIConnectionError {}
export class APIUserAbortError extends APIConnectionError {}
export class BadRequestError extends APIError {}
export class AuthenticationError extends APIError {}
export class PermissionDeniedError extends APIError {}
export class NotFoundError extends APIError {}
export class GoneError extends APIError {}
export class RateLimitError extends APIError {}
export class InternalServerError extends APIError {}
export class ServiceUnavailableError extends APIError {}

const BY_STATUS = {
  400: BadRequestError,
  401: AuthenticationError,
  403: PermissionDeniedError,
  404: NotFoundError,
  410: GoneError,
  429: RateLimitError,
  500: InternalServerError,
  502: InternalServerError,
  503: ServiceUnavailableError,
};

/** The status each error code answers with (kbq's ErrorCode table), for stream errors. */
export const STATUS_OF_CODE = {
  invalid_request: 400,
  INVALID_API_KEY: 401,
  insufficient_scope: 403,
  workspace_forbidden: 403,
  quota_exceeded: 403,
  not_found: 404,
  workspace_not_found: 404,
  method_not_allowed: 405,
  request_timeout: 408,
  conflict: 409,
  version_sunset: 410,
  payload_too_large: 413,
  unsupported_media_type: 415,
  RATE_LIMIT_EXCEEDED: 429,
  internal_error: 500,
  upstream_error: 502,
  service_unavailable: 503,
};

function errorFrom(status, body, requestId, retryAfter) {
  const detail = body && typeof body === "object" ? body.error : null;
  const Cls = BY_STATUS[status] ?? APIError;
  const message = detail && typeof detail === "object" ? String(detail.message ?? "") : `HTTP ${status}`;
  return new Cls(message, {
    status,
    code: detail?.code ?? null,
    field: detail?.field ?? null,
    requestId,
    retryAfter,
    body,
  });
}

// ---------------------------------------------------------------------------------------
// Settings and sending

function env(name) {
  return typeof process !== "undefined" && process.env ? process.env[name] : undefined;
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(signal.reason);
    }, { once: true });
  });
}

/** Milliseconds the answer's Retry-After asks to wait (seconds or an HTTP date). */
function retryAfterMs(response) {
  const value = response.headers.get("retry-after");
  if (value == null) return null;
  const secs = Number(value);
  if (Number.isFinite(secs)) return Math.max(0, secs * 1000);
  const when = Date.parse(value);
  return Number.isNaN(when) ? null : Math.max(0, when - Date.now());
}

function defaultOnDeprecation(message) {
  if (typeof process !== "undefined" && typeof process.emitWarning === "function") {
    process.emitWarning(message, "DeprecationWarning");
  } else {
    console.warn(message);
  }
}

/** The fields given (not undefined or null). */
function body(fields) {
  return Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined && v !== null));
}

/** One request to send: the operation, its body, and whether a retry is safe. */
function call(operation, method, path, options = {}) {
  return { operation, method, path, idempotent: true, answerStatuses: [], ...options };
}

/** Paths by operation id of /openapi.json, for the operations this library sends. */
export const OPERATIONS = {
  graph_traverse: ["POST", "/data/v1/query/graph"],
  graph_search: ["POST", "/data/v1/query/graph/search"],
  graph_entity: ["GET", "/data/v1/query/graph/entity/{entity_name}"],
  graph_documents: ["POST", "/data/v1/query/graph/documents"],
  graph_merges: ["POST", "/data/v1/query/graph/merges"],
  graph_stats: ["GET", "/data/v1/query/graph/stats"],
  rag_semantic: ["POST", "/v1/rag/semantic"],
  rag_keyword: ["POST", "/v1/rag/keyword"],
  rag_hybrid: ["POST", "/v1/rag/hybrid"],
  ingest_entities: ["POST", "/data/v1/ingest/entities"],
  ingest_relationships: ["POST", "/data/v1/ingest/relationships"],
  ingest_documents: ["POST", "/data/v1/ingest/documents"],
  ingest_ndjson: ["POST", "/data/v1/ingest/ndjson"],
  ingest_delete_entity: ["DELETE", "/data/v1/ingest/entities/{name}"],
  ingest_delete_document: ["DELETE", "/data/v1/ingest/documents/{id}"],
  ingest_submit: ["POST", "/data/v1/ingest/sources"],
  ingest_job: ["GET", "/data/v1/ingest/jobs/{job_id}"],
  ingest_events: ["GET", "/data/v1/ingest/jobs/{job_id}/events"],
  ingest_cancel: ["DELETE", "/data/v1/ingest/jobs/{job_id}"],
  ingest_retract: ["DELETE", "/data/v1/ingest/sources/{source}/{source_id}"],
  ingest_list: ["GET", "/data/v1/ingest/sources"],
  agent_chat: ["POST", "/v1/agent/chat"],
  agent_health: ["GET", "/v1/agent/health"],
  key_show: ["GET", "/v1/key"],
  admin_create: ["POST", "/admin/v1/workspaces"],
  admin_list: ["GET", "/admin/v1/workspaces"],
  admin_show: ["GET", "/admin/v1/workspaces/{workspace}"],
  admin_delete: ["DELETE", "/admin/v1/workspaces/{workspace}"],
  admin_set_quota: ["PUT", "/admin/v1/workspaces/{workspace}/quota"],
  admin_mint: ["POST", "/admin/v1/workspaces/{workspace}/keys"],
  admin_keys: ["GET", "/admin/v1/workspaces/{workspace}/keys"],
  admin_revoke: ["DELETE", "/admin/v1/workspaces/{workspace}/keys/{key_id}"],
  admin_export: ["GET", "/admin/v1/export"],
};

function op(operation, params = {}, options = {}) {
  const [method, template] = OPERATIONS[operation];
  const path = template.replace(/\{(\w+)\}/g, (_, name) => encodeURIComponent(params[name]));
  return call(operation, method, path, options);
}

/**
 * A kbq client.
 *
 * `baseUrl` defaults to `KBQ_BASE_URL` (in Node), then http://127.0.0.1:8080; `apiKey` to
 * `KBQ_API_KEY`. `timeout` (ms, 60000) bounds each request; `maxRetries` (2) retries after a
 * 429 or 503, each after what Retry-After asks (at most `maxRetryWait` ms, 30000), for reads
 * and upserts only unless a call passes `retry: true`. `fetch` replaces the global fetch;
 * `onDeprecation(message)` is called for answers from a deprecated API version (default: a
 * DeprecationWarning in Node, console.warn elsewhere). `workspace`, for an `admin` key of
 * `default`, names the workspace every request acts in (sent as X-KBQ-Workspace); without
 * it a request acts in the key's own. Any other key naming a workspace not its own gets
 * PermissionDeniedError (code `workspace_forbidden`).
 */
export class Client {
  constructor({
    baseUrl,
    apiKey,
    timeout = DEFAULT_TIMEOUT_MS,
    maxRetries = DEFAULT_MAX_RETRIES,
    maxRetryWait = DEFAULT_MAX_RETRY_WAIT_MS,
    defaultHeaders = {},
    fetch: fetchImpl,
    onDeprecation = defaultOnDeprecation,
    workspace,
  } = {}) {
    apiKey = apiKey ?? env("KBQ_API_KEY");
    if (!apiKey) {
      throw new KbqError(
        "no API key: pass apiKey or set KBQ_API_KEY (kbq's keys are set on the server with KBQ_API_KEYS or [[auth.keys]])",
      );
    }
    if (!(Number.isInteger(maxRetries) && maxRetries >= 0)) throw new KbqError("maxRetries must be an integer, 0 or more");
    this.baseUrl = (baseUrl ?? env("KBQ_BASE_URL") ?? DEFAULT_BASE_URL).replace(/\/+$/, "");
    this.timeout = timeout;
    this.maxRetries = maxRetries;
    this.maxRetryWait = maxRetryWait;
    this.onDeprecation = onDeprecation;
    this._fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);
    this.workspace = workspace ?? null;
    this._headers = { authorization: `Bearer ${apiKey}`, accept: "application/json", ...defaultHeaders };
    if (workspace != null) this._headers["x-kbq-workspace"] = workspace;
    this.graph = new Graph(this);
    this.rag = new Rag(this);
    this.ingest = new Ingest(this);
    this.agent = new Agent(this);
    this.admin = new Admin(this);
  }

  /** The calling key (`GET /v1/key`): its name, id, scopes, what it may do, and its workspace. */
  keyInfo(options) {
    return this._send(op("key_show"), options);
  }

  /** The answer of `c`, after any retries: a Response, not yet read. */
  async _response(c, { signal, stream = false } = {}) {
    const headers = { ...this._headers, ...(c.headers ?? {}) };
    let payload;
    if (c.content !== undefined) payload = c.content;
    else if (c.json !== undefined) {
      payload = JSON.stringify(c.json);
      headers["content-type"] = "application/json";
    }
    if (stream) headers.accept = "text/event-stream";
    for (let attempt = 0; ; attempt++) {
      // The request's own signal: the caller's, and the timeout (not for a stream's body).
      const controller = new AbortController();
      const onAbort = () => controller.abort(signal.reason);
      signal?.addEventListener("abort", onAbort, { once: true });
      if (signal?.aborted) controller.abort(signal.reason);
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        controller.abort();
      }, this.timeout);
      let response;
      try {
        response = await this._fetch(this.baseUrl + c.path, { method: c.method, headers, body: payload, signal: controller.signal });
      } catch (e) {
        if (signal?.aborted) throw new APIUserAbortError("the request was aborted", {});
        if (timedOut) throw new APITimeoutError(`no answer within ${this.timeout} ms`, {});
        if (c.idempotent && attempt < this.maxRetries) {
          await sleep(this._backoff(null, attempt), signal);
          continue;
        }
        throw new APIConnectionError(`cannot reach ${this.baseUrl}: ${e?.cause?.message ?? e?.message ?? e}`, {});
      } finally {
        clearTimeout(timer);
        if (!stream) signal?.removeEventListener("abort", onAbort);
      }
      if (c.idempotent && attempt < this.maxRetries && RETRY_STATUSES.includes(response.status) && !c.answerStatuses.includes(response.status)) {
        await response.body?.cancel();
        await sleep(this._backoff(response, attempt), signal);
        continue;
      }
      this._warnIfDeprecated(c, response);
      return response;
    }
  }

  _backoff(response, attempt) {
    let ms = response ? retryAfterMs(response) : null;
    if (ms == null) ms = Math.min(8000, 500 * 2 ** attempt) * (0.75 + Math.random() / 2);
    return Math.min(ms, this.maxRetryWait);
  }

  _warnIfDeprecated(c, response) {
    const h = response.headers;
    if (h.get("x-api-deprecated")?.toLowerCase() !== "true" && !h.has("deprecation")) return;
    let message = `kbq: ${c.method} ${c.path} is deprecated`;
    if (h.has("sunset")) message += `; it will be removed after ${h.get("sunset")}`;
    if (h.has("link")) message += ` (see ${h.get("link")})`;
    this.onDeprecation(message);
  }

  async _error(response) {
    let parsed = null;
    try {
      parsed = await response.json();
    } catch {
      // not JSON
    }
    return errorFrom(response.status, parsed, response.headers.get("x-request-id"), retryAfterMs(response));
  }

  /** Sends `c`; its JSON answer, or its error thrown. */
  async _send(c, options = {}) {
    const response = await this._response(c, options);
    if (response.status >= 400 && !c.answerStatuses.includes(response.status)) throw await this._error(response);
    return response.json();
  }

  /** Sends `c` for a stream of events: a `c.events` (ChatStream unless the call says). */
  async _stream(c, options = {}) {
    const response = await this._response(c, { ...options, stream: true });
    if (response.status >= 400) throw await this._error(response);
    return new (c.events ?? ChatStream)(response);
  }

  /**
   * Sends `c` until `done` holds of its answer or `timeout` ms have passed (none: no end),
   * after 250 ms, then twice as long each time up to 2 s; the last answer.
   */
  async _poll(c, done, { timeout, signal } = {}) {
    const deadline = timeout == null ? Infinity : Date.now() + timeout;
    for (let wait = 250; ; wait = Math.min(wait * 2, 2000)) {
      const answer = await this._send(c, { signal });
      const left = deadline - Date.now();
      if (done(answer) || left <= 0) return answer;
      try {
        await sleep(Math.min(wait, left), signal);
      } catch {
        throw new APIUserAbortError("the wait was aborted", {});
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Resources

class Resource {
  constructor(client) {
    this._client = client;
  }
}

/** The graph queries (scope `read`). */
class Graph extends Resource {
  /** Walks the graph from `entity_name` (direction "both", depth 2, limit 50 unless given). */
  traverse({ entity_name, relationship_types, direction = "both", depth = 2, limit = 50 }, options) {
    return this._client._send(op("graph_traverse", {}, { json: body({ entity_name, relationship_types, direction, depth, limit }) }), options);
  }

  /** Entities whose names contain `query`: exact, then prefix, then substring, then by name. */
  search({ query, entity_type, limit = 20 }, options) {
    return this._client._send(op("graph_search", {}, { json: body({ query, entity_type, limit }) }), options);
  }

  /** The entity named exactly `name`, or null. */
  entity(name, options) {
    return this._client._send(op("graph_entity", { entity_name: name }), options);
  }

  /** Walks from `entity_name` and returns the reached entities' documents, scored. */
  documents({ entity_name, entity_type, relationship_types, max_depth, limit, resolve_documents }, options) {
    return this._client._send(
      op("graph_documents", {}, { json: body({ entity_name, entity_type, relationship_types, max_depth, limit, resolve_documents }) }),
      options,
    );
  }

  /**
   * A page of the names ingestion merged into entities (aliases), by alias in code-point
   * order: only those merged into `entity_name` when given, those after `after` (the
   * `next_after` of the page before), at most `limit` (1 to 1000; the server's default 100).
   * `next_after` is null on the last page.
   */
  merges({ entity_name, after, limit } = {}, options) {
    return this._client._send(op("graph_merges", {}, { json: body({ entity_name, after, limit }) }), options);
  }

  /** What the workspace holds: its entities, relationships and documents. */
  stats(options) {
    return this._client._send(op("graph_stats"), options);
  }
}

/** Document retrieval (scope `read`). */
class Rag extends Resource {
  semantic({ query, limit, filters }, options) {
    return this._client._send(op("rag_semantic", {}, { json: body({ query, limit, filters }) }), options);
  }

  keyword({ query, limit, filters }, options) {
    return this._client._send(op("rag_keyword", {}, { json: body({ query, limit, filters }) }), options);
  }

  hybrid({ query, limit, filters, graph_depth }, options) {
    return this._client._send(op("rag_hybrid", {}, { json: body({ query, limit, filters, graph_depth }) }), options);
  }
}

/** The statuses of a job that has ended. */
const FINAL_STATUSES = ["succeeded", "failed", "cancelled"];

/**
 * A multipart/form-data body of the text `fields` and a `file` part. Written out rather than
 * through FormData, which names a nameless Blob "blob": kbq would take that for the file
 * name (and the source id). Names are escaped as browsers do.
 */
function multipart(fields, { blob, name, type }) {
  const boundary = `----kbq-${Math.random().toString(36).slice(2)}${Math.random().toString(36).slice(2)}`;
  const escape = (v) => String(v).replace(/["\r\n]/g, (ch) => ({ '"': "%22", "\r": "%0D", "\n": "%0A" })[ch]);
  const parts = [];
  for (const [key, value] of Object.entries(fields)) {
    parts.push(`--${boundary}\r\nContent-Disposition: form-data; name="${key}"\r\n\r\n`, String(value), "\r\n");
  }
  const filename = name == null ? "" : `; filename="${escape(name)}"`;
  parts.push(`--${boundary}\r\nContent-Disposition: form-data; name="file"${filename}\r\nContent-Type: ${type}\r\n\r\n`, blob, `\r\n--${boundary}--\r\n`);
  return { content: new Blob(parts), headers: { "content-type": `multipart/form-data; boundary=${boundary}` } };
}

/**
 * Upserts and deletes, and documents (sources) read into the graph by jobs (scope `write`).
 * Upserts and submissions are retried like reads: kbq refuses them before doing anything.
 */
class Ingest extends Resource {
  entities(records, options) {
    return this._client._send(op("ingest_entities", {}, { json: records }), options);
  }

  relationships(records, options) {
    return this._client._send(op("ingest_relationships", {}, { json: records }), options);
  }

  documents(records, options) {
    return this._client._send(op("ingest_documents", {}, { json: records }), options);
  }

  /** NDJSON: a string as it is, or records (objects with `kind`), one per line. */
  ndjson(records, options) {
    const content = typeof records === "string" ? records : records.map((r) => JSON.stringify(r) + "\n").join("");
    return this._client._send(op("ingest_ndjson", {}, { content, headers: { "content-type": "application/x-ndjson" } }), options);
  }

  deleteEntity(name, options) {
    return this._client._send(op("ingest_delete_entity", { name }), options);
  }

  deleteDocument(id, options) {
    return this._client._send(op("ingest_delete_document", { id }), options);
  }

  /**
   * Submits a document's text (`content_type` text/plain, the server's default,
   * text/markdown or text/html) as the source `source_id` of `source`; resolves to its job,
   * queued (`wait` for it, or follow it with `jobEvents`).
   */
  addSource({ source, source_id, content, content_type, title, url }, options) {
    return this._client._send(op("ingest_submit", {}, { json: body({ source, source_id, title, content, content_type, url }) }), options);
  }

  /**
   * Uploads a document (Markdown, HTML, PDF, DOCX or plain text): a Blob or File, an
   * ArrayBuffer or a typed array (a Node Buffer). Its format is `content_type`, else the
   * Blob's type, else the file name's extension (`file_name`, else a File's name).
   * `source` defaults to "upload" and `source_id` to the file name.
   */
  async uploadSource(file, { source, source_id, title, url, content_type, file_name } = {}, options) {
    let blob;
    if (typeof Blob !== "undefined" && file instanceof Blob) blob = file;
    else if (file instanceof ArrayBuffer || ArrayBuffer.isView(file)) blob = new Blob([file]);
    else throw new KbqError("uploadSource takes a Blob, a File, an ArrayBuffer or a typed array (for text, use addSource)");
    const name = file_name ?? (typeof file.name === "string" ? file.name : null);
    // Without a content type the server reads the format from the file name's extension.
    const type = content_type ?? (blob.type || "application/octet-stream");
    const form = multipart(body({ source, source_id, title, url }), { blob, name, type });
    return this._client._send(op("ingest_submit", {}, form), options);
  }

  /** A job: its status, progress and counts (NotFoundError when this key has no such job). */
  job(jobId, options) {
    return this._client._send(op("ingest_job", { job_id: jobId }), options);
  }

  /**
   * Reads the job until it has ended (succeeded, failed or cancelled) and resolves to it; when
   * `timeout` ms pass first, to the job as it stands. Check its `status` either way.
   */
  wait(jobId, { timeout, signal } = {}) {
    return this._client._poll(op("ingest_job", { job_id: jobId }), (job) => FINAL_STATUSES.includes(job.status), { timeout, signal });
  }

  /** Follows a job: resolves to a JobEventStream of `progress` events, then one `end`. */
  jobEvents(jobId, options) {
    return this._client._stream(op("ingest_events", { job_id: jobId }, { events: JobEventStream }), options);
  }

  /** Cancels a job; resolves to it, cancelled or as it had ended. */
  cancelJob(jobId, options) {
    return this._client._send(op("ingest_cancel", { job_id: jobId }), options);
  }

  /** Retracts a source: its chunks, and what no other source supports (NotFoundError when it was never ingested). */
  deleteSource(source, sourceId, options) {
    return this._client._send(op("ingest_retract", { source, source_id: sourceId }), options);
  }

  /** The sources ingested into the workspace: the 1,000 most recent, newest first, and `total`. */
  listSources(options) {
    return this._client._send(op("ingest_list"), options);
  }
}

/** The tool-using agent. */
class Agent extends Resource {
  /** Answers `message`; not retried after a 429 or 503 unless `retry: true`. */
  chat({ message, system_prompt, history, temperature, max_tokens, retry = false }, options) {
    return this._client._send(
      op("agent_chat", {}, { json: body({ message, system_prompt, history, temperature, max_tokens }), idempotent: retry }),
      options,
    );
  }

  /** `chat`, streamed: resolves to a ChatStream, an async iterable of the turn's events. */
  chatStream({ message, system_prompt, history, temperature, max_tokens, retry = false }, options) {
    return this._client._stream(
      op("agent_chat", {}, { json: body({ message, system_prompt, history, temperature, max_tokens, stream: true }), idempotent: retry }),
      options,
    );
  }

  /** The providers' health; an unhealthy report (503) is returned, not thrown. */
  health(options) {
    return this._client._send(op("agent_health", {}, { answerStatuses: [503], idempotent: false }), options);
  }
}

/**
 * The admin API: workspaces, and the keys of each (an `admin` key of `default`, an
 * operator's; any other key gets PermissionDeniedError, code `insufficient_scope`). A
 * workspace that does not exist is a NotFoundError, code `workspace_not_found`.
 */
class Admin extends Resource {
  /**
   * Creates the workspace `name` (1-63 characters of a-z, 0-9 and "-", starting with a
   * letter): an empty knowledge base of its own, with no keys yet. One that exists
   * (`default` always does) is an APIError with status 409, code `conflict`. `quota`
   * (`max_entities`, `max_documents`, `max_document_bytes`, 0 for no bound;
   * `graph_per_minute`, `graph_burst`, `agent_per_minute`, `agent_burst`, the rate budgets
   * its keys share, 0 a minute for none) sets its own bounds over the server's.
   */
  createWorkspace({ name, quota }, options) {
    return this._client._send(op("admin_create", {}, { json: body({ name, quota }) }), options);
  }

  /**
   * Sets what the workspace `name` may hold, as a whole: each of `max_entities`,
   * `max_documents` and `max_document_bytes` given replaces the server's bound (0 for no
   * bound), and each of `graph_per_minute`, `graph_burst`, `agent_per_minute` and
   * `agent_burst` its rate budget (0 a minute for none); each left out goes back to the
   * server's. `default` has no quota (409 `conflict`).
   */
  setWorkspaceQuota(name, quota, options) {
    return this._client._send(
      op("admin_set_quota", { workspace: name }, { json: body(quota) }),
      options,
    );
  }

  /** Every workspace, `default` first, then by name, with what each holds. */
  listWorkspaces(options) {
    return this._client._send(op("admin_list"), options);
  }

  /** The workspace `name`, as the list shows it. */
  getWorkspace(name, options) {
    return this._client._send(op("admin_show", { workspace: name }), options);
  }

  /**
   * Deletes a workspace and everything in it: its knowledge, its sources and jobs, and its
   * keys, which stop working at once. `default` cannot be deleted (409 `conflict`).
   */
  deleteWorkspace(name, options) {
    return this._client._send(op("admin_delete", { workspace: name }), options);
  }

  /**
   * Mints a key of `workspace` with `scopes` ("read", "write", "agent", "admin"; at least
   * one, each once) and a `name` for people and logs. The answer's `key` is the secret,
   * shown this once: kbq keeps only its hash. Not retried after a 429 or 503: were a
   * refused mint's key stored after all, a retry would mint a second one, and the first
   * would be live with its secret shown to no one.
   */
  mintKey(workspace, { scopes, name }, options) {
    return this._client._send(op("admin_mint", { workspace }, { json: body({ scopes, name }), idempotent: false }), options);
  }

  /** The keys minted for `workspace`, oldest first, never their secrets (configured keys are not listed). */
  listKeys(workspace, options) {
    return this._client._send(op("admin_keys", { workspace }), options);
  }

  /**
   * Revokes the key `keyId` (a minted or listed key's `id`) of `workspace`: it stops working
   * at once. NotFoundError (code `not_found`) when the workspace has no key of that id.
   */
  revokeKey(workspace, keyId, options) {
    return this._client._send(op("admin_revoke", { workspace, key_id: keyId }), options);
  }

  /**
   * The knowledge base of `workspace` (default `default`) in kbq's import format, as it
   * streams in: an async iterable of records, each a line's object, the last of kind `end`
   * with the counts written. It is read a piece at a time, never held whole: write each
   * record to a file as a line of JSON for a backup that `kbq import` reads. A stream that
   * stops before its `end` record throws a KbqError. NotFoundError (code
   * `workspace_not_found`) when there is no such workspace.
   */
  export({ workspace } = {}, options) {
    const c = op("admin_export");
    if (workspace != null) c.path += `?workspace=${encodeURIComponent(workspace)}`;
    return exportRecords(this._client, c, options);
  }
}

/** The records of an export's NDJSON answer, parsed line by line as its pieces come. */
async function* exportRecords(client, c, options) {
  const response = await client._response(c, { ...options, stream: true });
  if (response.status >= 400) throw await client._error(response);
  const decoder = new TextDecoder();
  let partial = "";
  let ended = false;
  const record = (line) => {
    if (ended) throw new KbqError("the export has a record after its end record");
    const r = JSON.parse(line);
    ended = r?.kind === "end";
    return r;
  };
  let done = false;
  try {
    for await (const piece of response.body) {
      const lines = (partial + decoder.decode(piece, { stream: true })).split("\n");
      partial = lines.pop();
      for (const line of lines) if (line.trim()) yield record(line);
    }
    partial += decoder.decode();
    if (partial.trim()) yield record(partial);
    done = true;
  } finally {
    // A caller that stops early lets go of the connection.
    if (!done) await response.body?.cancel().catch(() => {});
  }
  if (!ended) throw new KbqError("the export stopped before its end record: it is incomplete");
}

// ---------------------------------------------------------------------------------------
// Event streams: a streamed chat, a followed job

/**
 * Server-sent events as they come, `{ event, data }` with `data` parsed from JSON; the data
 * of the event named `FINAL` is kept as `final`. An `error` event is thrown as the APIError
 * of its code. Iterate it once with `for await`; `close()` (or breaking out of the loop)
 * ends the request.
 */
class EventStream {
  static FINAL = "";

  constructor(response) {
    this.response = response;
    this.requestId = response.headers.get("x-request-id");
    this.final = null;
  }

  async *[Symbol.asyncIterator]() {
    const reader = this.response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let name = null;
    let data = [];
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        let newline;
        while ((newline = buffer.indexOf("\n")) >= 0) {
          let line = buffer.slice(0, newline);
          buffer = buffer.slice(newline + 1);
          if (line.endsWith("\r")) line = line.slice(0, -1);
          if (line === "") {
            if (data.length) {
              const event = parseEvent(name ?? "message", data.join("\n"));
              if (event.event === this.constructor.FINAL) this.final = event.data;
              name = null;
              data = [];
              yield event;
            }
            name = null;
            continue;
          }
          if (line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const key = colon < 0 ? line : line.slice(0, colon);
          let value = colon < 0 ? "" : line.slice(colon + 1);
          if (value.startsWith(" ")) value = value.slice(1);
          if (key === "event") name = value;
          else if (key === "data") data.push(value);
        }
      }
    } finally {
      await reader.cancel().catch(() => {});
    }
  }

  async _untilFinal() {
    for await (const _ of this) {
      // read to the end
    }
    if (this.final === null) throw new APIError(`the stream ended without a \`${this.constructor.FINAL}\` event`);
    return this.final;
  }

  async close() {
    await this.response.body?.cancel().catch(() => {});
  }
}

/**
 * The events of a streamed chat: `tool_call.started`, `tool_call.completed`, `delta`, then
 * `done`, whose data is the answer `chat` returns (also kept as `final`). `untilDone()`
 * reads the rest and returns the answer; ending the stream early cancels the turn.
 */
export class ChatStream extends EventStream {
  static FINAL = "done";

  untilDone() {
    return this._untilFinal();
  }
}

/**
 * The events of an ingestion job: `progress` with the job at once and at each change, then
 * `end` with the job as it ended (also kept as `final`), after which kbq closes the stream.
 * `untilEnd()` reads the rest and returns the job; ending the stream early leaves the job
 * running.
 */
export class JobEventStream extends EventStream {
  static FINAL = "end";

  untilEnd() {
    return this._untilFinal();
  }
}

function parseEvent(name, data) {
  const payload = JSON.parse(data);
  if (name === "error") {
    const detail = payload?.error ?? {};
    const status = STATUS_OF_CODE[detail.code] ?? null;
    const Cls = BY_STATUS[status] ?? APIError;
    throw new Cls(String(detail.message ?? "the stream ended with an error"), {
      status,
      code: detail.code ?? null,
      field: detail.field ?? null,
      body: payload,
    });
  }
  return { event: name, data: payload };
}

export default Client;
