//! The four graph endpoints under `/data/v1/query/graph`, answered by the graph workers.

use std::io::Write;
use std::sync::Arc;

use actix_web::http::header::ContentType;
use actix_web::{HttpRequest, HttpResponse, web};
use kbq_actors::GraphPool;
use kbq_store::{
    Direction, DocumentsQuery, Entity, GraphDocuments, KnowledgeBase, Relationship, TraversalJson,
    TraversalQuery,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::extract::{
    RELATIONSHIP_TYPES, Range, Rules, ValidJson, name, name_in_path, relationship_types,
};
use crate::routes::sources::SourcesService;
use crate::workspaces::Workspace;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/query/graph").route(web::post().to(traverse)))
        .service(web::resource("/query/graph/search").route(web::post().to(search)))
        .service(web::resource("/query/graph/documents").route(web::post().to(documents)))
        .service(web::resource("/query/graph/merges").route(web::post().to(merges)))
        .service(web::resource("/query/graph/stats").route(web::get().to(stats)))
        .service(
            web::resource("/query/graph/entity/{entity_name:.*}").route(web::get().to(entity)),
        );
}

/// Why any graph query answers 503.
const UNAVAILABLE: &str = "the knowledge base or the graph workers cannot answer now";

// ---- request rules ------------------------------------------------------------------------

/// `entity_type`, when given, by the name rules. Only the graph takes it; the checks that
/// other routes share are in [`crate::extract`].
fn entity_type(value: Option<String>) -> Result<Option<String>, ApiError> {
    if let Some(t) = &value {
        name("entity_type", t)?;
    }
    Ok(value)
}

/// `direction` by [`Direction`]'s own names (the enum the document states): `both` when absent.
fn direction(value: Option<&str>) -> Result<Direction, ApiError> {
    use serde::Deserialize;
    use serde::de::value::{Error, StrDeserializer};
    let Some(value) = value else {
        return Ok(Direction::Both);
    };
    Direction::deserialize(StrDeserializer::<Error>::new(value))
        .map_err(|e| ApiError::invalid("direction", format!("direction: {e}")))
}

// ---- traverse -----------------------------------------------------------------------------

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TraversalRequest {
    pub entity_name: String,
    pub relationship_types: Option<Vec<String>>,
    // Read as a string, then as a `Direction` by the handler: serde alone calls a number
    // here malformed JSON rather than a wrong value of this field.
    /// `both` when absent.
    #[schema(value_type = Option<Direction>)]
    pub direction: Option<String>,
    #[serde(default, deserialize_with = "crate::extract::integer")]
    pub depth: Option<i64>,
    #[serde(default, deserialize_with = "crate::extract::integer")]
    pub limit: Option<i64>,
}

impl TraversalRequest {
    const DEPTH: Range = Range::new("depth", 1, 5, 2);
    const LIMIT: Range = Range::new("limit", 1, 200, 50);
}

impl Rules for TraversalRequest {
    const RANGES: &'static [Range] = &[Self::DEPTH, Self::LIMIT];
    const NAMES: &'static [&'static str] = &["entity_name", "relationship_types"];
    const LISTS: &'static [crate::extract::Items] = &[RELATIONSHIP_TYPES];
}

#[derive(Debug, Serialize, ToSchema)]
pub struct EntityAtDepth<'a> {
    #[serde(flatten)]
    pub entity: &'a Entity,
    /// Hops from the start entity (0 for the start entity).
    pub depth: u32,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TraversalResponse<'a> {
    pub entity_name: &'a str,
    pub entities_found: Vec<EntityAtDepth<'a>>,
    pub relationships: Vec<&'a Relationship>,
    pub total_entities: usize,
    pub total_relationships: usize,
    /// True when `limit` stopped the walk before it met every reachable entity.
    pub truncated: bool,
}

/// Walks the graph breadth-first from an entity.
///
/// The start entity comes first, with `depth` 0. The walk's rules (canonical order, cycles,
/// `truncated`) are in docs/api.md, "Traversal".
#[utoipa::path(
    post,
    path = "/data/v1/query/graph",
    tag = "graph",
    request_body = TraversalRequest,
    responses(
        (status = 200, description = "The entities reached and the edges examined; empty lists for an unknown entity", body = TraversalResponse),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers(UNAVAILABLE), body = ErrorBody),
    ),
    security(("bearer" = ["read"]), ("api_key" = ["read"])),
)]
async fn traverse(
    graph: web::Data<GraphPool>,
    sources: web::Data<SourcesService>,
    ws: web::ReqData<Workspace>,
    ValidJson(req): ValidJson<TraversalRequest>,
) -> Result<HttpResponse, ApiError> {
    name("entity_name", &req.entity_name)?;
    let query = TraversalQuery {
        relationship_types: relationship_types(req.relationship_types)?,
        direction: direction(req.direction.as_deref())?,
        depth: TraversalRequest::DEPTH.check(req.depth)? as u32,
        limit: TraversalRequest::LIMIT.check(req.limit)? as usize,
        start: req.entity_name,
    };
    let mut walk = graph.traverse(&ws.kb, query.clone()).await?;
    if walk.total_entities == 0
        && let Some(target) = sources.alias_target(&ws.kb, &query.start).await?
    {
        // A name a source's resolution merged into another entity walks from that entity.
        let mut from_target = query.clone();
        from_target.start = target;
        walk = graph.traverse(&ws.kb, from_target).await?;
    }
    Ok(HttpResponse::Ok()
        .insert_header(ContentType::json())
        .body(traversal_body(&query.start, &walk)))
}

/// The body of a traversal: the bytes `serde_json` writes for [`TraversalResponse`], from
/// the entities and relationships the walk wrote as JSON (a unit test holds both ways to the
/// same bytes).
fn traversal_body(start: &str, walk: &TraversalJson) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(walk.entities.len() + walk.relationships.len() + start.len() + 160);
    out.extend_from_slice(b"{\"entity_name\":");
    // A `&str` always serializes.
    let _ = serde_json::to_writer(&mut out, start);
    out.extend_from_slice(b",\"entities_found\":[");
    out.extend_from_slice(walk.entities.as_bytes());
    out.extend_from_slice(b"],\"relationships\":[");
    out.extend_from_slice(walk.relationships.as_bytes());
    // Numbers and a bool always serialize.
    let _ = write!(
        out,
        "],\"total_entities\":{},\"total_relationships\":{},\"truncated\":{}}}",
        walk.total_entities, walk.total_relationships, walk.truncated
    );
    out
}

// ---- search -------------------------------------------------------------------------------

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    pub query: String,
    pub entity_type: Option<String>,
    #[serde(default, deserialize_with = "crate::extract::integer")]
    pub limit: Option<i64>,
}

impl SearchRequest {
    const LIMIT: Range = Range::new("limit", 1, 100, 20);
}

impl Rules for SearchRequest {
    const RANGES: &'static [Range] = &[Self::LIMIT];
    const NAMES: &'static [&'static str] = &["query", "entity_type"];
}

#[derive(Debug, Serialize, ToSchema)]
pub struct SearchResponse<'a> {
    pub query: &'a str,
    pub entity_type: Option<&'a str>,
    pub results: Vec<&'a Entity>,
    pub total: usize,
}

/// Finds entities whose name contains the query, ignoring case.
///
/// Exact matches first, then names that start with the query, then the rest; by name within
/// each group.
#[utoipa::path(
    post,
    path = "/data/v1/query/graph/search",
    tag = "graph",
    request_body = SearchRequest,
    responses(
        (status = 200, description = "The matching entities, best first", body = SearchResponse),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers(UNAVAILABLE), body = ErrorBody),
    ),
    security(("bearer" = ["read"]), ("api_key" = ["read"])),
)]
async fn search(
    graph: web::Data<GraphPool>,
    ws: web::ReqData<Workspace>,
    ValidJson(req): ValidJson<SearchRequest>,
) -> Result<HttpResponse, ApiError> {
    search_answer(&graph, &ws.kb, req, |r| HttpResponse::Ok().json(r)).await
}

/// Checks a search and runs it; `respond` makes the answer of the response (the HTTP route
/// writes it, the MCP tool keeps it as JSON).
pub async fn search_answer<R>(
    graph: &GraphPool,
    kb: &Arc<KnowledgeBase>,
    req: SearchRequest,
    respond: impl FnOnce(SearchResponse<'_>) -> R,
) -> Result<R, ApiError> {
    name("query", &req.query)?;
    let entity_type = entity_type(req.entity_type)?;
    let limit = SearchRequest::LIMIT.check(req.limit)? as usize;
    let hits = graph
        .search(kb, req.query.clone(), entity_type.clone(), limit)
        .await?;
    Ok(respond(SearchResponse {
        query: &req.query,
        entity_type: entity_type.as_deref(),
        results: hits.iter().map(|e| &**e).collect(),
        total: hits.len(),
    }))
}

// ---- entity by name -----------------------------------------------------------------------

/// One entity by exact name, or `null`.
#[utoipa::path(
    get,
    path = "/data/v1/query/graph/entity/{entity_name}",
    tag = "graph",
    params((
        "entity_name" = String,
        Path,
        description = "The exact name, percent-encoded: everything after `/entity/` is decoded in full, so `OS%2F360` is `OS/360`",
    )),
    responses(
        (status = 200, description = "The entity, or `null` when there is none", body = Option<Entity>),
        (status = 400, description = ErrorCode::InvalidRequest.answers("the name is blank, too long, or not UTF-8"), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers(UNAVAILABLE), body = ErrorBody),
    ),
    security(("bearer" = ["read"]), ("api_key" = ["read"])),
)]
async fn entity(
    graph: web::Data<GraphPool>,
    sources: web::Data<SourcesService>,
    ws: web::ReqData<Workspace>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let name = name_in_path(&req, "/query/graph/entity/", "entity_name")?;
    let mut found = graph.entity(&ws.kb, name.clone()).await?;
    if found.is_none()
        && let Some(target) = sources.alias_target(&ws.kb, &name).await?
    {
        // A name a source's resolution merged into another entity finds that entity.
        found = graph.entity(&ws.kb, target).await?;
    }
    Ok(HttpResponse::Ok().json(found))
}

// ---- stats ---------------------------------------------------------------------------------

/// What the workspace's knowledge base holds.
#[derive(Debug, Serialize, ToSchema)]
pub struct GraphStats {
    pub entities: u64,
    pub relationships: u64,
    pub documents: u64,
    /// The 10 entities with the most relationships, most first (ties by name): where to
    /// start exploring. Empty when the node does not index the graph (`graph.index`).
    pub most_connected: Vec<ConnectedEntity>,
}

/// An entity and how many relationships it has, in and out.
#[derive(Debug, Serialize, ToSchema)]
pub struct ConnectedEntity {
    pub name: String,
    pub entity_type: String,
    pub relationships: u64,
}

/// How many entities `GraphStats::most_connected` lists.
const MOST_CONNECTED: usize = 10;

/// What the key's workspace holds: its entities, relationships and documents, counted by
/// the node's indexes (by the store when the graph is not indexed), and its most connected
/// entities.
#[utoipa::path(
    get,
    path = "/data/v1/query/graph/stats",
    tag = "graph",
    responses(
        (status = 200, description = "The counts", body = GraphStats),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers(UNAVAILABLE), body = ErrorBody),
    ),
    security(("bearer" = ["read"]), ("api_key" = ["read"])),
)]
async fn stats(
    sources: web::Data<SourcesService>,
    ws: web::ReqData<Workspace>,
) -> Result<HttpResponse, ApiError> {
    let kb = ws.kb.clone();
    let (counts, most) =
        sources
            .offload()
            .run(async move {
                futures::try_join!(kb.record_counts(), kb.most_connected(MOST_CONNECTED))
            })
            .await??;
    Ok(HttpResponse::Ok().json(GraphStats {
        entities: counts.entities,
        relationships: counts.relationships,
        documents: counts.documents,
        most_connected: most
            .into_iter()
            .map(|(e, n)| ConnectedEntity {
                name: e.name,
                entity_type: e.entity_type,
                relationships: n,
            })
            .collect(),
    }))
}

// ---- merges -------------------------------------------------------------------------------

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MergesRequest {
    /// Only the names merged into this entity (its exact name).
    pub entity_name: Option<String>,
    /// Only the aliases after this one, in code-point order: the `next_after` of the page
    /// before.
    pub after: Option<String>,
    /// Aliases per page.
    #[serde(default, deserialize_with = "crate::extract::integer")]
    pub limit: Option<i64>,
}

impl MergesRequest {
    const LIMIT: Range = Range::new("limit", 1, 1000, 100);
}

impl Rules for MergesRequest {
    const RANGES: &'static [Range] = &[Self::LIMIT];
    const NAMES: &'static [&'static str] = &["entity_name", "after"];
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MergesResponse {
    /// The merges, by alias in code-point order; an alias merged into two entities (by two
    /// sources) comes once for each.
    pub merges: Vec<kbq_store::sources::Merge>,
    /// The `after` that asks for the next page; `null` on the last.
    pub next_after: Option<String>,
}

/// The names that ingestion's resolution merged into other entities (aliases), with the
/// chunks that gave each: every merge a source made, a page at a time.
///
/// An alias is found by an entity lookup or a traversal as the entity it names. A merge
/// lasts while a chunk that gave it does: retracting the source takes it away.
#[utoipa::path(
    post,
    path = "/data/v1/query/graph/merges",
    tag = "graph",
    request_body = MergesRequest,
    responses(
        (status = 200, description = "A page of merges", body = MergesResponse),
        (status = 400, description = ErrorCode::InvalidRequest.answers("a name blank, too long or with control characters, or `limit` out of range"), body = ErrorBody),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers(UNAVAILABLE), body = ErrorBody),
    ),
    security(("bearer" = ["read"]), ("api_key" = ["read"])),
)]
async fn merges(
    sources: web::Data<SourcesService>,
    ws: web::ReqData<Workspace>,
    ValidJson(req): ValidJson<MergesRequest>,
) -> Result<HttpResponse, ApiError> {
    for (field, value) in [("entity_name", &req.entity_name), ("after", &req.after)] {
        if let Some(v) = value {
            name(field, v)?;
        }
    }
    let limit = MergesRequest::LIMIT.check(req.limit)? as usize;
    let (merges, more) = sources
        .merges(&ws.kb, req.entity_name, req.after, limit)
        .await?;
    let next_after = match more {
        true => merges.last().map(|m| m.alias.clone()),
        false => None,
    };
    Ok(HttpResponse::Ok().json(MergesResponse { merges, next_after }))
}

// ---- documents ----------------------------------------------------------------------------

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentsRequest {
    pub entity_name: String,
    pub entity_type: Option<String>,
    pub relationship_types: Option<Vec<String>>,
    #[serde(default, deserialize_with = "crate::extract::integer")]
    pub max_depth: Option<i64>,
    #[serde(default, deserialize_with = "crate::extract::integer")]
    pub limit: Option<i64>,
    pub resolve_documents: Option<bool>,
}

impl DocumentsRequest {
    const MAX_DEPTH: Range = Range::new("max_depth", 1, 5, 2);
    const LIMIT: Range = Range::new("limit", 1, 100, 20);
}

impl Rules for DocumentsRequest {
    const RANGES: &'static [Range] = &[Self::MAX_DEPTH, Self::LIMIT];
    const NAMES: &'static [&'static str] = &["entity_name", "entity_type", "relationship_types"];
    const LISTS: &'static [crate::extract::Items] = &[RELATIONSHIP_TYPES];
}

#[derive(Debug, Serialize, ToSchema)]
pub struct GraphDocumentResult<'a> {
    pub id: &'a str,
    pub title: &'a str,
    pub content: &'a str,
    pub source: &'a str,
    pub source_id: &'a str,
    pub content_type: &'a str,
    pub url: Option<&'a str>,
    pub score: f64,
    pub relationship: &'a str,
    pub related_entity: Option<&'a str>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DocumentsResponse<'a> {
    pub entity_name: &'a str,
    pub entity_type: Option<&'a str>,
    pub results: Vec<GraphDocumentResult<'a>>,
    #[schema(value_type = Vec<String>)]
    pub related_entities: &'a kbq_store::NameList,
    pub total: usize,
}

/// Walks the graph from an entity, then returns the documents of the entities reached, scored.
///
/// `score = 0.7 * proximity + 0.3 * similarity` (docs/api.md, "Graph documents").
#[utoipa::path(
    post,
    path = "/data/v1/query/graph/documents",
    tag = "graph",
    request_body = DocumentsRequest,
    responses(
        (status = 200, description = "The documents, best first, and the entities reached", body = DocumentsResponse),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers(UNAVAILABLE), body = ErrorBody),
    ),
    security(("bearer" = ["read"]), ("api_key" = ["read"])),
)]
async fn documents(
    graph: web::Data<GraphPool>,
    ws: web::ReqData<Workspace>,
    ValidJson(req): ValidJson<DocumentsRequest>,
) -> Result<HttpResponse, ApiError> {
    let query = documents_query(req)?;
    let (start, entity_type) = (query.start.clone(), query.entity_type.clone());
    let found = graph.documents(&ws.kb, query).await?;
    let body = documents_body(&documents_response(&start, entity_type.as_deref(), &found));
    Ok(HttpResponse::Ok()
        .insert_header(ContentType::json())
        .body(body))
}

/// The bytes `serde_json` writes for a [`DocumentsResponse`] (a unit test holds both ways to
/// the same bytes), written through [`kbq_store::json`]: escaping the documents' contents
/// and the reached names one byte at a time was a tenth of the request's time.
fn documents_body(r: &DocumentsResponse) -> Vec<u8> {
    use std::fmt::Write as _;

    use kbq_store::json::{write_f64, write_optional_str as optional, write_str, write_str_array};
    let text: usize = (r.results.iter())
        .map(|d| d.content.len() + d.title.len() + d.id.len() + 160)
        .chain(r.related_entities.iter().map(|n| n.len() + 3))
        .sum();
    let mut out = String::with_capacity(text + r.entity_name.len() + 100);
    out.push_str("{\"entity_name\":");
    write_str(&mut out, r.entity_name);
    out.push_str(",\"entity_type\":");
    optional(&mut out, r.entity_type);
    out.push_str(",\"results\":[");
    for (i, d) in r.results.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        for (field, value) in [
            ("{\"id\":", d.id),
            (",\"title\":", d.title),
            (",\"content\":", d.content),
            (",\"source\":", d.source),
            (",\"source_id\":", d.source_id),
            (",\"content_type\":", d.content_type),
        ] {
            out.push_str(field);
            write_str(&mut out, value);
        }
        out.push_str(",\"url\":");
        optional(&mut out, d.url);
        out.push_str(",\"score\":");
        write_f64(&mut out, d.score);
        out.push_str(",\"relationship\":");
        write_str(&mut out, d.relationship);
        out.push_str(",\"related_entity\":");
        optional(&mut out, d.related_entity);
        out.push('}');
    }
    out.push_str("],\"related_entities\":");
    write_str_array(&mut out, r.related_entities.iter());
    // Writing to a `String` cannot fail.
    let _ = write!(out, ",\"total\":{}}}", r.total);
    out.into_bytes()
}

/// Checks a graph-documents request and runs it; `respond` as for [`search_answer`].
pub async fn documents_answer<R>(
    graph: &GraphPool,
    kb: &Arc<KnowledgeBase>,
    req: DocumentsRequest,
    respond: impl FnOnce(DocumentsResponse<'_>) -> R,
) -> Result<R, ApiError> {
    let query = documents_query(req)?;
    let found = graph.documents(kb, query.clone()).await?;
    Ok(respond(documents_response(
        &query.start,
        query.entity_type.as_deref(),
        &found,
    )))
}

/// The query a graph-documents request asks for, once its fields are checked.
fn documents_query(req: DocumentsRequest) -> Result<DocumentsQuery, ApiError> {
    name("entity_name", &req.entity_name)?;
    Ok(DocumentsQuery {
        entity_type: entity_type(req.entity_type)?,
        relationship_types: relationship_types(req.relationship_types)?,
        max_depth: DocumentsRequest::MAX_DEPTH.check(req.max_depth)? as u32,
        limit: DocumentsRequest::LIMIT.check(req.limit)? as usize,
        resolve_documents: req.resolve_documents.unwrap_or(true),
        start: req.entity_name,
    })
}

/// The answer to a graph-documents request from `start` (of `entity_type`, when asked).
fn documents_response<'a>(
    start: &'a str,
    entity_type: Option<&'a str>,
    found: &'a GraphDocuments,
) -> DocumentsResponse<'a> {
    let results: Vec<GraphDocumentResult> = found
        .results
        .iter()
        .map(|r| GraphDocumentResult {
            id: &r.document.id,
            title: &r.document.title,
            content: &r.document.content,
            source: &r.document.source,
            source_id: &r.document.source_id,
            content_type: &r.document.content_type,
            url: r.document.url.as_deref(),
            score: r.score,
            relationship: &r.relationship,
            related_entity: r.related_entity.as_deref(),
        })
        .collect();
    DocumentsResponse {
        entity_name: start,
        entity_type,
        total: results.len(),
        results,
        related_entities: &found.related_entities,
    }
}

#[cfg(test)]
mod tests {
    use kbq_store::{Entity, GraphIndex, Relationship};
    use serde_json::json;

    use super::*;

    fn entity(name: &str, ty: &str, properties: serde_json::Value) -> Entity {
        Entity {
            id: String::new(),
            name: name.into(),
            entity_type: ty.into(),
            properties: properties.as_object().unwrap().clone(),
        }
    }

    fn rel(source: &str, target: &str, ty: &str, properties: serde_json::Value) -> Relationship {
        Relationship {
            source_name: source.into(),
            target_name: target.into(),
            relationship_type: ty.into(),
            properties: properties.as_object().unwrap().clone(),
        }
    }

    #[test]
    fn a_traversal_from_the_index_writes_the_bytes_serde_writes() {
        let index = GraphIndex::build(
            vec![
                entity(
                    "Ada \"the\" Countess",
                    "person",
                    json!({"born": 1815, "tags": ["a", "\\"]}),
                ),
                entity("Babbage", "person", json!({})),
                entity(
                    "Engine ☃\n",
                    "machine",
                    json!({"nested": {"x": null, "y": 1.5}}),
                ),
                entity("org.apache.Lonely", "thing", json!({})),
            ],
            vec![
                rel(
                    "Ada \"the\" Countess",
                    "Babbage",
                    "knows",
                    json!({"since": 1833}),
                ),
                rel("Babbage", "Engine ☃\n", "designed", json!({})),
                rel(
                    "Babbage",
                    "Ada \"the\" Countess",
                    "knows",
                    json!({"note": "\u{1}"}),
                ),
            ],
        );
        for (start, depth, limit) in [
            ("Ada \"the\" Countess", 2, 50),
            ("Babbage", 1, 2),
            ("org.apache.Lonely", 3, 10),
            ("nobody", 2, 50),
        ] {
            let query = TraversalQuery {
                start: start.into(),
                relationship_types: None,
                direction: Direction::Both,
                depth,
                limit,
            };
            let fast = traversal_body(start, &index.traverse_json(&query));
            let walk = index.traverse(&query);
            assert_eq!(walk.entities.is_empty(), start == "nobody");
            let serde = serde_json::to_vec(&TraversalResponse {
                entity_name: start,
                entities_found: (walk.entities.iter())
                    .map(|r| EntityAtDepth {
                        entity: &r.entity,
                        depth: r.depth,
                    })
                    .collect(),
                relationships: walk.relationships.iter().map(|r| &**r).collect(),
                total_entities: walk.entities.len(),
                total_relationships: walk.relationships.len(),
                truncated: walk.truncated,
            })
            .unwrap();
            assert_eq!(
                String::from_utf8(fast).unwrap(),
                String::from_utf8(serde).unwrap(),
                "{start}"
            );
        }
    }

    /// The hand-written body of graph documents is what serde_json writes, with and without
    /// results, optional fields and reached entities, for text that needs escapes.
    #[test]
    fn documents_body_is_what_serde_json_writes() {
        let result = |n: usize, url: Option<&'static str>, related: Option<&'static str>| {
            GraphDocumentResult {
                id: "document:d1",
                title: "About \"Ada\"",
                content: if n.is_multiple_of(2) {
                    "a line\nand a tab\t, \\ é 😀 \u{1}"
                } else {
                    ""
                },
                source: "generated",
                source_id: "doc-1",
                content_type: "text/plain",
                url,
                score: 0.796595 / (n as f64 + 1.0),
                relationship: if n == 0 { "self" } else { "works_at" },
                related_entity: related,
            }
        };
        let names: kbq_store::NameList = ["Bob", "C\"quoted\"\\", "中"].into_iter().collect();
        let responses = [
            DocumentsResponse {
                entity_name: "Ada",
                entity_type: None,
                results: Vec::new(),
                related_entities: &kbq_store::NameList::default(),
                total: 0,
            },
            DocumentsResponse {
                entity_name: "Ada \"L\"",
                entity_type: Some("person"),
                results: vec![
                    result(0, None, None),
                    result(1, Some("https://example.org/a?b=\"c\""), Some("Bob")),
                    result(2, None, Some("C\"quoted\"\\")),
                ],
                related_entities: &names,
                total: 3,
            },
        ];
        for r in responses {
            assert_eq!(
                String::from_utf8(documents_body(&r)).unwrap(),
                serde_json::to_string(&r).unwrap()
            );
        }
    }
}
