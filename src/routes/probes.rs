//! Unauthenticated probes for load balancers. They reveal nothing but up or ready.

use actix_web::http::header;
use actix_web::{HttpResponse, web};
use kbq_store::KnowledgeBase;
use serde_json::json;

use crate::error::ApiError;

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

/// The process is up and serving HTTP.
async fn livez() -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .json(json!({"status": "ok"}))
}

/// The knowledge base answers; 503 when it does not.
async fn readyz(kb: web::Data<KnowledgeBase>) -> Result<HttpResponse, ApiError> {
    match kb.ping().await {
        Ok(()) => Ok(HttpResponse::Ok()
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .json(json!({"status": "ready"}))),
        Err(e) => {
            tracing::warn!(error = %e, "not ready");
            Err(ApiError::unavailable("not ready"))
        }
    }
}
