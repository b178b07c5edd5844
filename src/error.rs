//! The public error codes and the one error body every failure uses:
//! `{"error": {"code": "...", "message": "...", "field": "..."}}` (`field` only when one field
//! is at fault). Every error response, including actix's own, is built from [`ErrorCode`].

use actix_web::http::StatusCode;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};
use kbq_actors::GraphError;
use kbq_store::StoreError;
use serde::Serialize;
use utoipa::ToSchema;

/// Every public error code, with its HTTP status and meaning ([`ErrorCode::status`],
/// [`ErrorCode::meaning`]). docs/errors.md lists the same table, and so does the OpenAPI
/// document (`crate::openapi`), from these functions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub enum ErrorCode {
    #[serde(rename = "invalid_request")]
    InvalidRequest,
    #[serde(rename = "INVALID_API_KEY")]
    InvalidApiKey,
    #[serde(rename = "not_found")]
    NotFound,
    #[serde(rename = "method_not_allowed")]
    MethodNotAllowed,
    #[serde(rename = "version_sunset")]
    VersionSunset,
    #[serde(rename = "insufficient_scope")]
    InsufficientScope,
    #[serde(rename = "payload_too_large")]
    PayloadTooLarge,
    #[serde(rename = "RATE_LIMIT_EXCEEDED")]
    RateLimitExceeded,
    #[serde(rename = "internal_error")]
    Internal,
    #[serde(rename = "service_unavailable")]
    ServiceUnavailable,
    /// 502: every language-model provider tried for the request failed.
    #[serde(rename = "upstream_error")]
    Upstream,
}

impl ErrorCode {
    /// All codes, for docs and tests.
    pub const ALL: [ErrorCode; 11] = [
        ErrorCode::InvalidRequest,
        ErrorCode::InvalidApiKey,
        ErrorCode::InsufficientScope,
        ErrorCode::NotFound,
        ErrorCode::MethodNotAllowed,
        ErrorCode::VersionSunset,
        ErrorCode::PayloadTooLarge,
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
            ErrorCode::RateLimitExceeded => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::ServiceUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Upstream => StatusCode::BAD_GATEWAY,
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
            ErrorCode::PayloadTooLarge => "the body is larger than `server.max_body_bytes`",
            ErrorCode::RateLimitExceeded => "the key has used up its request budget",
            ErrorCode::Internal => "a fault inside kbq; the request id in the logs tells which",
            ErrorCode::ServiceUnavailable => {
                "the knowledge base (or another dependency) cannot answer now; retry later"
            }
            ErrorCode::Upstream => "every language-model provider tried for the request failed",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidApiKey => "INVALID_API_KEY",
            ErrorCode::InsufficientScope => "insufficient_scope",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::VersionSunset => "version_sunset",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::RateLimitExceeded => "RATE_LIMIT_EXCEEDED",
            ErrorCode::Internal => "internal_error",
            ErrorCode::ServiceUnavailable => "service_unavailable",
            ErrorCode::Upstream => "upstream_error",
        }
    }

    /// The code for a status that some layer other than kbq's handlers produced.
    pub fn for_status(status: StatusCode) -> ErrorCode {
        match status.as_u16() {
            401 => ErrorCode::InvalidApiKey,
            403 => ErrorCode::InsufficientScope,
            404 => ErrorCode::NotFound,
            405 => ErrorCode::MethodNotAllowed,
            410 => ErrorCode::VersionSunset,
            413 => ErrorCode::PayloadTooLarge,
            429 => ErrorCode::RateLimitExceeded,
            502 => ErrorCode::Upstream,
            503 => ErrorCode::ServiceUnavailable,
            400..=499 => ErrorCode::InvalidRequest,
            _ => ErrorCode::Internal,
        }
    }
}

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
        res.json(ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: &self.message,
                field: self.field.as_deref(),
            },
        })
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
