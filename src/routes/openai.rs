//! The OpenAI-compatible endpoints: `GET /v1/models` and `POST /v1/embeddings`, in OpenAI's
//! request and response shapes so that OpenAI clients work unchanged (docs/api.md).

use std::time::Duration;

use actix_web::middleware::from_fn;
use actix_web::{HttpResponse, web};
use base64::Engine as _;
use kbq_store::KnowledgeBase;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use crate::auth::{Scope, require_scope};
use crate::error::{ApiError, ErrorBody, ErrorCode};
use crate::extract::{Range, ValidJson};
use crate::models::{ModelKind, Models};

/// Most inputs in one embeddings request.
pub const MAX_INPUTS: usize = 256;
/// Longest input, in characters.
pub const MAX_INPUT_CHARS: usize = 32 * 1024;
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

// The fields of this file's OpenAI shapes are in alphabetical order: the order these bodies
// have always been sent in (they were built as `serde_json` maps, which keep their keys
// sorted).

/// `GET /v1/models`, in OpenAI's list shape.
#[derive(Serialize, ToSchema)]
pub struct ModelList<'a> {
    /// The chat models (`kbq`, the aliases, each provider), then the embedder.
    pub data: Vec<Model<'a>>,
    /// Always `list`.
    pub object: &'static str,
}

#[derive(Serialize, ToSchema)]
pub struct Model<'a> {
    /// Always 0.
    pub created: u64,
    /// A chat model's name (`kbq`, an alias, a provider) or the embedder's.
    pub id: &'a str,
    /// Always `model`.
    pub object: &'static str,
    /// `kbq:all-providers`, `kbq:alias`, `kbq:provider` or `kbq:embedder`.
    pub owned_by: &'static str,
}

impl<'a> Model<'a> {
    fn new(id: &'a str, owned_by: &'static str) -> Self {
        Model {
            created: 0,
            id,
            object: "model",
            owned_by,
        }
    }
}

/// The chat models (`kbq`, the aliases, each provider) and the embedder.
#[utoipa::path(
    get,
    path = "/v1/models",
    tag = "openai",
    responses((status = 200, description = "OpenAI's model list", body = ModelList)),
    security(("bearer" = ["read"]), ("api_key" = ["read"])),
)]
async fn models(models: web::Data<Models>, kb: web::Data<KnowledgeBase>) -> HttpResponse {
    let mut data: Vec<Model> = models
        .names()
        .iter()
        .map(|(name, kind)| {
            let owner = match kind {
                ModelKind::Default => "kbq:all-providers",
                ModelKind::Alias => "kbq:alias",
                ModelKind::Provider => "kbq:provider",
            };
            Model::new(name, owner)
        })
        .collect();
    data.push(Model::new(kb.embedder().name(), "kbq:embedder"));
    HttpResponse::Ok().json(ModelList {
        data,
        object: "list",
    })
}

// For the document only: the handler reads `input` as JSON and checks it itself, to name the
// rule it breaks.
/// `input` of `POST /v1/embeddings`: one string or an array of strings.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum EmbeddingsInput {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingsRequest {
    #[schema(value_type = EmbeddingsInput)]
    pub input: Value,
    pub model: String,
    #[serde(default, deserialize_with = "crate::extract::integer")]
    pub dimensions: Option<i64>,
    pub encoding_format: Option<String>,
    /// Accepted and ignored, as OpenAI does for abuse monitoring.
    pub user: Option<String>,
}

/// `encoding_format`'s values.
pub const FLOAT: &str = "float";
pub const BASE64: &str = "base64";

/// `dimensions`' rule: an embedder that can shorten its vectors returns 1 to its dimension;
/// another only its own dimension. Absent is the embedder's dimension.
pub fn dimensions(dimension: usize, can_shorten: bool) -> Range {
    let dimension = dimension as i64;
    let least = if can_shorten { 1 } else { dimension };
    Range::new("dimensions", least, dimension, dimension)
}

/// The schema of `input`, with the rules `inputs` checks: one string, or an array of 1 to
/// [`MAX_INPUTS`] strings, each of 1 to [`MAX_INPUT_CHARS`] characters.
pub fn input_schema() -> Value {
    let text = serde_json::json!({"type": "string", "minLength": 1, "maxLength": MAX_INPUT_CHARS});
    serde_json::json!({
        "description": "One text, or an array of texts, to embed",
        "oneOf": [
            text,
            {"type": "array", "items": text, "minItems": 1, "maxItems": MAX_INPUTS},
        ],
    })
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
    if texts
        .iter()
        .any(|t| kbq_store::model::longer_than(t, MAX_INPUT_CHARS))
    {
        return Err(ApiError::invalid(
            "input",
            format!("each input must be at most {MAX_INPUT_CHARS} characters"),
        ));
    }
    Ok(texts)
}

/// `POST /v1/embeddings`, in OpenAI's shape.
#[derive(Serialize, ToSchema)]
pub struct EmbeddingList<'a> {
    /// One per input, in input order.
    pub data: Vec<Embedding>,
    /// The embedder's name.
    pub model: &'a str,
    /// Always `list`.
    pub object: &'static str,
    pub usage: EmbeddingUsage,
}

#[derive(Serialize, ToSchema)]
pub struct Embedding {
    pub embedding: EmbeddingVector,
    /// The input's position, from 0.
    pub index: usize,
    /// Always `embedding`.
    pub object: &'static str,
}

/// Numbers for `encoding_format` `float`; base64 of little-endian `f32`s for `base64`.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum EmbeddingVector {
    #[serde(serialize_with = "widened")]
    Float(Vec<f32>),
    Base64(String),
}

/// Each number as the `f64` it widens to (`0.1f32` is `0.10000000149011612`), as these
/// vectors have always been written: changing the digits would change what clients store.
fn widened<S: serde::Serializer>(v: &[f32], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|&x| f64::from(x)))
}

/// Whitespace-separated words, an approximation of tokens.
#[derive(Serialize, ToSchema)]
pub struct EmbeddingUsage {
    pub prompt_tokens: usize,
    pub total_tokens: usize,
}

/// Embeddings from the configured embedder, in OpenAI's shape.
#[utoipa::path(
    post,
    path = "/v1/embeddings",
    tag = "openai",
    request_body = EmbeddingsRequest,
    responses(
        (status = 200, description = "One vector per input", body = EmbeddingList),
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
    let rule = dimensions(dimension, embedder.can_shorten());
    let shorten = match rule.check(req.dimensions) {
        Ok(d) => (d as usize != dimension).then_some(d as usize),
        Err(_) if rule.min == rule.max => {
            return Err(ApiError::invalid(
                "dimensions",
                format!("{} has a fixed dimension of {dimension}", embedder.name()),
            ));
        }
        Err(e) => return Err(e),
    };
    let base64 = match req.encoding_format.as_deref() {
        None | Some(FLOAT) => false,
        Some(BASE64) => true,
        Some(_) => {
            return Err(ApiError::invalid(
                "encoding_format",
                format!("encoding_format must be {FLOAT} or {BASE64}"),
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
    let data = vectors
        .into_iter()
        .enumerate()
        .map(|(index, v)| Embedding {
            embedding: if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                EmbeddingVector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                EmbeddingVector::Float(v)
            },
            index,
            object: "embedding",
        })
        .collect();
    Ok(HttpResponse::Ok().json(EmbeddingList {
        data,
        model: embedder.name(),
        object: "list",
        usage: EmbeddingUsage {
            prompt_tokens: tokens,
            total_tokens: tokens,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The structs write the bytes that the `serde_json` maps they replaced wrote: keys in
    /// alphabetical order, and each float as the `f64` it widens to.
    #[test]
    fn bodies_are_the_bytes_clients_have_always_read() {
        let floats = vec![0.1f32, -2.5, 1e-8, 3.0];
        let list = EmbeddingList {
            data: vec![
                Embedding {
                    embedding: EmbeddingVector::Float(floats.clone()),
                    index: 0,
                    object: "embedding",
                },
                Embedding {
                    embedding: EmbeddingVector::Base64("AAAA".into()),
                    index: 1,
                    object: "embedding",
                },
            ],
            model: "hash-384",
            object: "list",
            usage: EmbeddingUsage {
                prompt_tokens: 7,
                total_tokens: 7,
            },
        };
        let before = json!({
            "object": "list",
            "data": [
                {"object": "embedding", "index": 0, "embedding": json!(floats)},
                {"object": "embedding", "index": 1, "embedding": json!("AAAA")},
            ],
            "model": "hash-384",
            "usage": {"prompt_tokens": 7, "total_tokens": 7},
        });
        assert_eq!(
            serde_json::to_string(&list).unwrap(),
            serde_json::to_string(&before).unwrap()
        );

        let models = ModelList {
            data: vec![Model::new("kbq", "kbq:all-providers")],
            object: "list",
        };
        let before = json!({"object": "list", "data": [
            {"id": "kbq", "object": "model", "created": 0, "owned_by": "kbq:all-providers"},
        ]});
        assert_eq!(
            serde_json::to_string(&models).unwrap(),
            serde_json::to_string(&before).unwrap()
        );
    }
}
