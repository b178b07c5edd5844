//! Mounts every route. One file per resource group, each with its own `configure`.

pub mod admin;
pub mod agent;
pub mod completions;
pub mod docs;
pub mod graph;
pub mod ingest;
pub mod key;
pub mod openai;
pub mod probes;
pub mod rag;
pub mod sources;
pub mod ui;

use actix_web::middleware::from_fn;
use actix_web::web;

use crate::auth::{Scope, require_key, require_scope};
use crate::error::{ApiError, ErrorCode};
use crate::limits::{self, Route};

/// All routes, in the order they are tried: the probes and the providers' health, the graph
/// API under `/data/v1`, RAG search under `/v1/rag`, the agent API under `/v1`, the admin API
/// under `/admin/v1`, then metrics and the API's description at the root. The OpenAPI document (`crate::openapi`) describes
/// each one; tests/it/openapi.rs checks that against this.
pub fn configure(cfg: &mut web::ServiceConfig) {
    // The last `wrap` runs first: the key is checked, then the key's budget is spent.
    cfg.configure(probes::configure)
        // The providers' health, which load balancers ask for often: matched here, before
        // the scopes are tried, with the key and the agent budget of the rest of `/v1`.
        .service(
            web::resource("/v1/agent/health")
                .wrap(from_fn(|req, next| limits::limit(Route::Agent, req, next)))
                .wrap(from_fn(require_key))
                .route(web::get().to(agent::health)),
        )
        // Registered before `/data/v1`, which would otherwise match first.
        .service(
            web::scope("/data/v1/ingest")
                .wrap(from_fn(|req, next| require_scope(Scope::Write, req, next)))
                .wrap(from_fn(|req, next| limits::limit(Route::Graph, req, next)))
                .wrap(from_fn(require_key))
                .configure(ingest::configure)
                .configure(sources::configure),
        )
        .service(
            web::scope("/data/v1")
                .wrap(from_fn(|req, next| require_scope(Scope::Read, req, next)))
                .wrap(from_fn(|req, next| limits::limit(Route::Graph, req, next)))
                .wrap(from_fn(require_key))
                .configure(graph::configure),
        )
        // Registered before `/v1`, which would otherwise match first. Retrieval spends the
        // graph budget, not the agent's.
        .service(
            web::scope("/v1/rag")
                .wrap(from_fn(|req, next| require_scope(Scope::Read, req, next)))
                .wrap(from_fn(|req, next| limits::limit(Route::Graph, req, next)))
                .wrap(from_fn(require_key))
                .configure(rag::configure),
        )
        .service(
            web::scope("/v1")
                .wrap(from_fn(|req, next| limits::limit(Route::Agent, req, next)))
                .wrap(from_fn(require_key))
                .configure(agent::configure)
                .configure(key::configure)
                .configure(completions::configure)
                .configure(openai::configure),
        )
        // The admin API: an operator's key (an `admin` key of `default`), with the graph
        // budget. It names the workspace it manages in its paths: the key's is not resolved.
        .service(
            web::scope("/admin/v1")
                .wrap(from_fn(admin::require_operator))
                .wrap(from_fn(|req, next| require_scope(Scope::Admin, req, next)))
                .wrap(from_fn(|req, next| limits::limit(Route::Graph, req, next)))
                .wrap(from_fn(crate::auth::require_key_alone))
                .configure(admin::configure),
        )
        // Metrics for Prometheus: no key, like the probes; not versioned. After the API's
        // scopes, with the API's description, so that API requests are not first tried
        // against their patterns (Swagger UI's is a regular expression).
        .service(web::resource("/metrics").route(web::get().to(crate::metrics::metrics)))
        .configure(docs::configure)
        .configure(ui::configure);
}

/// MCP at `/mcp` (crate::mcp): a key with the `read` scope, and the key's graph budget per
/// HTTP request, as for the graph queries the tools make.
pub fn mcp_scope() -> actix_web::Scope<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    web::scope("/mcp")
        .wrap(from_fn(|req, next| require_scope(Scope::Read, req, next)))
        .wrap(from_fn(|req, next| limits::limit(Route::Graph, req, next)))
        .wrap(from_fn(require_key))
        .route("", web::route().to(crate::mcp::http::handle))
        .route("/", web::route().to(crate::mcp::http::handle))
}

/// A 200 of server-sent events: their content type, and not to be cached.
pub fn event_stream() -> actix_web::HttpResponseBuilder {
    let mut res = actix_web::HttpResponse::Ok();
    res.insert_header((actix_web::http::header::CONTENT_TYPE, "text/event-stream"))
        .insert_header((actix_web::http::header::CACHE_CONTROL, "no-cache"));
    res
}

/// Anything no route matched.
pub async fn not_found(req: actix_web::HttpRequest) -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::new(
        ErrorCode::NotFound,
        format!("no route for {} {}", req.method(), req.path()),
    ))
}
