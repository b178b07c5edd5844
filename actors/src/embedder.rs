//! [`OpenAiEmbedder`]: the knowledge base's embedder backed by any OpenAI-compatible
//! `/embeddings` endpoint (OpenAI, Ollama, vLLM, llama.cpp server, ...), through async-openai
//! with the same single-attempt HTTP service and `Retry-After` handling as the providers.

use std::time::Duration;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use kbq_store::{Embedder, StoreError};
use serde_json::{Value, json};

use crate::backend::{
    ProviderError, RetryPolicy, classify, plain_http, with_retries, with_retry_after,
};

/// What an [`OpenAiEmbedder`] is built from.
#[derive(Debug, Clone)]
pub struct OpenAiEmbedderConfig {
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    /// The vectors' length; every answer is checked against it.
    pub dimension: usize,
    /// Send `dimensions` with each request (models that can shorten their vectors).
    pub send_dimensions: bool,
    /// Most inputs per request; longer lists are split.
    pub batch_size: usize,
    /// Longest wait for one attempt.
    pub timeout: Duration,
    /// Retries of a transient failure (timeouts, connection errors, 408, 429, 5xx).
    pub max_retries: usize,
    /// How documents are sent: models such as e5 embed a query and the passage it looks for
    /// differently, and are told which one they are given.
    pub documents: Modality,
    /// How queries are sent.
    pub queries: Modality,
}

/// How the texts of one kind (documents or queries) are sent to the model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Modality {
    /// Sent as the request's `input_type` (a field servers for e5, Voyage or NVIDIA models
    /// read); not sent when `None`.
    pub input_type: Option<String>,
    /// Put before each text (e5's `query: ` and `passage: `, for servers that add nothing).
    pub prefix: String,
}

pub struct OpenAiEmbedder {
    config: OpenAiEmbedderConfig,
    client: Client<OpenAIConfig>,
}

impl OpenAiEmbedder {
    pub fn new(config: OpenAiEmbedderConfig) -> Self {
        let api = OpenAIConfig::new()
            .with_api_base(config.base_url.trim_end_matches('/'))
            .with_api_key(config.api_key.clone().unwrap_or_else(|| "none".into()));
        let client = Client::with_config(api).with_http_service(plain_http(reqwest::Client::new()));
        OpenAiEmbedder { config, client }
    }

    async fn attempt(
        &self,
        texts: &[String],
        dimensions: Option<usize>,
        modality: &Modality,
    ) -> Result<Vec<Vec<f32>>, ProviderError> {
        let input: Vec<String> = if modality.prefix.is_empty() {
            texts.to_vec()
        } else {
            (texts.iter())
                .map(|t| format!("{}{t}", modality.prefix))
                .collect()
        };
        let mut body =
            json!({"model": self.config.model, "input": input, "encoding_format": "float"});
        if let Some(d) = dimensions {
            body["dimensions"] = json!(d);
        }
        if let Some(kind) = &modality.input_type {
            body["input_type"] = json!(kind);
        }
        let embeddings = self.client.embeddings();
        let call = async {
            embeddings
                .create_byot::<_, Value>(body)
                .await
                .map_err(classify)
        };
        let answer = tokio::time::timeout(self.config.timeout, with_retry_after(call))
            .await
            .map_err(|_| ProviderError::Transient {
                message: format!("no answer within {:?}", self.config.timeout),
                retry_after: None,
            })??;
        let mut data = answer["data"]
            .as_array()
            .cloned()
            .ok_or_else(|| ProviderError::Permanent("the answer has no data array".into()))?;
        // OpenAI answers in input order, but says each item's index: trust the index.
        data.sort_by_key(|d| d["index"].as_u64().unwrap_or(u64::MAX));
        if data.len() != texts.len() {
            return Err(ProviderError::Permanent(format!(
                "{} inputs gave {} embeddings",
                texts.len(),
                data.len()
            )));
        }
        let want = dimensions.unwrap_or(self.config.dimension);
        data.iter()
            .map(|d| {
                let v: Vec<f32> = d["embedding"]
                    .as_array()
                    .ok_or_else(|| {
                        ProviderError::Permanent("an embedding is not an array of numbers".into())
                    })?
                    .iter()
                    .map(|x| x.as_f64().map(|x| x as f32))
                    .collect::<Option<_>>()
                    .ok_or_else(|| {
                        ProviderError::Permanent("an embedding holds a non-number".into())
                    })?;
                if v.len() != want {
                    return Err(ProviderError::Permanent(format!(
                        "the model gave {} dimensions, {want} are configured",
                        v.len()
                    )));
                }
                Ok(normalized(v))
            })
            .collect()
    }

    async fn embed_batches(
        &self,
        texts: &[String],
        dimensions: Option<usize>,
        modality: &Modality,
    ) -> kbq_store::Result<Vec<Vec<f32>>> {
        let mut out = Vec::with_capacity(texts.len());
        for batch in texts.chunks(self.config.batch_size.max(1)) {
            let retry = RetryPolicy {
                max_retries: self.config.max_retries,
                min_delay: Duration::from_millis(100),
                max_delay: Duration::from_secs(2),
            };
            let vectors = with_retries(|| self.attempt(batch, dimensions, modality), retry)
                .await
                .map_err(|e| match e {
                    ProviderError::Transient { message, .. } => StoreError::Unavailable(format!(
                        "the embedder {}: {message}",
                        self.config.model
                    )),
                    ProviderError::Permanent(m) => {
                        StoreError::Query(format!("the embedder {}: {m}", self.config.model))
                    }
                })?;
            out.extend(vectors);
        }
        Ok(out)
    }
}

/// Unit length, so that the dot product is the cosine similarity (most models already are).
fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

#[async_trait::async_trait]
impl Embedder for OpenAiEmbedder {
    /// The model's name: what `POST /v1/embeddings` asks for, and what the store records.
    fn name(&self) -> &str {
        &self.config.model
    }

    fn dimension(&self) -> usize {
        self.config.dimension
    }

    async fn embed(&self, texts: &[String]) -> kbq_store::Result<Vec<Vec<f32>>> {
        let dims = self.config.send_dimensions.then_some(self.config.dimension);
        self.embed_batches(texts, dims, &self.config.documents)
            .await
    }

    async fn embed_queries(&self, texts: &[String]) -> kbq_store::Result<Vec<Vec<f32>>> {
        let dims = self.config.send_dimensions.then_some(self.config.dimension);
        self.embed_batches(texts, dims, &self.config.queries).await
    }

    fn can_shorten(&self) -> bool {
        self.config.send_dimensions
    }

    async fn embed_shortened(
        &self,
        texts: &[String],
        dimensions: usize,
    ) -> kbq_store::Result<Vec<Vec<f32>>> {
        if !self.config.send_dimensions {
            return Err(StoreError::Invalid {
                field: "dimensions".into(),
                reason: format!(
                    "{} is configured without send_dimensions",
                    self.config.model
                ),
            });
        }
        self.embed_batches(texts, Some(dimensions), &self.config.documents)
            .await
    }
}
