//! The model side of a provider: the chat protocol (OpenAI's, as JSON), the [`Backend`]
//! trait every model endpoint implements, the OpenAI-compatible backend over async-openai,
//! how its errors are classified, and the retry policy. Apart from the provider's worker
//! pool (provider.rs), so that the built-in backend, the embedder and health use the protocol
//! without the actor that runs it.

use std::sync::Arc;
use std::time::Duration;

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::error::OpenAIError;
use backon::{ExponentialBuilder, Retryable};
use kbq_tools::ToolResult;
use serde_json::{Value, json};

/// One request to a model: OpenAI chat messages and tool definitions, as JSON.
///
/// The messages and tools are shared, not copied: a chat turn asks once per step with the
/// conversation so far, and the router hands the same request to each provider it tries.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    pub messages: Arc<Vec<Value>>,
    pub tools: Arc<Vec<Value>>,
    /// The results of the conversation's tool calls as the chat session that ran them holds
    /// them, one per `tool` message in `messages`, in their order (the messages carry the
    /// same JSON text). A provider in this process (the built-in one) reads them here, where
    /// it knows who wrote them; empty when the request came from elsewhere. Sent nowhere.
    pub tool_results: Arc<Vec<ToolResult>>,
    /// OpenAI's `tool_choice` (`"auto"`, `"none"`, `"required"` or a named function); `None`
    /// means `"auto"` when tools are offered.
    pub tool_choice: Option<Value>,
    /// `None` leaves the model's default.
    pub temperature: Option<f64>,
    /// `None` leaves the model's default.
    pub max_tokens: Option<u32>,
    /// Further OpenAI request fields passed through unchanged (`top_p`, `stop`, `seed`, ...).
    pub options: serde_json::Map<String, Value>,
    /// The workspace the request was made in. A provider in this process (the built-in one)
    /// retrieves from it; `None` for a request that reads no knowledge (ingestion's). Sent
    /// nowhere.
    pub workspace: Option<kbq_tools::Workspace>,
    /// The span of this call (the router's, one per provider tried): the worker that carries
    /// it traces its work, retries included, under it. Sent nowhere.
    pub span: CallSpan,
}

/// Whether spans may carry text (prompts, answers, tool arguments and results): off unless
/// the server's `[telemetry] include_content` turns it on.
static SPAN_CONTENT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Lets spans carry text (see [`span_content`]).
pub fn set_span_content(on: bool) {
    SPAN_CONTENT.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether spans may carry text: prompts, answers, tool arguments and results.
pub fn span_content() -> bool {
    SPAN_CONTENT.load(std::sync::atomic::Ordering::Relaxed)
}

/// The span a message carries to the actor that does its work, whose own spans are then
/// its children: an actor's task does not inherit the sender's span. None by default.
#[derive(Debug, Clone)]
pub struct CallSpan(pub tracing::Span);

impl Default for CallSpan {
    fn default() -> Self {
        CallSpan(tracing::Span::none())
    }
}

impl std::ops::Deref for CallSpan {
    type Target = tracing::Span;
    fn deref(&self) -> &tracing::Span {
        &self.0
    }
}

/// The model's answer: an assistant message (content and/or tool_calls).
#[derive(Debug, Clone)]
pub struct ChatResponse {
    pub message: Value,
    /// The model's `finish_reason` when it gave one (`stop`, `length`, `tool_calls`, ...).
    pub finish_reason: Option<String>,
    pub usage: Usage,
    /// The provider that answered.
    pub provider: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

impl Usage {
    pub fn add(&mut self, other: Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
    }
}

/// Why a provider did not answer.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    /// Worth retrying: timeouts, connection errors, 408, 429, 5xx.
    #[error("{message}")]
    Transient {
        message: String,
        retry_after: Option<Duration>,
    },
    /// Not worth retrying on this provider: 4xx other than 408/429, unreadable answers.
    #[error("{0}")]
    Permanent(String),
}

impl ProviderError {
    pub fn is_transient(&self) -> bool {
        matches!(self, ProviderError::Transient { .. })
    }
}

/// A model endpoint.
#[async_trait::async_trait]
pub trait Backend: Send + Sync + 'static {
    fn kind(&self) -> &'static str;
    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError>;
    /// A cheap reachability check.
    async fn probe(&self) -> Result<(), ProviderError>;
}

/// Any OpenAI-compatible endpoint (OpenAI, Ollama, vLLM, llama.cpp server, LiteLLM, ...),
/// through async-openai. async-openai's default client retries on its own; kbq replaces its
/// HTTP service with `plain_http`, which does not, so the provider's workers are the one
/// place that retries (through `with_retries`), and they read `Retry-After` for it.
pub struct OpenAiBackend {
    name: String,
    model: String,
    client: Client<OpenAIConfig>,
    timeout: Duration,
}

impl OpenAiBackend {
    pub fn new(
        name: &str,
        base_url: &str,
        model: &str,
        api_key: Option<String>,
        timeout: Duration,
    ) -> Self {
        let mut config = OpenAIConfig::new().with_api_base(base_url.trim_end_matches('/'));
        // Local servers take any key; a blank one keeps the Authorization header well formed.
        config = config.with_api_key(api_key.unwrap_or_else(|| "none".into()));
        let client =
            Client::with_config(config).with_http_service(plain_http(reqwest::Client::new()));
        OpenAiBackend {
            name: name.into(),
            model: model.into(),
            client,
            timeout,
        }
    }
}

tokio::task_local! {
    /// The `Retry-After` of the last response seen in the current call, if any.
    static RETRY_AFTER: std::cell::Cell<Option<Duration>>;
}

/// Longest `Retry-After` honoured.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// The HTTP service for async-openai: sends each request once with reqwest (no retry layer)
/// and records a response's `Retry-After` (in seconds) for the call that made it.
#[derive(Clone)]
pub(crate) struct PlainHttp {
    http: reqwest::Client,
}

pub(crate) fn plain_http(http: reqwest::Client) -> PlainHttp {
    PlainHttp { http }
}

impl tower::Service<async_openai::middleware::HttpRequestFactory> for PlainHttp {
    type Response = reqwest::Response;
    type Error = OpenAIError;
    type Future =
        std::pin::Pin<Box<dyn Future<Output = Result<reqwest::Response, OpenAIError>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), OpenAIError>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, factory: async_openai::middleware::HttpRequestFactory) -> Self::Future {
        let http = self.http.clone();
        Box::pin(async move {
            let request = factory.build().await?;
            let response = http.execute(request).await.map_err(OpenAIError::Reqwest)?;
            let after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, std::time::SystemTime::now()));
            let _ = RETRY_AFTER.try_with(|cell| cell.set(after));
            Ok(response)
        })
    }
}

/// A `Retry-After` value (RFC 9110: whole seconds, or an HTTP date) as a wait from `now`,
/// at most [`MAX_RETRY_AFTER`]. A date in the past means no wait.
fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = match value.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => httpdate::parse_http_date(value)
            .ok()?
            .duration_since(now)
            .unwrap_or(Duration::ZERO),
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// Runs one async-openai call, attaching the `Retry-After` it saw to a transient error.
pub(crate) async fn with_retry_after<T>(
    call: impl Future<Output = Result<T, ProviderError>>,
) -> Result<T, ProviderError> {
    RETRY_AFTER
        .scope(std::cell::Cell::new(None), async {
            match call.await {
                Err(ProviderError::Transient {
                    message,
                    retry_after: None,
                }) => Err(ProviderError::Transient {
                    message,
                    retry_after: RETRY_AFTER.with(|c| c.get()),
                }),
                other => other,
            }
        })
        .await
}

pub(crate) fn classify(e: OpenAIError) -> ProviderError {
    match e {
        OpenAIError::ApiError(resp) => {
            let status = resp.status_code.as_u16();
            let message = format!("HTTP {status}: {}", resp.api_error.message);
            if status == 408 || status == 429 || status >= 500 {
                ProviderError::Transient {
                    message,
                    retry_after: None,
                }
            } else {
                ProviderError::Permanent(message)
            }
        }
        OpenAIError::Reqwest(e) => ProviderError::Transient {
            message: format!("connection: {e}"),
            retry_after: None,
        },
        other => ProviderError::Permanent(other.to_string()),
    }
}

#[async_trait::async_trait]
impl Backend for OpenAiBackend {
    fn kind(&self) -> &'static str {
        "openai"
    }

    async fn complete(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        request
            .span
            .record("gen_ai.request.model", self.model.as_str());
        let mut body = Value::Object(request.options.clone());
        body["model"] = json!(self.model);
        body["messages"] = json!(*request.messages);
        body["stream"] = json!(false);
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(m) = request.max_tokens {
            body["max_tokens"] = json!(m);
        }
        if !request.tools.is_empty() {
            body["tools"] = json!(*request.tools);
            body["tool_choice"] = request.tool_choice.clone().unwrap_or(json!("auto"));
        }
        let chat = self.client.chat();
        let call = async { chat.create_byot::<_, Value>(body).await.map_err(classify) };
        let answer = tokio::time::timeout(self.timeout, with_retry_after(call))
            .await
            .map_err(|_| ProviderError::Transient {
                message: format!("no answer within {:?}", self.timeout),
                retry_after: None,
            })??;
        let message = answer["choices"][0]["message"].clone();
        if !message.is_object() {
            return Err(ProviderError::Permanent(
                "the answer has no choices[0].message".into(),
            ));
        }
        let u = &answer["usage"];
        let usage = Usage {
            prompt_tokens: u["prompt_tokens"].as_u64().unwrap_or(0),
            completion_tokens: u["completion_tokens"].as_u64().unwrap_or(0),
            total_tokens: u["total_tokens"].as_u64().unwrap_or(0),
        };
        Ok(ChatResponse {
            finish_reason: answer["choices"][0]["finish_reason"]
                .as_str()
                .map(str::to_string),
            message,
            usage,
            provider: self.name.clone(),
        })
    }

    async fn probe(&self) -> Result<(), ProviderError> {
        let models = self.client.models();
        let call = models.list_byot::<Value>();
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| ProviderError::Transient {
                message: "probe timed out".into(),
                retry_after: None,
            })?
            .map(|_| ())
            .map_err(classify)
    }
}

/// How one provider retries transient failures: jittered exponential backoff, bounded.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub max_retries: usize,
    pub min_delay: Duration,
    pub max_delay: Duration,
}

/// Runs `attempt` until it succeeds, fails permanently, or `retry` is spent: jittered
/// exponential backoff, or the `Retry-After` a transient failure carries.
pub(crate) async fn with_retries<T, Fut>(
    attempt: impl FnMut() -> Fut,
    retry: RetryPolicy,
) -> Result<T, ProviderError>
where
    Fut: Future<Output = Result<T, ProviderError>>,
{
    let backoff = ExponentialBuilder::default()
        .with_min_delay(retry.min_delay)
        .with_max_delay(retry.max_delay)
        .with_max_times(retry.max_retries)
        .with_jitter();
    attempt
        .retry(backoff)
        .when(ProviderError::is_transient)
        .adjust(|e, delay| match e {
            ProviderError::Transient {
                retry_after: Some(after),
                ..
            } => delay.map(|_| after.to_owned()),
            _ => delay,
        })
        // Inside a traced call, each retry is an event of its span (docs/operations.md,
        // "Traces").
        .notify(|e, delay| {
            tracing::warn!(
                error = %e,
                retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                "model call failed; retrying"
            )
        })
        .await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::parse_retry_after;

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now = httpdate::parse_http_date("Sun, 22 Nov 2026 08:00:00 GMT").unwrap();
        let at = |v: &str| parse_retry_after(v, now);
        assert_eq!(at("7"), Some(Duration::from_secs(7)));
        assert_eq!(at(" 0 "), Some(Duration::ZERO));
        assert_eq!(
            at("Sun, 22 Nov 2026 08:00:12 GMT"),
            Some(Duration::from_secs(12))
        );
        // A date already past means retry now; long waits are capped.
        assert_eq!(at("Sun, 22 Nov 2026 07:59:00 GMT"), Some(Duration::ZERO));
        assert_eq!(at("86400"), Some(Duration::from_secs(30)));
        assert_eq!(
            at("Mon, 23 Nov 2026 08:00:00 GMT"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(at("soon"), None);
        assert_eq!(at("-3"), None);
    }
}
