//! The answer of `POST /v1/chat/completions` with `stream: true`: server-sent events of
//! OpenAI's `chat.completion.chunk`s, ending with `data: [DONE]`. The provider has answered
//! whole by then (see the route's doc), so the events are cut from a finished answer. Its own
//! file because the chunk shapes and the cutting have nothing to do with checking requests.

use bytes::Bytes;
use kbq_actors::ChatResponse;
use serde::Serialize;
use serde_json::Value;

use super::{AssistantMessage, TokenUsage};

/// One server-sent event of a streamed completion, as an SSE client reads it: OpenAI's
/// shape, no `event:` line (so the event is a `message`) and no id.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // the document's only
pub struct ChunkEvent {
    /// A `chat.completion.chunk` as JSON; `[DONE]` in the last event.
    data: String,
    /// `message`, as no `event:` line is sent.
    #[schema(pattern = "^message$")]
    event: String,
}

/// Content in pieces of about this many bytes, cut after whitespace.
const PIECE_BYTES: usize = 24;

/// One `chat.completion.chunk`. Fields in alphabetical order, as in [`super::ChatCompletion`].
#[derive(Serialize)]
struct Chunk<'a> {
    /// One choice, or none in the closing usage chunk.
    choices: Vec<ChunkChoice<'a>>,
    created: u64,
    id: &'a str,
    model: &'a str,
    object: &'static str,
    /// Always null.
    system_fingerprint: (),
    /// Absent unless `stream_options.include_usage`; then null in every chunk but the last,
    /// which has the counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<TokenUsage>>,
}

#[derive(Serialize)]
struct ChunkChoice<'a> {
    delta: Delta<'a>,
    /// Null but in the last chunk with a choice.
    finish_reason: Option<&'a str>,
    index: u32,
    /// Always null.
    logprobs: (),
}

/// What a chunk adds to the message; an empty object in the chunk with the finish reason.
#[derive(Default, Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[ToolCallDelta<'a>; 1]>,
}

/// One tool call, whole, with its position among the message's calls. Its parts are the
/// provider's values as they came.
#[derive(Serialize)]
struct ToolCallDelta<'a> {
    function: FunctionDelta<'a>,
    id: &'a Value,
    index: usize,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct FunctionDelta<'a> {
    arguments: &'a Value,
    name: &'a Value,
}

/// Splits text into pieces that end at whitespace, about [`PIECE_BYTES`] long.
fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        let end = i + c.len_utf8();
        if c.is_whitespace() && end - start >= PIECE_BYTES {
            out.push(&text[start..end]);
            start = end;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// The server-sent events of one answer, in OpenAI's chunk format: the role, the content in
/// pieces, each tool call, the finish reason, optionally the usage, then `[DONE]`.
pub(super) fn events<'a>(
    id: &'a str,
    created: u64,
    answer: &'a ChatResponse,
    include_usage: bool,
) -> Vec<Bytes> {
    let (message, finish) = AssistantMessage::of(answer);
    let usage = include_usage.then(|| TokenUsage::from(answer.usage));
    let model = answer.provider.as_str();
    let chunk = |choices: Vec<ChunkChoice<'a>>, counts: Option<TokenUsage>| Chunk {
        choices,
        created,
        id,
        model,
        object: "chat.completion.chunk",
        system_fingerprint: (),
        usage: usage.map(|_| counts),
    };
    let choice = |delta, finish_reason| {
        vec![ChunkChoice {
            delta,
            finish_reason,
            index: 0,
            logprobs: (),
        }]
    };
    let mut chunks = vec![chunk(
        choice(
            Delta {
                content: Some(""),
                role: Some("assistant"),
                ..Delta::default()
            },
            None,
        ),
        None,
    )];
    if let Some(text) = message.content.as_str() {
        chunks.extend(pieces(text).into_iter().map(|p| {
            let delta = Delta {
                content: Some(p),
                ..Delta::default()
            };
            chunk(choice(delta, None), None)
        }));
    }
    for (index, call) in message.tool_calls.unwrap_or_default().iter().enumerate() {
        let delta = Delta {
            tool_calls: Some([ToolCallDelta {
                function: FunctionDelta {
                    arguments: &call["function"]["arguments"],
                    name: &call["function"]["name"],
                },
                id: &call["id"],
                index,
                kind: "function",
            }]),
            ..Delta::default()
        };
        chunks.push(chunk(choice(delta, None), None));
    }
    chunks.push(chunk(choice(Delta::default(), Some(finish)), None));
    if let Some(counts) = usage {
        chunks.push(chunk(Vec::new(), Some(counts)));
    }
    let mut events: Vec<Bytes> = chunks
        .iter()
        .map(|c| {
            let json = serde_json::to_string(c).expect("a chunk serializes");
            Bytes::from(format!("data: {json}\n\n"))
        })
        .collect();
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    events
}

#[cfg(test)]
mod tests {
    use super::pieces;

    #[test]
    fn pieces_cover_the_text_and_end_at_whitespace() {
        let text = "Graphs connect entities by typed relationships; kbq walks them breadth first. Ünïcode too.";
        let parts = pieces(text);
        assert!(parts.len() > 2);
        assert_eq!(parts.concat(), text);
        for p in &parts[..parts.len() - 1] {
            assert!(p.ends_with(char::is_whitespace), "{p:?}");
        }
        assert_eq!(pieces(""), Vec::<&str>::new());
        assert_eq!(pieces("short"), vec!["short"]);
    }
}
