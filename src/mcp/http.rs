//! MCP's Streamable HTTP at `/mcp`: actix-web requests handed to rmcp's own Streamable HTTP
//! service (sessions kept in this process) and its answers streamed back.
//!
//! rmcp-actix-web does this too, but it turns on serde_json's `preserve_order`, which would
//! change the key order of every JSON object kbq writes from a `serde_json::Value` (tool
//! results, chat completions): answers clients have read byte for byte. This bridge is its
//! few steps: the request's head and body (at most `server.max_body_bytes`, as everywhere)
//! into an `http` request carrying the caller, rmcp's response out as a stream.

use std::collections::HashMap;
use std::sync::Arc;

use actix_web::{HttpMessage, HttpRequest, HttpResponse, web};
use futures::StreamExt;
use http_body_util::{BodyDataStream, BodyExt, Full};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::{Caller, KbqMcp};
use crate::auth::KeyIdentity;
use crate::error::{ApiError, ErrorCode};

/// The service behind `/mcp`, and which key opened each of its sessions: a request naming a
/// session another key opened is answered as if there were no such session (404), so a
/// session id that leaks does not let another key read or end the session.
pub struct McpService {
    rmcp: StreamableHttpService<KbqMcp, LocalSessionManager>,
    owners: parking_lot::Mutex<HashMap<String, String>>,
}

pub fn service(server: KbqMcp) -> Arc<McpService> {
    // kbq checks keys, not `Host`: a node behind a load balancer is reached by any name.
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    Arc::new(McpService {
        rmcp: StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        ),
        owners: parking_lot::Mutex::default(),
    })
}

const SESSION: &str = "mcp-session-id";

/// One request to `/mcp` (POST a message, GET the session's stream, DELETE the session).
pub async fn handle(
    req: HttpRequest,
    body: web::Bytes,
    service: web::Data<McpService>,
) -> Result<HttpResponse, ApiError> {
    let invalid = |what: &str| ApiError::invalid("request", format!("{what} is not one MCP takes"));
    let mut builder = http::Request::builder()
        .method(
            http::Method::from_bytes(req.method().as_str().as_bytes())
                .map_err(|_| invalid("the method"))?,
        )
        .uri(http::Uri::try_from(req.uri().to_string()).map_err(|_| invalid("the URI"))?);
    for (name, value) in req.headers() {
        builder = builder.header(name.as_str(), value.as_bytes());
    }
    let mut request = builder
        .body(Full::new(body))
        .map_err(|_| invalid("a header"))?;
    // The key `require_key` found: the caller of every tool call in this request.
    let caller = {
        let extensions = req.extensions();
        match (
            extensions.get::<KeyIdentity>(),
            extensions.get::<crate::workspaces::Workspace>(),
        ) {
            (Some(key), Some(workspace)) => Some(Caller::new(key, workspace.clone())),
            _ => None,
        }
    };
    let owner = caller.as_ref().map(|c| c.owner.clone()).unwrap_or_default();
    let session = req
        .headers()
        .get(SESSION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session
        && service.owners.lock().get(id).is_some_and(|o| *o != owner)
    {
        return Err(no_session());
    }
    if let Some(caller) = caller {
        request.extensions_mut().insert(caller);
    }
    let response = service.rmcp.handle(request).await;
    let (parts, body) = response.into_parts();
    match (&session, parts.headers.get(SESSION)) {
        // A session begins: it is this key's.
        (None, Some(id)) => {
            if let Ok(id) = id.to_str() {
                service.owners.lock().insert(id.to_owned(), owner);
            }
        }
        // It ends, or rmcp no longer knows it.
        (Some(id), _)
            if parts.status == http::StatusCode::NOT_FOUND
                || (req.method() == actix_web::http::Method::DELETE
                    && parts.status.is_success()) =>
        {
            service.owners.lock().remove(id);
        }
        _ => {}
    }
    let status = actix_web::http::StatusCode::from_u16(parts.status.as_u16())
        .unwrap_or(actix_web::http::StatusCode::INTERNAL_SERVER_ERROR);
    // rmcp's refusals are plain text: they leave as kbq's error body, with rmcp's words. An
    // unknown session reads as one another key opened (above), so that neither tells.
    let is_json = parts
        .headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if status.as_u16() >= 400 && !is_json {
        if status == actix_web::http::StatusCode::NOT_FOUND && session.is_some() {
            return Err(no_session());
        }
        let text = body
            .collect()
            .await
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).trim().to_string())
            .unwrap_or_default();
        // rmcp's status stands (406 for a client that does not accept event streams, ...).
        let mut out = HttpResponse::build(status);
        for (name, value) in &parts.headers {
            if name != http::header::CONTENT_TYPE && name != http::header::CONTENT_LENGTH {
                out.append_header((name.as_str(), value.as_bytes()));
            }
        }
        let error = ApiError::new(ErrorCode::for_status(status), format!("MCP: {text}"));
        return Ok(out.json(error.body()));
    }
    let mut out = HttpResponse::build(status);
    for (name, value) in &parts.headers {
        out.append_header((name.as_str(), value.as_bytes()));
    }
    Ok(out.streaming(BodyDataStream::new(body).map(|chunk| chunk.map_err(|never| match never {}))))
}

fn no_session() -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        "no such MCP session: it ended, or another key or node opened it",
    )
}
