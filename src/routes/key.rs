//! `GET /v1/key`: the key that calls, as kbq knows it. A client (the page at `/ui/` among
//! them) learns from it what the key may do and in which workspace.

use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::{KeyIdentity, Scope};
use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::workspaces::Workspace;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(web::resource("/key").route(web::get().to(show)));
}

/// The calling key: never its secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct CallingKey {
    /// The key's name, as logs show it.
    pub name: String,
    /// The key's id: the first half of its SHA-256, 32 hex digits.
    pub id: String,
    /// Its scopes, each once, in the order read, write, agent, admin. `admin` holds the
    /// others.
    #[schema(value_type = Vec<String>)]
    pub scopes: Vec<&'static str>,
    /// Whether it may do what each scope allows (`admin` included).
    pub can: KeyAllows,
    /// The workspace the request works in: the key's, or the one an operator's key names
    /// in `X-KBQ-Workspace`.
    pub workspace: String,
    /// An `admin` key of `default`: it may act in any workspace and use the admin API.
    pub operator: bool,
}

/// What a key may do, scope by scope.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyAllows {
    pub read: bool,
    pub write: bool,
    pub agent: bool,
    pub admin: bool,
}

/// The calling key: its name, id, scopes and workspace. Any key may ask.
#[utoipa::path(
    get,
    path = "/v1/key",
    tag = "key",
    responses(
        (status = 200, description = "The calling key", body = CallingKey),
        (status = 401, description = ErrorCode::InvalidApiKey.answers("no key, or one kbq does not know"), body = ErrorBody),
    ),
    security(("bearer" = []), ("api_key" = [])),
)]
async fn show(req: HttpRequest, ws: web::ReqData<Workspace>) -> Result<HttpResponse, ApiError> {
    let identity = req
        .extensions()
        .get::<KeyIdentity>()
        .cloned()
        .ok_or_else(|| ApiError::new(ErrorCode::InvalidApiKey, "an API key is required"))?;
    let scopes = identity.scopes;
    Ok(HttpResponse::Ok().json(CallingKey {
        name: identity.name.to_string(),
        id: identity.id.to_string(),
        scopes: scopes.names(),
        can: KeyAllows {
            read: scopes.allows(Scope::Read),
            write: scopes.allows(Scope::Write),
            agent: scopes.allows(Scope::Agent),
            admin: scopes.allows(Scope::Admin),
        },
        workspace: ws.name.to_string(),
        operator: identity.is_operator(),
    }))
}
