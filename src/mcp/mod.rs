//! kbq's tools over the Model Context Protocol, at `/mcp` (Streamable HTTP, with rmcp; see
//! `http`) and over stdio (`kbq mcp`): the agent's six built-in tools, called through the
//! same tool actors the agent's sessions call; four tools for what the graph and RAG
//! endpoints do that those six do not (entity search, exact lookup, graph documents, keyword
//! search), answered by the same functions as those endpoints; and ingestion's three
//! (`sources`). docs/mcp.md has the catalogue and a host's config.
//!
//! The HTTP layers in front of `/mcp` are the API's: the key (`require_key`), the `read`
//! scope, and the key's graph budget, per HTTP request. Here, per tool call: the `write`
//! scope for MemoryStoreTool and ingestion's tools (a key without it is not shown them
//! either), the key as the owner of any memory or job a call touches, a count in /metrics
//! and a log line with the key.
//!
//! # Layout
//! - [`http`]: the bridge from actix-web to rmcp's Streamable HTTP service, sessions by key.
//! - [`sources`]: ingestion's tools: a source added, its job followed, the source retracted.

pub mod http;
pub mod sources;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use actix_web::web;
use futures::future::BoxFuture;
use kbq_actors::{GraphPool, ToolPool};
use kbq_tools::{ToolContext, ToolError, Toolbox};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::auth::{Scope, Scopes};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::routes::graph::{DocumentsRequest, SearchRequest, documents_answer, search_answer};
use crate::routes::rag::{RagRequest, RagService};
use crate::workspaces::Workspace;

/// The protocol versions served: the current stable one (2026-07-28) and the one before it.
pub const PROTOCOL_VERSIONS: &[ProtocolVersion] =
    &[ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28];

/// The tools beyond the agent's six, by name.
pub const ENTITY_SEARCH: &str = "EntitySearchTool";
pub const ENTITY_LOOKUP: &str = "EntityLookupTool";
pub const GRAPH_DOCUMENTS: &str = "GraphDocumentsTool";
pub const KEYWORD_SEARCH: &str = "KeywordSearchTool";

/// Who calls: the key's id (the owner of its memories), its scopes, and the workspace the
/// call works in.
#[derive(Clone)]
pub struct Caller {
    pub owner: String,
    pub scopes: Scopes,
    pub workspace: Workspace,
}

impl Caller {
    /// The caller of an HTTP request: its key, in the workspace the key middleware resolved.
    pub fn new(key: &crate::auth::KeyIdentity, workspace: Workspace) -> Caller {
        Caller {
            owner: key.id.to_string(),
            scopes: key.scopes,
            workspace,
        }
    }

    /// The local user of `kbq mcp` without a key: every scope, memories of its own, in
    /// `workspace`.
    pub fn local(workspace: Workspace) -> Caller {
        Caller {
            owner: "local".into(),
            scopes: Scopes::ALL,
            workspace,
        }
    }
}

/// Who calls over stdio, where no HTTP request names a key.
#[derive(Clone)]
pub enum LocalCaller {
    /// The same caller for every call: `kbq mcp` without a key.
    Fixed(Caller),
    /// The holder of `KBQ_API_KEY`, resolved again at each call (a minted key is read from
    /// the store at most once per `auth::MINTED_KEY_WINDOW`): a key revoked, or a workspace
    /// deleted, by another node stops working here too, as over HTTP.
    Keyed(Arc<dyn Fn() -> BoxFuture<'static, Result<Caller, String>> + Send + Sync>),
}

/// What the tools are answered with, beside the caller's workspace.
pub struct McpDeps {
    pub tools: ToolPool,
    pub graph: GraphPool,
    pub rag: web::Data<RagService>,
    pub ingest: sources::Ingestion,
    pub metrics: Option<web::Data<Metrics>>,
}

/// kbq's MCP server: one per session (or per request, stateless), all sharing [`McpDeps`].
#[derive(Clone)]
pub struct KbqMcp {
    deps: Arc<McpDeps>,
    catalogue: Arc<Vec<Tool>>,
    /// The caller when no HTTP request says (stdio).
    local: Option<LocalCaller>,
}

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        _ => JsonObject::new(),
    }
}

/// `schema` with every `$ref` into the document's components replaced by what it names, so
/// that it stands alone as MCP asks.
fn inline(schema: &Value, components: &Value) -> Value {
    match schema {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref")
                && let Some(name) = r.strip_prefix("#/components/schemas/")
            {
                let mut out = inline(&components[name], components);
                if let (Value::Object(target), Some(Value::String(d))) =
                    (&mut out, m.get("description"))
                {
                    target.insert("description".into(), Value::String(d.clone()));
                }
                return out;
            }
            Value::Object(
                m.iter()
                    .map(|(k, v)| (k.clone(), inline(v, components)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.iter().map(|v| inline(v, components)).collect()),
        other => other.clone(),
    }
}

/// What a tool's call does to the knowledge base: its annotations say it to a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    /// Reads only: asked twice, it answers the same.
    Reads,
    /// Adds: a memory stored twice is two memories.
    Adds,
    /// Replaces or removes what a source said: the same call again changes nothing more.
    Replaces,
}

fn annotations(effect: Effect) -> ToolAnnotations {
    ToolAnnotations::new()
        .read_only(effect == Effect::Reads)
        .destructive(effect == Effect::Replaces)
        .idempotent(effect != Effect::Adds)
        .open_world(false)
}

/// The scopes a call of `tool` needs: `read` for every tool, as `/mcp` itself needs over
/// HTTP; `write` too for a tool that writes and for ingestion's, as their routes need.
fn needs(tool: &Tool) -> &'static [Scope] {
    let read_only = tool
        .annotations
        .as_ref()
        .and_then(|a| a.read_only_hint)
        .unwrap_or(false);
    if read_only && !sources::TOOLS.contains(&tool.name.as_ref()) {
        &[Scope::Read]
    } else {
        &[Scope::Read, Scope::Write]
    }
}

/// The args of a call as the request type `T`, checked as its endpoint checks a body.
fn arguments<T: DeserializeOwned>(args: &Value) -> Result<T, Value> {
    crate::extract::parse(&serde_json::to_vec(args).unwrap_or_default()).map_err(invalid_arguments)
}

/// A call whose arguments break the tool's rules; `field` names the one at fault.
fn invalid_arguments(e: ApiError) -> Value {
    json!({"error": e.message, "error_type": "invalid_arguments", "field": e.field})
}

/// An endpoint's error: the arguments' fault when it names a field, else the knowledge
/// base's.
fn answered(e: ApiError) -> Value {
    if e.field.is_some() {
        invalid_arguments(e)
    } else {
        failed(e)
    }
}

fn failed(e: ApiError) -> Value {
    json!({"error": e.message, "error_type": "failed"})
}

/// What the call names (a job, a source) is not there, or not this key's.
fn not_found(message: &str) -> Value {
    json!({"error": message, "error_type": "not_found"})
}

/// Every tool, with its input and output schemas: the agent's from the tools themselves, the
/// others from the API's OpenAPI document (`document`), whose rules they are checked by.
pub fn catalogue(document: &Value) -> Vec<Tool> {
    let components = &document["components"]["schemas"];
    let schema = |name: &str| object(inline(&components[name], components));
    let mut tools: Vec<Tool> = Toolbox::default()
        .tools()
        .iter()
        .map(|t| {
            Tool::new(t.name(), t.description(), object(t.parameters()))
                .with_raw_output_schema(Arc::new(object(t.output_schema())))
                .with_annotations(annotations(if t.read_only() {
                    Effect::Reads
                } else {
                    Effect::Adds
                }))
        })
        .collect();
    let entity = inline(&json!({"$ref": "#/components/schemas/Entity"}), components);
    let extra = [
        (
            ENTITY_SEARCH,
            "Find entities whose names contain a string, ignoring case: exact matches first, then names that start with it, then the rest, by name within each group. The same search as POST /data/v1/query/graph/search.",
            schema("SearchRequest"),
            schema("SearchResponse"),
            Effect::Reads,
        ),
        (
            ENTITY_LOOKUP,
            "One entity by its exact name, with its type and properties; `entity` is null when there is none. The same lookup as GET /data/v1/query/graph/entity/{name}.",
            object(json!({
                "type": "object",
                "properties": {"name": {"type": "string", "description": "The exact name", "minLength": 1, "maxLength": 512}},
                "required": ["name"],
                "additionalProperties": false
            })),
            object(json!({
                "type": "object",
                "properties": {"entity": {"oneOf": [entity, {"type": "null"}]}},
                "required": ["entity"]
            })),
            Effect::Reads,
        ),
        (
            GRAPH_DOCUMENTS,
            "Walk the graph from an entity, then return the documents of the entities reached, scored by closeness and similarity. The same as POST /data/v1/query/graph/documents.",
            schema("DocumentsRequest"),
            schema("DocumentsResponse"),
            Effect::Reads,
        ),
        (
            KEYWORD_SEARCH,
            "Documents matching the query's words, by BM25 over title and content, optionally filtered by source, content type or entity. The same search as POST /v1/rag/keyword.",
            schema("RagRequest"),
            schema("RagAnswer"),
            Effect::Reads,
        ),
    ];
    let ingestion = sources::tools(schema);
    tools.extend(extra.into_iter().chain(ingestion).map(
        |(name, description, input, output, effect)| {
            Tool::new(name, description, input)
                .with_raw_output_schema(Arc::new(output))
                .with_annotations(annotations(effect))
        },
    ));
    tools
}

impl KbqMcp {
    pub fn new(deps: Arc<McpDeps>, catalogue: Arc<Vec<Tool>>, local: Option<LocalCaller>) -> Self {
        KbqMcp {
            deps,
            catalogue,
            local,
        }
    }

    /// Who makes a request: over HTTP, the key in the request's head (rmcp keeps the head in
    /// the context, and `http::handle` put the caller in its extensions); over stdio, the
    /// local caller.
    async fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, McpError> {
        let by_http = context
            .extensions
            .get::<::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Caller>())
            .cloned();
        match (by_http, &self.local) {
            (Some(caller), _) => Ok(caller),
            (None, Some(LocalCaller::Fixed(caller))) => Ok(caller.clone()),
            (None, Some(LocalCaller::Keyed(resolve))) => resolve()
                .await
                .map_err(|message| McpError::invalid_request(message, None)),
            (None, None) => Err(McpError::invalid_request(
                "no API key came with the call",
                None,
            )),
        }
    }

    /// Runs the tool `name`: its result, or the error a host sees as a failed call.
    async fn run(&self, name: &str, caller: &Caller, args: Value) -> Result<Value, Value> {
        let tool = self
            .catalogue
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| ToolError::UnknownTool(name.into()).to_result().value())?;
        // A tool the key is not shown is still refused by name, with the scope it lacks.
        if let Some(missing) = needs(tool).iter().find(|s| !caller.scopes.allows(**s)) {
            return Err(json!({
                "error": format!("the key lacks the `{}` scope this tool needs", missing.as_str()),
                "error_type": "insufficient_scope",
            }));
        }
        let d = &self.deps;
        // The API's rules, checked as the endpoints check them; a failure names the field.
        match name {
            ENTITY_SEARCH => {
                let req: SearchRequest = arguments(&args)?;
                search_answer(&d.graph, &caller.workspace.kb, req, |r| {
                    serde_json::to_value(&r).unwrap_or(Value::Null)
                })
                .await
                .map_err(answered)
            }
            ENTITY_LOOKUP => {
                #[derive(serde::Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Lookup {
                    name: String,
                }
                let req: Lookup = arguments(&args)?;
                crate::extract::name("name", &req.name).map_err(invalid_arguments)?;
                let found = d
                    .graph
                    .entity(&caller.workspace.kb, req.name)
                    .await
                    .map_err(|e| failed(e.into()))?;
                Ok(json!({"entity": found.as_deref()}))
            }
            GRAPH_DOCUMENTS => {
                let req: DocumentsRequest = arguments(&args)?;
                documents_answer(&d.graph, &caller.workspace.kb, req, |r| {
                    serde_json::to_value(&r).unwrap_or(Value::Null)
                })
                .await
                .map_err(answered)
            }
            KEYWORD_SEARCH => {
                let req: RagRequest = arguments(&args)?;
                d.rag
                    .answer(
                        &caller.workspace.knowledge,
                        kbq_tools::rag::Method::Keyword,
                        req,
                    )
                    .await
                    .map(|a| serde_json::to_value(&a).unwrap_or(Value::Null))
                    .map_err(answered)
            }
            sources::ADD_SOURCE | sources::INGEST_JOB | sources::DELETE_SOURCE => {
                d.ingest
                    .run(&caller.workspace, name, &caller.owner, args)
                    .await
            }
            _ => {
                let ctx = ToolContext::new(&caller.workspace, caller.owner.clone());
                d.tools
                    .call(name, &ctx, args)
                    .await
                    .map(|r| r.value())
                    .map_err(|e| e.to_result().value())
            }
        }
    }
}

impl ServerHandler for KbqMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("kbq", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "kbq's knowledge base: a graph of entities and relationships, searchable documents, \
                 and a memory per API key. Find entities with EntitySearchTool or \
                 EntityLookupTool, walk the graph with KnowledgeGraphTool, find documents with \
                 HybridSearchTool, SemanticSearchTool, KeywordSearchTool or GraphDocumentsTool, \
                 and remember facts with MemoryStoreTool (MemorySearchTool recalls them). \
                 With the `write` scope, add a note or a document to the knowledge base with \
                 AddSourceTool, follow its job with IngestJobTool, and retract it with \
                 DeleteSourceTool.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(PROTOCOL_VERSIONS)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.catalogue.iter().find(|t| t.name == name).cloned()
    }

    /// The tools the caller's key may call: one whose scope it lacks is not shown.
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let caller = self.caller(&context).await?;
        Ok(ListToolsResult::with_all_items(
            self.catalogue
                .iter()
                .filter(|t| needs(t).iter().all(|s| caller.scopes.allows(*s)))
                .cloned()
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let caller = self.caller(&context).await?;
        let name = request.name.to_string();
        let args = Value::Object(request.arguments.unwrap_or_default());
        let started = Instant::now();
        let outcome = self.run(&name, &caller, args).await;
        let ok = outcome.is_ok();
        if let Some(m) = &self.deps.metrics {
            // Only the catalogue's names: any other would be a series of its own, made by
            // whoever calls.
            let known = self.catalogue.iter().any(|t| t.name == name);
            m.observe_tool_call(if known { &name } else { "unknown" }, ok);
        }
        tracing::info!(
            tool = %name,
            key = %caller.owner,
            ok,
            ms = started.elapsed().as_secs_f64() * 1000.0,
            "mcp tool call"
        );
        let result = match outcome {
            Ok(v) => {
                let mut r = CallToolResult::success(vec![ContentBlock::text(v.to_string())]);
                r.structured_content = Some(v);
                r
            }
            // No structured content: a host checks it against the tool's output schema, which
            // describes a success. The error object is the text.
            Err(e) => CallToolResult::error(vec![ContentBlock::text(e.to_string())]),
        };
        Ok(result.into())
    }
}
