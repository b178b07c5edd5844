//! The API's description, served without a key like the probes: the OpenAPI document at
//! `/openapi.json` and the Swagger UI at `/docs/`. The UI's files are compiled into kbq
//! (`utoipa-swagger-ui`, feature `vendored`), so neither building kbq nor opening the page
//! fetches anything from elsewhere.

use actix_web::http::header;
use actix_web::{HttpResponse, web};
use utoipa_swagger_ui::{Config, SwaggerUi};

/// Where the UI lives. Its pages link their files relatively, so it needs the trailing slash.
pub const UI_PATH: &str = "/docs/";

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/openapi.json").route(web::get().to(openapi_json)))
        .service(web::resource("/docs").route(web::get().to(to_ui)))
        .service(
            SwaggerUi::new(format!("{UI_PATH}{{_:.*}}")).config(
                Config::new(["/openapi.json"])
                    // Swagger UI would otherwise ask an outside validator about the document.
                    .validator_url("none")
                    .persist_authorization(false),
            ),
        );
}

/// The OpenAPI document as served, built once by the server from `crate::openapi` and handed
/// to this route as app data: `openapi` assembles its document from the routes, so the routes
/// take it from the server rather than import it back.
pub struct ApiDocument(String);

impl ApiDocument {
    pub fn new(json: String) -> Self {
        ApiDocument(json)
    }

    /// The document as served.
    pub fn json(&self) -> &str {
        &self.0
    }
}

/// The OpenAPI 3.1 document of this API.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "docs",
    responses((status = 200, description = "This document", body = Object)),
)]
async fn openapi_json(document: web::Data<ApiDocument>) -> HttpResponse {
    HttpResponse::Ok()
        .content_type(header::ContentType::json())
        .body(document.0.clone())
}

/// `/docs` without the slash would break the page's relative links.
async fn to_ui() -> HttpResponse {
    HttpResponse::PermanentRedirect()
        .insert_header((header::LOCATION, UI_PATH))
        .finish()
}
