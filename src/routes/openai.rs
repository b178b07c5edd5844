//! The OpenAI-compatible endpoints: `GET /v1/models` and `POST /v1/embeddings`, in OpenAI's
//! request and response shapes so that OpenAI clients work unchanged (docs/api.md).

use std::time::Duration;

use actix_web::middleware::from_fn;
use actix_web::{HttpResponse, web};
use base64::Engine as _;
use kbq_store::KnowledgeBase;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::{Scope, require_scope};
use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::extract::ValidJson;
use crate::models::{ModelKind, Models};

/// Most inputs in one embeddings request.
pub const MAX_INPUTS: usize = 256;
/// Longest input, in bytes.
pub const MAX_INPUT_BYTES: usize = 32 * 1024;
/// Longest wait for the embedder.
const EMBED_TIMEOUT: Duration = Duration::from_secs(30);

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/models")
            .wrap(from_fn(|req, next| require_scope(Scope::Read, req, next)))
            .route(web::get().to(models)),
    )
    .service(
        web::resource("/embeddings")
            .wrap(from_fn(|req, next| require_scope(Scope::Read, req, next)))
            .route(web::post().to(embeddings)),
    );
}

/// The chat models (`kbq`, the aliases, each provider) and the embedder.
#[utoipa::path(
    get,
    path = "/v1/models",
    tag = "openai",
    responses((status = 200, description = "OpenAI's model list", body = crate::openapi::ModelList)),
    security(("bearer" = ["read"]), ("api_key" = ["read"])),
)]
async fn models(models: web::Data<Models>, kb: web::Data<KnowledgeBase>) -> HttpResponse {
    let mut data: Vec<Value> = models
        .names()
        .iter()
        .map(|(name, kind)| {
            let owner = match kind {
                ModelKind::Default => "kbq:all-providers",
                ModelKind::Alias => "kbq:alias",
                ModelKind::Provider => "kbq:provider",
            };
            json!({"id": name, "object": "model", "created": 0, "owned_by": owner})
        })
        .collect();
    data.push(json!({"id": kb.embedder().name(), "object": "model", "created": 0, "owned_by": "kbq:embedder"}));
    HttpResponse::Ok().json(json!({"object": "list", "data": data}))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingsRequest {
    #[schema(value_type = crate::openapi::EmbeddingsInput)]
    pub input: Value,
    pub model: String,
    pub dimensions: Option<i64>,
    pub encoding_format: Option<String>,
    /// Accepted and ignored, as OpenAI does for abuse monitoring.
    pub user: Option<String>,
}

fn inputs(input: Value) -> Result<Vec<String>, ApiError> {
    let rule = "input must be a non-empty string or a non-empty array of non-empty strings";
    let texts = match input {
        Value::String(s) => vec![s],
        Value::Array(items) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                _ => Err(ApiError::invalid("input", rule)),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(ApiError::invalid("input", rule)),
    };
    if texts.is_empty() || texts.iter().any(|t| t.is_empty()) {
        return Err(ApiError::invalid("input", rule));
    }
    if texts.len() > MAX_INPUTS {
        return Err(ApiError::invalid(
            "input",
            format!("input may hold at most {MAX_INPUTS} strings"),
        ));
    }
    if texts.iter().any(|t| t.len() > MAX_INPUT_BYTES) {
        return Err(ApiError::invalid(
            "input",
            format!("each input must be at most {MAX_INPUT_BYTES} bytes"),
        ));
    }
    Ok(texts)
}

/// Embeddings from the configured embedder, in OpenAI's shape.
#[utoipa::path(
    post,
    path = "/v1/embeddings",
    tag = "openai",
    request_body = EmbeddingsRequest,
    responses(
        (status = 200, description = "One vector per input", body = crate::openapi::EmbeddingList),
        (status = 503, description = ErrorCode::ServiceUnavailable.answers("the embedder did not answer in time"), body = ErrorBody),
    ),
    security(("bearer" = ["read"]), ("api_key" = ["read"])),
)]
async fn embeddings(
    kb: web::Data<KnowledgeBase>,
    ValidJson(req): ValidJson<EmbeddingsRequest>,
) -> Result<HttpResponse, ApiError> {
    let embedder = kb.embedder().clone();
    if req.model != embedder.name() {
        return Err(ApiError::invalid(
            "model",
            format!(
                "unknown embedding model `{}`; this server embeds with `{}`",
                req.model,
                embedder.name()
            ),
        ));
    }
    let dimension = embedder.dimension();
    let shorten = match req.dimensions {
        None => None,
        Some(d) if d == dimension as i64 => None,
        Some(d) if embedder.can_shorten() && (1..dimension as i64).contains(&d) => Some(d as usize),
        Some(_) if embedder.can_shorten() => {
            return Err(ApiError::invalid(
                "dimensions",
                format!("dimensions must be between 1 and {dimension}"),
            ));
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "dimensions",
                format!("{} has a fixed dimension of {dimension}", embedder.name()),
            ));
        }
    };
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(_) => {
            return Err(ApiError::invalid(
                "encoding_format",
                "encoding_format must be float or base64",
            ));
        }
    };
    let texts = inputs(req.input)?;
    // An approximation of tokens: words, as whitespace separates them.
    let tokens: usize = texts.iter().map(|t| t.split_whitespace().count()).sum();
    let embed = async {
        match shorten {
            Some(d) => embedder.embed_shortened(&texts, d).await,
            None => embedder.embed(&texts).await,
        }
    };
    let vectors = tokio::time::timeout(EMBED_TIMEOUT, embed)
        .await
        .map_err(|_| ApiError::unavailable("the embedder did not answer in time"))??;
    let data: Vec<Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                json!(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    Ok(HttpResponse::Ok().json(json!({
        "object": "list",
        "data": data,
        "model": embedder.name(),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })))
}
