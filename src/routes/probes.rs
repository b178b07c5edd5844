//! Unauthenticated probes for load balancers. They reveal nothing but up or ready.

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header;
use actix_web::middleware::Next;
use actix_web::{HttpResponse, web};
use kbq_store::KnowledgeBase;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::startup::Readiness;

/// The paths the probes' own listener answers (`server.probe_listen`).
pub const PROBE_PATHS: [&str; 3] = ["/livez", "/readyz", "/v1/agent/health"];

/// Middleware of the probes' own listener: the probes pass, as on the API's listener; any
/// other path gets 404 `not_found`, naming the paths it answers.
pub async fn only_probes(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    if PROBE_PATHS.contains(&req.path()) {
        return Ok(next.call(req).await?.map_into_boxed_body());
    }
    Err(ApiError::new(
        ErrorCode::NotFound,
        format!(
            "no route for {} {} on the probes' listener (server.probe_listen), which answers {} only",
            req.method(),
            req.path(),
            PROBE_PATHS.join(", ")
        ),
    )
    .into())
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/livez")
            .route(web::get().to(livez))
            .route(web::head().to(livez)),
    )
    .service(
        web::resource("/readyz")
            .route(web::get().to(readyz))
            .route(web::head().to(readyz)),
    );
}

/// A probe's answer.
#[derive(Serialize, ToSchema)]
pub struct ProbeStatus {
    /// `ok` from `/livez`, `ready` from `/readyz`.
    pub status: &'static str,
    /// `/readyz` only: whether the knowledge base's store answers now (`up`) or not
    /// (`down`). A node whose store is down stays ready: it answers what its in-memory
    /// indexes hold, and requests that need the store get 503 with `Retry-After`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, value_type = Option<String>, pattern = "^(up|down)$")]
    pub store: Option<&'static str>,
    /// `/readyz` only: the workspaces other than `default` this node has open (their
    /// indexes built), as of its last sweep (docs/workspaces.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub workspaces_open: Option<usize>,
}

/// The process is up and serving HTTP.
#[utoipa::path(
    method(get, head),
    path = "/livez",
    tag = "probes",
    responses((status = 200, description = "Up", body = ProbeStatus)),
)]
async fn livez() -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(ProbeStatus {
            status: "ok",
            store: None,
            workspaces_open: None,
        })
}

/// This node can serve: start-up is done and it is not stopping; 503 with the reason when not.
///
/// The store's state is reported beside it (`store`), not folded in: when a shared SurrealDB
/// server is down every node would otherwise fail at once, and a load balancer would take the
/// whole fleet out while the in-memory indexes can still answer reads (docs/operations.md).
#[utoipa::path(
    method(get, head),
    path = "/readyz",
    tag = "probes",
    responses(
        (status = 200, description = "Ready; `store` says whether the store answers", body = ProbeStatus),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("still starting (the message says what it is doing: `not ready: store connecting`, `not ready: building indexes: 40%`), or stopping (`not ready: stopping`)"), body = ErrorBody),
    ),
)]
async fn readyz(
    kb: web::Data<KnowledgeBase>,
    readiness: web::Data<Readiness>,
    workspaces: Option<web::Data<crate::workspaces::Workspaces>>,
) -> Result<HttpResponse, ApiError> {
    if let Some(reason) = readiness.stage().reason() {
        return Err(ApiError::unavailable(format!("not ready: {reason}")));
    }
    let store = store_state(&kb).await;
    Ok(HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(ProbeStatus {
            status: "ready",
            store: Some(store),
            workspaces_open: workspaces.map(|w| w.last_sweep().open),
        }))
}

/// Whether the store answers a ping within a second: `up` or `down`.
pub async fn store_state(kb: &KnowledgeBase) -> &'static str {
    match tokio::time::timeout(std::time::Duration::from_secs(1), kb.ping()).await {
        Ok(Ok(())) => "up",
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "the store does not answer");
            "down"
        }
        Err(_) => {
            tracing::warn!("the store did not answer a ping within 1 s");
            "down"
        }
    }
}
