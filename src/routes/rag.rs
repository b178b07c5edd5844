//! The RAG endpoints under `/v1/rag`: semantic, keyword and hybrid document search.
//!
//! Retrieval only, no model: each answers from the knowledge base through `kbq_tools::rag`
//! within `graph.call_timeout_ms`. Paths, payloads and scores are documented in docs/api.md.

use std::time::Duration;

use actix_web::http::header::ContentType;
use actix_web::{HttpResponse, web};
use kbq_store::DocumentFilter;
use kbq_tools::Workspace;
use kbq_tools::rag::{self, FusionWeights, Method, RagAnswer, RagQuery};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::extract::{Range, Rules, ValidJson, name};
use crate::offload::Offload;

/// Longest query, in characters.
pub const MAX_QUERY_CHARS: usize = 4096;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/semantic").route(web::post().to(semantic)))
        .service(web::resource("/keyword").route(web::post().to(keyword)))
        .service(web::resource("/hybrid").route(web::post().to(hybrid)));
}

/// The body of semantic and keyword search.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RagRequest {
    pub query: String,
    #[serde(default, deserialize_with = "crate::extract::integer")]
    pub limit: Option<i64>,
    pub filters: Option<Filters>,
}

impl RagRequest {
    const LIMIT: Range = Range::new("limit", 1, 100, 10);
}

impl Rules for RagRequest {
    const RANGES: &'static [Range] = &[Self::LIMIT];
    const NOT_BLANK: &'static [&'static str] = &["query"];
    const LENGTHS: &'static [(&'static str, usize)] = &[("query", MAX_QUERY_CHARS)];
}

/// The body of hybrid search: that of semantic and keyword search, and `graph_depth`, which
/// only hybrid search takes (the other two refuse it as a field they do not have).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HybridRequest {
    pub query: String,
    #[serde(default, deserialize_with = "crate::extract::integer")]
    pub limit: Option<i64>,
    pub filters: Option<Filters>,
    #[serde(default, deserialize_with = "crate::extract::integer")]
    pub graph_depth: Option<i64>,
}

impl HybridRequest {
    const GRAPH_DEPTH: Range = Range::new("graph_depth", 0, 3, 1);
}

impl Rules for HybridRequest {
    const RANGES: &'static [Range] = &[RagRequest::LIMIT, Self::GRAPH_DEPTH];
    const NOT_BLANK: &'static [&'static str] = &["query"];
    const LENGTHS: &'static [(&'static str, usize)] = RagRequest::LENGTHS;
}

/// A search's body as the fields the three share, and the hops of graph expansion (0 for
/// the two that do not expand).
pub trait SearchBody {
    fn into_parts(self) -> Result<(RagRequest, u32), ApiError>;
}

impl SearchBody for RagRequest {
    fn into_parts(self) -> Result<(RagRequest, u32), ApiError> {
        Ok((self, 0))
    }
}

impl SearchBody for HybridRequest {
    fn into_parts(self) -> Result<(RagRequest, u32), ApiError> {
        let depth = HybridRequest::GRAPH_DEPTH.check(self.graph_depth)? as u32;
        let HybridRequest {
            query,
            limit,
            filters,
            ..
        } = self;
        let common = RagRequest {
            query,
            limit,
            filters,
        };
        Ok((common, depth))
    }
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Filters {
    /// Only documents of this source (exact match).
    pub source: Option<String>,
    /// Only documents of this content type (exact match).
    pub content_type: Option<String>,
    /// Only documents linked to this entity (exact name): by their `entity_name`, or chunks
    /// of an ingested source that gave it.
    pub entity_name: Option<String>,
}

impl Rules for Filters {
    const NAMES: &'static [&'static str] = &["source", "content_type", "entity_name"];
}

fn query(req: RagRequest, graph_depth: u32, weights: FusionWeights) -> Result<RagQuery, ApiError> {
    if req.query.trim().is_empty() {
        return Err(ApiError::invalid("query", "query must not be blank"));
    }
    if kbq_store::model::longer_than(&req.query, MAX_QUERY_CHARS) {
        return Err(ApiError::invalid(
            "query",
            format!("query must be at most {MAX_QUERY_CHARS} characters"),
        ));
    }
    let filters = req.filters.unwrap_or_default();
    for (field, value) in [
        ("filters.source", &filters.source),
        ("filters.content_type", &filters.content_type),
        ("filters.entity_name", &filters.entity_name),
    ] {
        if let Some(v) = value {
            name(field, v)?;
        }
    }
    Ok(RagQuery {
        limit: RagRequest::LIMIT.check(req.limit)? as usize,
        filter: DocumentFilter {
            source: filters.source,
            content_type: filters.content_type,
            entity_name: filters.entity_name,
        },
        graph_depth,
        weights,
        query: req.query,
    })
}

/// What the RAG handlers need beside the request's workspace (whose knowledge base and entity
/// extractor they search): the runtime the search runs on, and its time limit.
pub struct RagService {
    offload: Offload,
    /// How long one search may take (`graph.call_timeout_ms`).
    timeout: Duration,
    /// Hybrid search's fusion (`[rag]`).
    weights: FusionWeights,
}

impl RagService {
    pub fn new(offload: Offload, timeout: Duration, weights: FusionWeights) -> Self {
        RagService {
            offload,
            timeout,
            weights,
        }
    }

    /// Checks the request, then searches `workspace` by `method` on the main runtime within
    /// the limit: the answer of the HTTP routes and of the MCP tools alike.
    pub async fn answer(
        &self,
        workspace: &Workspace,
        method: Method,
        body: impl SearchBody,
    ) -> Result<RagAnswer, ApiError> {
        let (req, graph_depth) = body.into_parts()?;
        let q = query(req, graph_depth, self.weights)?;
        let (kb, extractor, limit) = (
            workspace.kb.clone(),
            workspace.extractor.clone(),
            self.timeout,
        );
        self.offload
            .run(async move {
                tokio::time::timeout(limit, rag::search(&kb, &extractor, method, &q)).await
            })
            .await?
            .map_err(|_| {
                ApiError::unavailable(format!("the search did not finish within {limit:?}"))
            })?
            .map_err(ApiError::from)
    }

    async fn search(
        &self,
        workspace: &Workspace,
        method: Method,
        body: impl SearchBody,
    ) -> Result<HttpResponse, ApiError> {
        let answer = self.answer(workspace, method, body).await?;
        Ok(HttpResponse::Ok()
            .insert_header(ContentType::json())
            .body(answer.to_json()))
    }
}

/// The three searches differ only in their path, method and doc: one piece writes each
/// handler with its OpenAPI operation, so that their answers are documented once.
macro_rules! search {
    ($(#[doc = $doc:literal])* $name:ident, $path:literal, $method:expr, $body:ty) => {
        $(#[doc = $doc])*
        #[utoipa::path(
            post,
            path = $path,
            tag = "rag",
            request_body = $body,
            responses(
                (status = 200, description = "The documents found, best first", body = RagAnswer),
                (status = 503, description = ErrorCode::ServiceUnavailable.answers(
                    "the knowledge base cannot answer, or the search took longer than `graph.call_timeout_ms`"
                ), body = ErrorBody),
            ),
            security(("bearer" = ["read"]), ("api_key" = ["read"])),
        )]
        async fn $name(
            rag: web::Data<RagService>,
            ws: web::ReqData<crate::workspaces::Workspace>,
            ValidJson(req): ValidJson<$body>,
        ) -> Result<HttpResponse, ApiError> {
            rag.search(&ws.knowledge, $method, req).await
        }
    };
}

search!(
    /// Documents nearest to the query by embedding (cosine similarity).
    ///
    /// `graph_depth` is refused here: it applies to hybrid search only.
    semantic,
    "/v1/rag/semantic",
    Method::Semantic,
    RagRequest
);

search!(
    /// Documents matching the query's words, by BM25 over title and content.
    ///
    /// `graph_depth` is refused here: it applies to hybrid search only.
    keyword,
    "/v1/rag/keyword",
    Method::Keyword,
    RagRequest
);

search!(
    /// Semantic and keyword search plus graph expansion, fused by their weighted relative scores.
    ///
    /// Graph expansion adds the documents around the entities named in the query, up to
    /// `graph_depth` hops from each.
    hybrid,
    "/v1/rag/hybrid",
    Method::Hybrid,
    HybridRequest
);
