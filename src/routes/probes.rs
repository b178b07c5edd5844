//! Unauthenticated probes for load balancers. They reveal nothing but up or ready.

use actix_web::http::header;
use actix_web::{HttpResponse, web};
use kbq_store::KnowledgeBase;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::startup::Readiness;

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
        .json(ProbeStatus { status: "ok" })
}

/// Start-up is done and the knowledge base answers; 503 with the reason when not.
#[utoipa::path(
    method(get, head),
    path = "/readyz",
    tag = "probes",
    responses(
        (status = 200, description = "Ready", body = ProbeStatus),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("still starting (the message says what it is doing: `not ready: store connecting`, `not ready: building indexes: 40%`), or the knowledge base does not answer (`not ready: the knowledge base does not answer`)"), body = ErrorBody),
    ),
)]
async fn readyz(
    kb: web::Data<KnowledgeBase>,
    readiness: web::Data<Readiness>,
) -> Result<HttpResponse, ApiError> {
    if let Some(reason) = readiness.stage().reason() {
        return Err(ApiError::unavailable(format!("not ready: {reason}")));
    }
    match kb.ping().await {
        Ok(()) => Ok(HttpResponse::Ok()
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .json(ProbeStatus { status: "ready" })),
        Err(e) => {
            tracing::warn!(error = %e, "not ready");
            Err(ApiError::unavailable(
                "not ready: the knowledge base does not answer",
            ))
        }
    }
}
