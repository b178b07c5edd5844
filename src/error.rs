//! The public error codes and the one error body every failure uses:
//! `{"error": {"code": "...", "message": "...", "field": "..."}}` (`field` only when one field
//! is at fault). Every error response, including actix's own, is built from [`ErrorCode`].

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use kbq_actors::{AgentError, GraphError};
use kbq_store::StoreError;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};

/// Every public error code, with its HTTP status and meaning ([`ErrorCode::status`],
/// [`ErrorCode::meaning`]) and its text ([`ErrorCode::as_str`], the one place each code is
/// written). docs/errors.md lists the same table, and so does the OpenAPI document (the
/// schema below, and `crate::openapi`), from these functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidRequest,
    InvalidApiKey,
    NotFound,
    MethodNotAllowed,
    VersionSunset,
    InsufficientScope,
    PayloadTooLarge,
    /// 415: a source of a type ingestion does not read.
    UnsupportedMediaType,
    RateLimitExceeded,
    Internal,
    ServiceUnavailable,
    /// 502: every language-model provider tried for the request failed.
    Upstream,
    /// 408: the request's body did not arrive within `server.body_timeout_ms`.
    RequestTimeout,
    /// 404: the workspace named (by `X-KBQ-Workspace` or in an admin path) does not exist.
    WorkspaceNotFound,
    /// 403: a key named a workspace other than its own.
    WorkspaceForbidden,
    /// 409: what the request would create exists already.
    Conflict,
    /// 403: the write would take the workspace past its quota.
    QuotaExceeded,
}

impl ErrorCode {
    /// All codes, for docs and tests.
    pub const ALL: [ErrorCode; 17] = [
        ErrorCode::InvalidRequest,
        ErrorCode::InvalidApiKey,
        ErrorCode::InsufficientScope,
        ErrorCode::WorkspaceForbidden,
        ErrorCode::QuotaExceeded,
        ErrorCode::NotFound,
        ErrorCode::WorkspaceNotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::RequestTimeout,
        ErrorCode::Conflict,
        ErrorCode::VersionSunset,
        ErrorCode::PayloadTooLarge,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::RateLimitExceeded,
        ErrorCode::Internal,
        ErrorCode::ServiceUnavailable,
        ErrorCode::Upstream,
    ];

    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::InvalidRequest => StatusCode::BAD_REQUEST,
            ErrorCode::InvalidApiKey => StatusCode::UNAUTHORIZED,
            ErrorCode::InsufficientScope => StatusCode::FORBIDDEN,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::VersionSunset => StatusCode::GONE,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::RateLimitExceeded => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::ServiceUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Upstream => StatusCode::BAD_GATEWAY,
            ErrorCode::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorCode::WorkspaceNotFound => StatusCode::NOT_FOUND,
            ErrorCode::WorkspaceForbidden => StatusCode::FORBIDDEN,
            ErrorCode::Conflict => StatusCode::CONFLICT,
            ErrorCode::QuotaExceeded => StatusCode::FORBIDDEN,
        }
    }

    /// What the code tells a client.
    pub fn meaning(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => {
                "a missing, mistyped, unknown or out-of-range field, or a body that is not a JSON object"
            }
            ErrorCode::InvalidApiKey => "no API key, or one that kbq does not know",
            ErrorCode::InsufficientScope => {
                "the key is valid but lacks the scope the route needs (`admin` holds all)"
            }
            ErrorCode::NotFound => "no such path, or an API version that kbq does not serve",
            ErrorCode::MethodNotAllowed => "the path exists but not with this method",
            ErrorCode::VersionSunset => "the API version has passed its sunset date",
            ErrorCode::PayloadTooLarge => {
                "the body is larger than `server.max_body_bytes`, or a source larger than `ingest.max_source_bytes`"
            }
            ErrorCode::UnsupportedMediaType => {
                "a source whose content type or file extension ingestion does not read; the message lists those it does"
            }
            ErrorCode::RateLimitExceeded => "the key has used up its request budget",
            ErrorCode::Internal => "a fault inside kbq; the request id in the logs tells which",
            ErrorCode::ServiceUnavailable => {
                "the knowledge base (or another dependency) cannot answer now; retry later"
            }
            ErrorCode::Upstream => "every language-model provider tried for the request failed",
            ErrorCode::RequestTimeout => {
                "the request's body did not arrive within `server.body_timeout_ms`; the connection is closed"
            }
            ErrorCode::WorkspaceNotFound => {
                "the workspace named in `X-KBQ-Workspace` or in the path does not exist, or the request's workspace was deleted while it ran"
            }
            ErrorCode::WorkspaceForbidden => {
                "the key named a workspace other than its own; only an admin key of `default` may"
            }
            ErrorCode::Conflict => "what the request would create exists already",
            ErrorCode::QuotaExceeded => {
                "the write would take the workspace past its quota (`workspaces.max_entities`, `max_documents`, `max_document_bytes`); nothing was written"
            }
        }
    }

    /// The code as clients see it in bodies: the table's one spelling of each code.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidApiKey => "INVALID_API_KEY",
            ErrorCode::InsufficientScope => "insufficient_scope",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::VersionSunset => "version_sunset",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::RateLimitExceeded => "RATE_LIMIT_EXCEEDED",
            ErrorCode::Internal => "internal_error",
            ErrorCode::ServiceUnavailable => "service_unavailable",
            ErrorCode::Upstream => "upstream_error",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::WorkspaceNotFound => "workspace_not_found",
            ErrorCode::WorkspaceForbidden => "workspace_forbidden",
            ErrorCode::Conflict => "conflict",
            ErrorCode::QuotaExceeded => "quota_exceeded",
        }
    }

    /// A response's description in the OpenAPI document: the code, then when the route
    /// answers with it.
    pub fn answers(self, when: &str) -> String {
        format!("`{}`: {when}", self.as_str())
    }

    /// The code for a status that some layer other than kbq's handlers produced.
    pub fn for_status(status: StatusCode) -> ErrorCode {
        match status.as_u16() {
            401 => ErrorCode::InvalidApiKey,
            403 => ErrorCode::InsufficientScope,
            404 => ErrorCode::NotFound,
            405 => ErrorCode::MethodNotAllowed,
            408 => ErrorCode::RequestTimeout,
            410 => ErrorCode::VersionSunset,
            409 => ErrorCode::Conflict,
            413 => ErrorCode::PayloadTooLarge,
            415 => ErrorCode::UnsupportedMediaType,
            429 => ErrorCode::RateLimitExceeded,
            502 => ErrorCode::Upstream,
            503 => ErrorCode::ServiceUnavailable,
            400..=499 => ErrorCode::InvalidRequest,
            _ => ErrorCode::Internal,
        }
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl utoipa::PartialSchema for ErrorCode {
    /// A string enum of every code, described by the table: one line per code with its
    /// status and meaning.
    fn schema() -> RefOr<Schema> {
        // Listed in declaration order, as the schema always has; the description follows
        // the table's order (by status), as docs/errors.md does.
        let mut declared = ErrorCode::ALL;
        declared.sort_by_key(|c| *c as u8);
        let lines: Vec<String> = ErrorCode::ALL
            .iter()
            .map(|c| {
                format!(
                    "- `{}` ({}): {}",
                    c.as_str(),
                    c.status().as_u16(),
                    c.meaning()
                )
            })
            .collect();
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(format!(
                "Stable: clients may branch on it.\n\n{}",
                lines.join("\n")
            )))
            .enum_values(Some(declared.map(ErrorCode::as_str)))
            .into()
    }
}

impl ToSchema for ErrorCode {}

/// An error on its way to becoming a response.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub field: Option<String>,
    /// Seconds, for 429 and 503.
    pub retry_after: Option<u64>,
}

/// The one error body: every failure, whichever layer answers, has this shape.
#[derive(Serialize, ToSchema)]
pub struct ErrorBody<'a> {
    pub error: ErrorDetail<'a>,
}

#[derive(Serialize, ToSchema)]
pub struct ErrorDetail<'a> {
    pub code: ErrorCode,
    /// For people; its wording may change.
    pub message: &'a str,
    /// The request field at fault (a JSON path such as `history[2].role`), only when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub field: Option<&'a str>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    /// A 400 naming the field at fault.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            field: Some(field.into()),
            ..ApiError::new(ErrorCode::InvalidRequest, message)
        }
    }

    /// The error body of this error.
    pub fn body(&self) -> ErrorBody<'_> {
        ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: &self.message,
                field: self.field.as_deref(),
            },
        }
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(ErrorCode::ServiceUnavailable, message)
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code.as_str(), self.message)
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        self.code.status()
    }

    fn error_response(&self) -> HttpResponse {
        let mut res = HttpResponse::build(self.code.status());
        if let Some(secs) = self.retry_after {
            res.insert_header((header::RETRY_AFTER, secs.to_string()));
        }
        if self.code == ErrorCode::InvalidApiKey {
            res.insert_header((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")));
        }
        res.json(self.body())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Unavailable(m) => {
                ApiError::unavailable(format!("knowledge base unavailable: {m}"))
            }
            StoreError::Query(m) => {
                tracing::error!(error = %m, "store query failed");
                ApiError::new(
                    ErrorCode::Internal,
                    "the knowledge base failed to answer the query",
                )
            }
            StoreError::Invalid { field, reason } => {
                ApiError::invalid(field.clone(), format!("{field} {reason}"))
            }
            StoreError::Removed(_) => ApiError::new(
                ErrorCode::WorkspaceNotFound,
                "the request's workspace was deleted while the request ran",
            ),
        }
    }
}

impl From<GraphError> for ApiError {
    fn from(e: GraphError) -> Self {
        match e {
            GraphError::Store(e) => e.into(),
            GraphError::Timeout(_) | GraphError::NotRunning(_) | GraphError::Overloaded(_) => {
                ApiError::unavailable(e.to_string())
            }
            GraphError::WorkerLost => {
                tracing::error!("graph worker stopped while answering");
                ApiError::new(ErrorCode::Internal, e.to_string())
            }
        }
    }
}

impl From<AgentError> for ApiError {
    fn from(e: AgentError) -> Self {
        ApiError::agent(e, None)
    }
}

impl ApiError {
    /// An agent failure, for both agent routes (`POST /v1/agent/chat`, which answers a 502 of
    /// a run that started as a 200 with `success: false`, and `POST /v1/chat/completions`).
    /// `model` is the model a chat completion asked for, so that "no provider" names it.
    pub fn agent(e: AgentError, model: Option<&str>) -> Self {
        match e {
            // Nothing was asked: the client may retry.
            AgentError::NoProvider => ApiError::unavailable(match model {
                Some(model) => format!("no provider behind model `{model}` is available"),
                None => e.to_string(),
            }),
            AgentError::Overloaded(_) | AgentError::ProvidersBusy(_) => {
                ApiError::unavailable(e.to_string())
            }
            // Providers were asked and failed, or the session stopped before answering.
            AgentError::ProvidersFailed(_) | AgentError::SessionLost(_) => {
                ApiError::new(ErrorCode::Upstream, e.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorCode::{self, *};

    /// The variant declared after `code`. The match has no `_` arm, so a new variant cannot
    /// compile until it is named here, and the walk below then holds it to `ALL`.
    fn declared_after(code: ErrorCode) -> Option<ErrorCode> {
        match code {
            InvalidRequest => Some(InvalidApiKey),
            InvalidApiKey => Some(NotFound),
            NotFound => Some(MethodNotAllowed),
            MethodNotAllowed => Some(VersionSunset),
            VersionSunset => Some(InsufficientScope),
            InsufficientScope => Some(PayloadTooLarge),
            PayloadTooLarge => Some(UnsupportedMediaType),
            UnsupportedMediaType => Some(RateLimitExceeded),
            RateLimitExceeded => Some(Internal),
            Internal => Some(ServiceUnavailable),
            ServiceUnavailable => Some(Upstream),
            Upstream => Some(RequestTimeout),
            RequestTimeout => Some(WorkspaceNotFound),
            WorkspaceNotFound => Some(WorkspaceForbidden),
            WorkspaceForbidden => Some(Conflict),
            Conflict => Some(QuotaExceeded),
            QuotaExceeded => None,
        }
    }

    #[test]
    fn all_holds_every_variant_once() {
        let mut walked = vec![InvalidRequest];
        while let Some(next) = declared_after(*walked.last().unwrap()) {
            walked.push(next);
        }
        // The walk follows declaration order, so it meets every variant.
        for (i, code) in walked.iter().enumerate() {
            assert_eq!(
                *code as usize, i,
                "{code:?} is not declared where the walk says"
            );
            assert!(
                ErrorCode::ALL.contains(code),
                "{code:?} is missing from ALL"
            );
        }
        assert_eq!(walked.len(), ErrorCode::ALL.len(), "ALL lists a code twice");
    }
}
