//! kbq's tools over the Model Context Protocol, at `/mcp` (Streamable HTTP, with rmcp; see
//! `http`): the agent's six built-in tools, called through the same tool actors the
//! agent's sessions call, and four tools for what the graph and RAG endpoints do that those
//! six do not (entity search, exact lookup, graph documents, keyword search), answered by the
//! same functions as those endpoints. docs/mcp.md has the catalogue and a host's config.
//!
//! The HTTP layers in front of `/mcp` are the API's: the key (`require_key`), the `read`
//! scope, and the key's graph budget, per HTTP request. Here, per tool call: the `write`
//! scope for MemoryStoreTool, the key as the owner of any memory a call touches, a count in
//! /metrics and a log line with the key.

pub mod http;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use actix_web::web;
use kbq_actors::{GraphPool, ToolPool};
use kbq_store::KnowledgeBase;
use kbq_tools::{EntityExtractor, ToolContext, ToolError, Toolbox};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::auth::{Scope, Scopes};
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::routes::graph::{DocumentsRequest, SearchRequest, documents_answer, search_answer};
use crate::routes::rag::{RagRequest, RagService};

/// The protocol versions served: the current stable one (2026-07-28) and the one before it.
pub const PROTOCOL_VERSIONS: &[ProtocolVersion] =
    &[ProtocolVersion::V_2025_11_25, ProtocolVersion::V_2026_07_28];

/// The tools beyond the agent's six, by name.
pub const ENTITY_SEARCH: &str = "EntitySearchTool";
pub const ENTITY_LOOKUP: &str = "EntityLookupTool";
pub const GRAPH_DOCUMENTS: &str = "GraphDocumentsTool";
pub const KEYWORD_SEARCH: &str = "KeywordSearchTool";

/// Who calls: the key's id (the owner of its memories) and its scopes.
#[derive(Debug, Clone)]
pub struct Caller {
    pub owner: String,
    pub scopes: Scopes,
}

impl From<&crate::auth::KeyIdentity> for Caller {
    fn from(k: &crate::auth::KeyIdentity) -> Self {
        Caller {
            owner: k.id.to_string(),
            scopes: k.scopes,
        }
    }
}

impl Caller {
    /// The local user of `kbq mcp` without a key: every scope, memories of its own.
    pub fn local() -> Caller {
        Caller {
            owner: "local".into(),
            scopes: Scopes::ALL,
        }
    }
}

/// What the tools are answered with.
pub struct McpDeps {
    pub kb: Arc<KnowledgeBase>,
    pub extractor: Arc<EntityExtractor>,
    pub tools: ToolPool,
    pub graph: GraphPool,
    pub rag: web::Data<RagService>,
    pub metrics: Option<web::Data<Metrics>>,
}

/// kbq's MCP server: one per session (or per request, stateless), all sharing [`McpDeps`].
#[derive(Clone)]
pub struct KbqMcp {
    deps: Arc<McpDeps>,
    catalogue: Arc<Vec<Tool>>,
    /// The caller when no HTTP request says (stdio).
    local: Option<Caller>,
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

fn annotations(read_only: bool) -> ToolAnnotations {
    ToolAnnotations::new()
        .read_only(read_only)
        .destructive(false)
        // A search or a lookup asked twice answers the same; a memory stored twice is two.
        .idempotent(read_only)
        .open_world(false)
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
                .with_annotations(annotations(t.read_only()))
        })
        .collect();
    let entity = inline(&json!({"$ref": "#/components/schemas/Entity"}), components);
    let extra = [
        (
            ENTITY_SEARCH,
            "Find entities whose names contain a string, ignoring case: exact matches first, then names that start with it, then the rest, by name within each group. The same search as POST /data/v1/query/graph/search.",
            schema("SearchRequest"),
            schema("SearchResponse"),
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
        ),
        (
            GRAPH_DOCUMENTS,
            "Walk the graph from an entity, then return the documents of the entities reached, scored by closeness and similarity. The same as POST /data/v1/query/graph/documents.",
            schema("DocumentsRequest"),
            schema("DocumentsResponse"),
        ),
        (
            KEYWORD_SEARCH,
            "Documents matching the query's words, by BM25 over title and content, optionally filtered by source, content type or entity. The same search as POST /v1/rag/keyword.",
            schema("RagRequest"),
            schema("RagAnswer"),
        ),
    ];
    tools.extend(extra.into_iter().map(|(name, description, input, output)| {
        Tool::new(name, description, input)
            .with_raw_output_schema(Arc::new(output))
            .with_annotations(annotations(true))
    }));
    tools
}

impl KbqMcp {
    pub fn new(deps: Arc<McpDeps>, catalogue: Arc<Vec<Tool>>, local: Option<Caller>) -> Self {
        KbqMcp {
            deps,
            catalogue,
            local,
        }
    }

    /// Runs the tool `name`: its result, or the error a host sees as a failed call.
    async fn run(&self, name: &str, caller: &Caller, args: Value) -> Result<Value, Value> {
        let tool = self
            .catalogue
            .iter()
            .find(|t| t.name == name)
            .ok_or_else(|| ToolError::UnknownTool(name.into()).to_result().value())?;
        let read_only = tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        // Every tool needs `read`, as `/mcp` itself does over HTTP; one that writes, `write` too.
        let needed: &[Scope] = if read_only {
            &[Scope::Read]
        } else {
            &[Scope::Read, Scope::Write]
        };
        if let Some(missing) = needed.iter().find(|s| !caller.scopes.allows(**s)) {
            return Err(json!({
                "error": format!("the key lacks the `{}` scope this tool needs", missing.as_str()),
                "error_type": "insufficient_scope",
            }));
        }
        let d = &self.deps;
        // The API's rules, checked as the endpoints check them; a failure names the field.
        let refused = |e: ApiError| json!({"error": e.message, "error_type": "invalid_arguments", "field": e.field});
        let failed = |e: ApiError| json!({"error": e.message, "error_type": "failed"});
        // An endpoint's error: the arguments' fault when it names a field.
        let answered = |e: ApiError| {
            if e.field.is_some() {
                refused(e)
            } else {
                failed(e)
            }
        };
        let parse = |args: &Value| serde_json::to_vec(args).unwrap_or_default();
        match name {
            ENTITY_SEARCH => {
                let req: SearchRequest = crate::extract::parse(&parse(&args)).map_err(refused)?;
                search_answer(&d.graph, req, |r| {
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
                let req: Lookup = crate::extract::parse(&parse(&args)).map_err(refused)?;
                crate::extract::name("name", &req.name).map_err(refused)?;
                let found = d
                    .graph
                    .entity(req.name)
                    .await
                    .map_err(|e| failed(e.into()))?;
                Ok(json!({"entity": found.as_deref()}))
            }
            GRAPH_DOCUMENTS => {
                let req: DocumentsRequest =
                    crate::extract::parse(&parse(&args)).map_err(refused)?;
                documents_answer(&d.graph, req, |r| {
                    serde_json::to_value(&r).unwrap_or(Value::Null)
                })
                .await
                .map_err(answered)
            }
            KEYWORD_SEARCH => {
                let req: RagRequest = crate::extract::parse(&parse(&args)).map_err(refused)?;
                d.rag
                    .answer(kbq_tools::rag::Method::Keyword, req)
                    .await
                    .map(|a| serde_json::to_value(&a).unwrap_or(Value::Null))
                    .map_err(answered)
            }
            _ => {
                let ctx = ToolContext {
                    kb: d.kb.clone(),
                    extractor: d.extractor.clone(),
                    owner: caller.owner.clone(),
                };
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
                 and remember facts with MemoryStoreTool (MemorySearchTool recalls them).",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(PROTOCOL_VERSIONS)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.catalogue.iter().find(|t| t.name == name).cloned()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(
            self.catalogue.as_ref().clone(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Over HTTP, rmcp keeps the request's head in the context; its extensions hold the
        // caller (`http::handle`).
        let caller = context
            .extensions
            .get::<::http::request::Parts>()
            .and_then(|p| p.extensions.get::<Caller>())
            .cloned()
            .or_else(|| self.local.clone())
            .ok_or_else(|| McpError::invalid_request("no API key came with the call", None))?;
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
