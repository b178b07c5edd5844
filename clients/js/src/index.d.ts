// Types of @kbq/client, over schema.d.ts (generated from kbq's OpenAPI document by
// openapi-typescript: `npm run generate`; the tests regenerate it and fail on a difference).

import type { components } from "./schema.js";

export type Schemas = components["schemas"];
export type Entity = Schemas["Entity"];
export type TraversalRequest = Schemas["TraversalRequest"];
export type TraversalResponse = Schemas["TraversalResponse"];
export type SearchRequest = Schemas["SearchRequest"];
export type SearchResponse = Schemas["SearchResponse"];
export type DocumentsRequest = Schemas["DocumentsRequest"];
export type DocumentsResponse = Schemas["DocumentsResponse"];
export type MergesRequest = Schemas["MergesRequest"];
export type MergesResponse = Schemas["MergesResponse"];
export type Merge = Schemas["Merge"];
export type MergeChunk = Schemas["MergeChunk"];
export type GraphStats = Schemas["GraphStats"];
export type ConnectedEntity = Schemas["ConnectedEntity"];
export type SourceList = Schemas["SourceList"];
export type SourceSummary = Schemas["SourceSummary"];
export type CallingKey = Schemas["CallingKey"];
export type RagRequest = Schemas["RagRequest"];
export type HybridRequest = Schemas["HybridRequest"];
export type RagAnswer = Schemas["RagAnswer"];
export type NewEntity = Schemas["NewEntity"];
export type NewRelationship = Schemas["NewRelationship"];
export type NewDocument = Schemas["NewDocument"];
export type ImportRecord = Schemas["ImportRecord"];
/** One line of an export: an import record, or a kept record (`memory`, `source`, `support`, `extraction`), or the last, `end`, with the counts written. */
export type ExportRecord = { kind: string; [field: string]: unknown };
export type BatchReport = Schemas["BatchReport"];
export type NdjsonReport = Schemas["NdjsonReport"];
export type EntityDeletion = Schemas["EntityDeletion"];
export type DocumentDeletion = Schemas["DocumentDeletion"];
export type SourceRequest = Schemas["SourceRequest"];
export type JobView = Schemas["JobView"];
export type JobCounts = Schemas["JobCounts"];
export type JobStatus = Schemas["JobStatus"];
export type SourceRetraction = Schemas["SourceRetraction"];
export type ChatRequest = Schemas["ChatRequest"];
export type ChatResponse = Schemas["ChatResponse"];
export type HealthReport = Schemas["HealthReport"];
export type ToolCallStarted = Schemas["ToolCallStarted"];
export type ToolCallCompleted = Schemas["ToolCallCompleted"];
export type ChatDelta = Schemas["ChatDelta"];
export type ErrorBody = Schemas["ErrorBody"];
export type NewWorkspace = Schemas["NewWorkspace"];
export type WorkspaceView = Schemas["WorkspaceView"];
export type QuotaRequest = Schemas["QuotaRequest"];
export type WorkspaceCounts = Schemas["WorkspaceCounts"];
export type WorkspaceList = Schemas["WorkspaceList"];
export type WorkspaceDeletion = Schemas["WorkspaceDeletion"];
export type KeyScope = Schemas["KeyScope"];
export type NewKey = Schemas["NewKey"];
export type MintedKey = Schemas["MintedKey"];
export type KeyView = Schemas["KeyView"];
export type KeyList = Schemas["KeyList"];
export type KeyRevocation = Schemas["KeyRevocation"];

export declare const VERSION: string;
export declare const DEFAULT_BASE_URL: string;
/** Method and path by operation id of /openapi.json, for the operations this library sends. */
export declare const OPERATIONS: Record<string, [string, string]>;
/** The HTTP status of each of kbq's error codes. */
export declare const STATUS_OF_CODE: Record<string, number>;

export interface ClientOptions {
  /** Default: KBQ_BASE_URL (Node), then http://127.0.0.1:8080. */
  baseUrl?: string;
  /** Default: KBQ_API_KEY (Node). Sent as `Authorization: Bearer`. */
  apiKey?: string;
  /** Milliseconds per request (60000). */
  timeout?: number;
  /** Retries after a 429 or 503 (2). */
  maxRetries?: number;
  /** The longest wait before one retry, in milliseconds (30000). */
  maxRetryWait?: number;
  defaultHeaders?: Record<string, string>;
  fetch?: typeof fetch;
  /** Called for answers from a deprecated API version. */
  onDeprecation?: (message: string) => void;
  /**
   * For an `admin` key of `default`: the workspace every request acts in, sent as
   * `X-KBQ-Workspace`. Default: none, the key's own workspace.
   */
  workspace?: string;
}

export interface RequestOptions {
  /** Aborts the request (and a stream's turn). */
  signal?: AbortSignal;
}

export interface WaitOptions extends RequestOptions {
  /** The longest wait, in milliseconds; then the job is returned as it stands. Default: none. */
  timeout?: number;
}

/** What `uploadSource` sends: a Blob or File, an ArrayBuffer, or a typed array (a Node Buffer). */
export type Upload = Blob | ArrayBuffer | ArrayBufferView;

export interface UploadArgs {
  /** Default "upload". */
  source?: string;
  /** Default: the file name. */
  source_id?: string;
  title?: string;
  url?: string;
  /** The file's format; default: the Blob's type, else the file name's extension tells. */
  content_type?: string;
  /** Default: a File's name. */
  file_name?: string;
}

export type ChatStreamEvent =
  | { event: "tool_call.started"; data: ToolCallStarted }
  | { event: "tool_call.completed"; data: ToolCallCompleted }
  | { event: "delta"; data: ChatDelta }
  | { event: "done"; data: ChatResponse };

export declare class ChatStream implements AsyncIterable<ChatStreamEvent> {
  readonly response: Response;
  readonly requestId: string | null;
  /** The answer, once the `done` event has come. */
  final: ChatResponse | null;
  [Symbol.asyncIterator](): AsyncIterator<ChatStreamEvent>;
  untilDone(): Promise<ChatResponse>;
  close(): Promise<void>;
}

type ChatArgs = Omit<ChatRequest, "stream"> & { retry?: boolean };

export interface JobEvent {
  event: "progress" | "end";
  data: JobView;
}

export declare class JobEventStream implements AsyncIterable<JobEvent> {
  readonly response: Response;
  readonly requestId: string | null;
  /** The job as it ended, once the `end` event has come. */
  final: JobView | null;
  [Symbol.asyncIterator](): AsyncIterator<JobEvent>;
  untilEnd(): Promise<JobView>;
  close(): Promise<void>;
}

export declare class Client {
  constructor(options?: ClientOptions);
  readonly baseUrl: string;
  /** The workspace named in `X-KBQ-Workspace` on every request, or null (the key's own). */
  readonly workspace: string | null;
  /** The calling key (`GET /v1/key`): its name, id, scopes, what it may do, and its workspace. */
  keyInfo(options?: RequestOptions): Promise<CallingKey>;
  readonly graph: {
    traverse(args: TraversalRequest, options?: RequestOptions): Promise<TraversalResponse>;
    search(args: SearchRequest, options?: RequestOptions): Promise<SearchResponse>;
    entity(name: string, options?: RequestOptions): Promise<Entity | null>;
    documents(args: DocumentsRequest, options?: RequestOptions): Promise<DocumentsResponse>;
    merges(args?: MergesRequest, options?: RequestOptions): Promise<MergesResponse>;
    stats(options?: RequestOptions): Promise<GraphStats>;
  };
  readonly rag: {
    semantic(args: RagRequest, options?: RequestOptions): Promise<RagAnswer>;
    keyword(args: RagRequest, options?: RequestOptions): Promise<RagAnswer>;
    hybrid(args: HybridRequest, options?: RequestOptions): Promise<RagAnswer>;
  };
  readonly ingest: {
    entities(records: NewEntity[], options?: RequestOptions): Promise<BatchReport>;
    relationships(records: NewRelationship[], options?: RequestOptions): Promise<BatchReport>;
    documents(records: NewDocument[], options?: RequestOptions): Promise<BatchReport>;
    ndjson(records: string | ImportRecord[], options?: RequestOptions): Promise<NdjsonReport>;
    deleteEntity(name: string, options?: RequestOptions): Promise<EntityDeletion>;
    deleteDocument(id: string, options?: RequestOptions): Promise<DocumentDeletion>;
    addSource(args: SourceRequest, options?: RequestOptions): Promise<JobView>;
    uploadSource(file: Upload, args?: UploadArgs, options?: RequestOptions): Promise<JobView>;
    job(jobId: string, options?: RequestOptions): Promise<JobView>;
    wait(jobId: string, options?: WaitOptions): Promise<JobView>;
    jobEvents(jobId: string, options?: RequestOptions): Promise<JobEventStream>;
    cancelJob(jobId: string, options?: RequestOptions): Promise<JobView>;
    deleteSource(source: string, sourceId: string, options?: RequestOptions): Promise<SourceRetraction>;
    listSources(options?: RequestOptions): Promise<SourceList>;
  };
  readonly agent: {
    chat(args: ChatArgs, options?: RequestOptions): Promise<ChatResponse>;
    chatStream(args: ChatArgs, options?: RequestOptions): Promise<ChatStream>;
    health(options?: RequestOptions): Promise<HealthReport>;
  };
  /** The admin API: an `admin` key of `default` (an operator's). */
  readonly admin: {
    createWorkspace(args: NewWorkspace, options?: RequestOptions): Promise<WorkspaceView>;
    setWorkspaceQuota(name: string, quota: QuotaRequest, options?: RequestOptions): Promise<WorkspaceView>;
    listWorkspaces(options?: RequestOptions): Promise<WorkspaceList>;
    getWorkspace(name: string, options?: RequestOptions): Promise<WorkspaceView>;
    deleteWorkspace(name: string, options?: RequestOptions): Promise<WorkspaceDeletion>;
    mintKey(workspace: string, args: NewKey, options?: RequestOptions): Promise<MintedKey>;
    listKeys(workspace: string, options?: RequestOptions): Promise<KeyList>;
    revokeKey(workspace: string, keyId: string, options?: RequestOptions): Promise<KeyRevocation>;
    /** The workspace's knowledge base in the import format, a record at a time; the last is `end`. */
    export(args?: { workspace?: string }, options?: RequestOptions): AsyncIterable<ExportRecord>;
  };
}
export default Client;

export interface APIErrorFields {
  status?: number | null;
  code?: string | null;
  field?: string | null;
  requestId?: string | null;
  retryAfter?: number | null;
  body?: unknown;
}

export declare class KbqError extends Error {}
export declare class APIError extends KbqError {
  constructor(message: string, fields?: APIErrorFields);
  /** The HTTP status; null when nothing was answered. */
  readonly status: number | null;
  readonly statusCode: number | null;
  /** kbq's error code (docs/errors.md). */
  readonly code: string | null;
  /** The request field at fault, when there is one. */
  readonly field: string | null;
  readonly requestId: string | null;
  /** Milliseconds the answer's Retry-After asked to wait. */
  readonly retryAfter: number | null;
  readonly body: unknown;
}
export declare class APIConnectionError extends APIError {}
export declare class APITimeoutError extends APIConnectionError {}
export declare class APIUserAbortError extends APIConnectionError {}
export declare class BadRequestError extends APIError {}
export declare class AuthenticationError extends APIError {}
export declare class PermissionDeniedError extends APIError {}
export declare class NotFoundError extends APIError {}
export declare class GoneError extends APIError {}
export declare class RateLimitError extends APIError {}
export declare class InternalServerError extends APIError {}
export declare class ServiceUnavailableError extends APIError {}
