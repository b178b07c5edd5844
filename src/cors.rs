//! Cross-origin requests from browsers (CORS), for the origins `server.cors_origins` lists
//! (none by default).
//!
//! A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) from a listed
//! origin is answered here, 204, before any key or budget is checked (browsers send no
//! credentials on a preflight): the methods kbq serves, the request headers a client sends
//! (`Authorization`, `X-API-Key`, `Content-Type`, `X-Request-Id`), and a max age. Every other
//! response to a listed origin, errors and streams included, carries
//! `Access-Control-Allow-Origin` with that origin and exposes the headers a client reads
//! (request id, retry and rate-limit headers, deprecation, the provider). A request from an
//! origin not listed is served as if it had none: no CORS header, so the browser keeps the
//! answer from the page; a preflight from one goes on to the routes like any `OPTIONS`.
//! Nothing is refused for its `Origin`: a same-origin page (the docs UI) sends one too.
//!
//! Hand-written rather than `actix-cors`, which answers a request from an origin it does not
//! list with a 400 of its own body, the docs UI's same-origin requests included.

use std::collections::HashSet;
use std::sync::Arc;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderMap, HeaderValue};
use actix_web::http::{Method, StatusCode};
use actix_web::middleware::Next;
use actix_web::{HttpResponse, web};

/// The origins allowed, as browsers send them.
#[derive(Debug, Clone, Default)]
pub struct CorsOrigins(Arc<HashSet<String>>);

impl CorsOrigins {
    pub fn new(origins: &[String]) -> Self {
        CorsOrigins(Arc::new(origins.iter().cloned().collect()))
    }

    fn allows(&self, origin: &HeaderValue) -> bool {
        origin.to_str().is_ok_and(|o| self.0.contains(o))
    }
}

/// Methods a preflight may ask for.
pub const METHODS: &str = "GET, POST, DELETE, OPTIONS";
/// Request headers a preflight may ask for.
pub const ALLOW_HEADERS: &str = "authorization, x-api-key, x-kbq-workspace, content-type, x-request-id, mcp-session-id, mcp-protocol-version, mcp-method, mcp-name, last-event-id";
/// Response headers a page may read.
pub const EXPOSE_HEADERS: &str = "x-request-id, retry-after, ratelimit-limit, ratelimit-remaining, ratelimit-reset, ratelimit-policy, x-api-deprecated, deprecation, sunset, link, x-kbq-provider, mcp-session-id";
/// How long a browser may keep a preflight's answer, in seconds.
pub const MAX_AGE: &str = "600";

/// Whether `s` is an origin as a browser serializes it: `http://` or `https://`, a
/// lower-case host (a name, an IPv4 address or a bracketed IPv6 one), an optional port other
/// than the scheme's default, and nothing after.
pub fn is_origin(s: &str) -> bool {
    let Some(rest) = s
        .strip_prefix("http://")
        .or_else(|| s.strip_prefix("https://"))
    else {
        return false;
    };
    let (host_ok, port) = if let Some(bracketed) = rest.strip_prefix('[') {
        let Some((inner, after)) = bracketed.split_once(']') else {
            return false;
        };
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(p) => Some(p),
                None => return false,
            },
        };
        (inner.parse::<std::net::Ipv6Addr>().is_ok(), port)
    } else {
        let (host, port) = match rest.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        };
        let ok = !host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        (ok, port)
    };
    // A browser leaves the scheme's default port out, so an origin that names it never matches.
    let default = if s.starts_with("https://") { 443 } else { 80 };
    host_ok && port.is_none_or(|p| p.parse::<u16>().is_ok_and(|n| n > 0 && n != default))
}

/// Middleware: answers listed origins' preflights and marks responses to them.
pub async fn cors(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    let origins = req.app_data::<web::Data<CorsOrigins>>();
    // With origins listed, every answer depends on `Origin`: a shared cache must not hand
    // one without CORS headers to a listed origin.
    let listing = origins.is_some_and(|o| !o.0.is_empty());
    let origin = origins
        .zip(req.headers().get(header::ORIGIN))
        .filter(|(origins, origin)| origins.allows(origin))
        .map(|(_, origin)| origin.clone());
    let Some(origin) = origin else {
        let mut res = next.call(req).await?.map_into_boxed_body();
        if listing {
            res.headers_mut()
                .append(header::VARY, HeaderValue::from_static("Origin"));
        }
        return Ok(res);
    };
    let preflight = req.method() == Method::OPTIONS
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
    if preflight {
        let res = HttpResponse::build(StatusCode::NO_CONTENT)
            .insert_header((header::ACCESS_CONTROL_ALLOW_ORIGIN, origin))
            .insert_header((header::ACCESS_CONTROL_ALLOW_METHODS, METHODS))
            .insert_header((header::ACCESS_CONTROL_ALLOW_HEADERS, ALLOW_HEADERS))
            .insert_header((header::ACCESS_CONTROL_MAX_AGE, MAX_AGE))
            .insert_header((header::VARY, "Origin"))
            .finish();
        return Ok(req.into_response(res));
    }
    match next.call(req).await {
        Ok(res) => {
            let mut res = res.map_into_boxed_body();
            mark(res.headers_mut(), origin);
            Ok(res)
        }
        // An error that got this far is answered above; it carries the headers too.
        Err(inner) => Err(crate::middleware::WithHeaders::error(
            inner,
            move |headers| mark(headers, origin.clone()),
        )),
    }
}

/// Marks a response to the allowed `origin`.
fn mark(headers: &mut HeaderMap, origin: HeaderValue) {
    headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(EXPOSE_HEADERS),
    );
    headers.append(header::VARY, HeaderValue::from_static("Origin"));
}

#[cfg(test)]
mod tests {
    use super::is_origin;

    #[test]
    fn origins_are_what_browsers_send() {
        for ok in [
            "http://localhost:5173",
            "https://app.example.com",
            "http://127.0.0.1:8080",
            "http://[::1]:3000",
            "https://a-b.example",
        ] {
            assert!(is_origin(ok), "{ok}");
        }
        for bad in [
            "",
            "*",
            "localhost:5173",
            "ftp://example.com",
            "https://example.com/",
            "https://example.com/app",
            "https://Example.com",
            "http://localhost:0",
            "http://localhost:99999",
            "http://",
            "http://[::1",
            "http://exa mple.com",
            "http://localhost:80",
            "https://example.com:443",
        ] {
            assert!(!is_origin(bad), "{bad}");
        }
    }
}
