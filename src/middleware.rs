//! Cross-cutting middleware: the request id with its tracing span, and the rewrite of any error
//! response that did not come from kbq's handlers into kbq's one error body.

use std::time::Instant;

use actix_web::body::{BoxBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use actix_web::middleware::Next;
use actix_web::{HttpMessage, ResponseError};
use tracing::Instrument;

use crate::error::{ApiError, ErrorCode};

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The request's id, in its extensions.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// A caller's id is kept when it is short printable ASCII; otherwise kbq makes a uuid.
fn accepted_id(v: &HeaderValue) -> Option<String> {
    let s = v.to_str().ok()?;
    let ok = !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_graphic());
    ok.then(|| s.to_string())
}

/// Middleware: gives each request an id, a span carrying it, a completion log line, and the
/// `X-Request-Id` response header.
pub async fn request_id(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let id = req
        .headers()
        .get(REQUEST_ID)
        .and_then(accepted_id)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    req.extensions_mut().insert(RequestId(id.clone()));
    // With traces exported, the span is named by its route (known before routing, from
    // the app's resource map); probes and metrics, which load balancers and scrapers call
    // all the time, are logged but not exported (their target is left out of traces).
    let route = crate::telemetry::enabled().then(|| {
        req.match_pattern()
            .unwrap_or_else(|| "unmatched".to_string())
    });
    // The trace fields are recorded only with export on: empty, a log line shows none of them.
    macro_rules! request_span {
        ($target:expr) => {
            tracing::info_span!(
                target: $target,
                "request",
                request_id = %id,
                method = %req.method(),
                path = %req.path(),
                key = tracing::field::Empty,
                workspace = tracing::field::Empty,
                trace_id = tracing::field::Empty,
                otel.name = tracing::field::Empty,
                otel.kind = tracing::field::Empty,
                http.route = tracing::field::Empty,
                http.response.status_code = tracing::field::Empty,
            )
        };
    }
    let span = if matches!(req.path(), "/livez" | "/readyz" | "/metrics") {
        request_span!("kbq::probe")
    } else {
        request_span!("kbq::middleware")
    };
    if let Some(route) = &route {
        span.record("otel.name", format!("{} {route}", req.method()).as_str());
        span.record("otel.kind", "server");
        span.record("http.route", route.as_str());
    }
    crate::telemetry::continue_trace(&span, req.headers());
    let started = Instant::now();
    let result = next.call(req).instrument(span.clone()).await;
    let mut res = match result {
        Ok(res) => res.map_into_boxed_body(),
        Err(e) => {
            // No request to build a response from: let the error carry the id instead.
            span.in_scope(|| {
                tracing::info!(
                    status = e.as_response_error().status_code().as_u16(),
                    "request failed"
                )
            });
            return Err(WithHeaders::error(e, move |headers| {
                if let Ok(v) = HeaderValue::from_str(&id) {
                    headers.insert(REQUEST_ID, v);
                }
            }));
        }
    };
    let status = res.status().as_u16();
    if route.is_some() {
        span.record("http.response.status_code", status);
    }
    span.in_scope(|| {
        tracing::info!(
            status,
            elapsed_us = started.elapsed().as_micros() as u64,
            "request done"
        );
    });
    if let Ok(v) = HeaderValue::from_str(&id) {
        res.headers_mut().insert(REQUEST_ID, v);
    }
    Ok(res)
}

/// An error on its way out, with headers that a layer adds to the response it becomes (the
/// request id here, CORS headers in `crate::cors`).
pub(crate) struct WithHeaders {
    inner: actix_web::Error,
    add: Box<dyn Fn(&mut HeaderMap)>,
}

impl WithHeaders {
    pub(crate) fn error(
        inner: actix_web::Error,
        add: impl Fn(&mut HeaderMap) + 'static,
    ) -> actix_web::Error {
        WithHeaders {
            inner,
            add: Box::new(add),
        }
        .into()
    }
}

impl std::fmt::Debug for WithHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl std::fmt::Display for WithHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl ResponseError for WithHeaders {
    fn status_code(&self) -> actix_web::http::StatusCode {
        self.inner.as_response_error().status_code()
    }
    fn error_response(&self) -> actix_web::HttpResponse {
        let mut res = self.inner.error_response();
        (self.add)(res.headers_mut());
        res
    }
}

/// Middleware: any error (a handler's, an extractor's, actix's 404/405/413) leaves as kbq's
/// error body with a code from the table.
pub async fn error_bodies(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    // kbq's own middleware answers errors as responses, and actix turns handler and extractor
    // errors into responses too; an `Err` here can only come from actix itself.
    let res = match next.call(req).await {
        Ok(res) => res,
        Err(e) if e.as_error::<ApiError>().is_some() => return Err(e),
        Err(e) => {
            return Err(from_status(e.as_response_error().status_code(), &e.to_string()).into());
        }
    };
    let status = res.status();
    let is_json = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if status.as_u16() < 400 || is_json {
        return Ok(res.map_into_boxed_body());
    }
    let (req, res) = res.into_parts();
    let message = match (status.as_u16(), res.error()) {
        (404, _) => format!("no route for {} {}", req.method(), req.path()),
        (405, _) => format!("{} is not allowed on {}", req.method(), req.path()),
        (_, Some(e)) => e.to_string(),
        _ => status.canonical_reason().unwrap_or("error").to_string(),
    };
    // Keep what inner layers said in headers (Allow, deprecation, Retry-After, ...).
    let mut replaced = from_status(status, &message).error_response();
    for (name, value) in res.headers() {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            replaced.headers_mut().insert(name.clone(), value.clone());
        }
    }
    Ok(ServiceResponse::new(req, replaced))
}

fn from_status(status: actix_web::http::StatusCode, message: &str) -> ApiError {
    match ErrorCode::for_status(status) {
        ErrorCode::PayloadTooLarge => ApiError::new(
            ErrorCode::PayloadTooLarge,
            "the request body is larger than the limit (server.max_body_bytes)",
        ),
        // Like every 503, with Retry-After.
        ErrorCode::ServiceUnavailable => ApiError::unavailable(message),
        code => ApiError::new(code, message),
    }
}

/// `server.body_timeout_ms`, for [`body_deadline`].
#[derive(Debug, Clone, Copy)]
pub struct BodyTimeout(pub std::time::Duration);

/// Middleware: a request's body must arrive within `server.body_timeout_ms` of its head. A
/// client that sends it byte by byte (slowloris) gets 408 `request_timeout`, and the
/// connection is closed, instead of holding the connection and the handler's buffer for as
/// long as it likes. A request whose handler reads no body is not held to it, and one
/// without a body is not wrapped at all.
pub async fn body_deadline(
    mut req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<BoxBody>, actix_web::Error> {
    // A request without a body (no length, or 0, and not chunked) has nothing to wait for.
    let headers = req.headers();
    let has_body = headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0");
    let timeout = req.app_data::<BodyTimeout>().map(|t| t.0);
    let Some(timeout) = timeout.filter(|_| has_body) else {
        return next
            .call(req)
            .await
            .map(ServiceResponse::map_into_boxed_body);
    };
    let expired = std::rc::Rc::new(std::cell::Cell::new(false));
    let payload = Deadline {
        inner: req.take_payload(),
        sleep: Box::pin(tokio::time::sleep(timeout)),
        expired: expired.clone(),
    };
    req.set_payload(actix_web::dev::Payload::Stream {
        payload: Box::pin(payload),
    });
    let res = next.call(req).await?;
    if !expired.get() {
        return Ok(res.map_into_boxed_body());
    }
    let (req, _) = res.into_parts();
    let mut res = ApiError::new(
        ErrorCode::RequestTimeout,
        format!(
            "the request body did not arrive within {} ms (server.body_timeout_ms)",
            timeout.as_millis()
        ),
    )
    .error_response();
    res.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    Ok(ServiceResponse::new(req, res))
}

/// A request body that ends with an error once its deadline passes.
struct Deadline {
    inner: actix_web::dev::Payload,
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
    expired: std::rc::Rc<std::cell::Cell<bool>>,
}

impl futures::Stream for Deadline {
    type Item = Result<actix_web::web::Bytes, actix_web::error::PayloadError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::future::Future;
        use std::task::Poll;
        if self.expired.get() {
            return Poll::Ready(None);
        }
        if let Poll::Ready(item) = std::pin::Pin::new(&mut self.inner).poll_next(cx) {
            return Poll::Ready(item);
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            self.expired.set(true);
            let late = std::io::Error::new(std::io::ErrorKind::TimedOut, "request body too slow");
            return Poll::Ready(Some(Err(late.into())));
        }
        Poll::Pending
    }
}
