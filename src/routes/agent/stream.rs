//! `POST /v1/agent/chat` with `stream: true`: the turn as server-sent events while it runs.
//!
//! Each event has an `event:` line naming it and one `data:` line of JSON:
//!
//! - `tool_call.started`: a tool call the model asked for, about to run ([`ToolCallStarted`]);
//! - `tool_call.completed`: the call's record, its error if it failed, and how long it ran
//!   ([`ToolCallCompleted`]);
//! - `delta`: text of the answer (`{"text": ...}`). Providers answer whole today, so an
//!   answer comes in one `delta`, just before `done`;
//! - `done`, always the last when the turn ran: its data is exactly the body the same turn
//!   answers without `stream` (a [`ChatResponse`], `success: false` included);
//! - `error`, the last instead of `done` when the turn could not be run after the stream
//!   began: its data is the error body of every other failure.
//!
//! A comment line (`: keep-alive`) goes out every [`KEEP_ALIVE`] while nothing else does, so
//! that proxies keep an idle stream open. A client that goes away stops the session, as it
//! does without `stream`. Its own file because the event shapes and the stream's end have
//! nothing to do with checking the request.

use std::convert::Infallible;
use std::time::Duration;

use actix_web::HttpRequest;
use actix_web::web::Data;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use kbq_actors::{ChatTurn, SessionEvent};
#[cfg(doc)]
use kbq_actors::{ToolCallCompleted, ToolCallStarted};
use serde::Serialize;
use tokio::sync::mpsc::UnboundedReceiver;
use utoipa::ToSchema;

#[cfg(doc)]
use super::ChatResponse;
use crate::error::ApiError;
#[cfg(doc)]
use crate::error::ErrorBody;
use crate::metrics::Metrics;
use crate::peer::PeerWatch;

/// The longest silence on a stream: a comment line goes out after it.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One server-sent event of a streamed agent chat, as an SSE client reads it. `data` is JSON
/// whose shape `event` names: `tool_call.started` a [`ToolCallStarted`], `tool_call.completed`
/// a [`ToolCallCompleted`], `delta` a [`ChatDelta`], `done` a [`ChatResponse`] (the body the
/// turn answers without `stream`), `error` an [`ErrorBody`].
#[derive(ToSchema)]
#[allow(dead_code)] // the document's only
pub struct ChatEvent {
    #[schema(pattern = "^(tool_call\\.started|tool_call\\.completed|delta|done|error)$")]
    event: String,
    /// JSON of the shape `event` names.
    data: String,
}

/// Text of the answer, in the order it came.
#[derive(Serialize, ToSchema)]
pub struct ChatDelta {
    pub text: String,
}

/// The events' names, as their `event:` lines carry them.
pub const STARTED: &str = "tool_call.started";
pub const COMPLETED: &str = "tool_call.completed";
pub const DELTA: &str = "delta";
pub const DONE: &str = "done";
pub const ERROR: &str = "error";

/// One event's bytes.
fn event(name: &str, data: &impl Serialize) -> Bytes {
    // The data is one line: serde_json writes no newline in compact form.
    let json = serde_json::to_string(data).unwrap_or_else(|_| "{}".into());
    Bytes::from(format!("event: {name}\ndata: {json}\n\n"))
}

/// A session event's bytes; a finished tool call is counted in /metrics as it goes out.
fn session_event(e: SessionEvent, metrics: Option<&Data<Metrics>>) -> Bytes {
    if let (Some(m), SessionEvent::ToolCallCompleted(c)) = (metrics, &e) {
        m.observe_tool_call(&c.tool, !c.result.failed());
    }
    match e {
        SessionEvent::ToolCallStarted(s) => event(STARTED, &s),
        SessionEvent::ToolCallCompleted(c) => event(COMPLETED, &c),
        SessionEvent::Delta(text) => event(DELTA, &ChatDelta { text }),
    }
}

fn error_event(e: &ApiError) -> Bytes {
    event(ERROR, &e.body())
}

/// Where the stream is.
enum Stage {
    Running {
        turn: std::pin::Pin<Box<dyn std::future::Future<Output = super::TurnOutcome>>>,
        events: UnboundedReceiver<SessionEvent>,
        http: HttpRequest,
    },
    /// The turn replied: the events still queued, then this last one.
    Draining {
        events: UnboundedReceiver<SessionEvent>,
        last: Bytes,
    },
    Over,
}

/// The body of a streamed turn: its events as they come, then `done` or `error`.
pub fn body(
    turn: ChatTurn,
    events: UnboundedReceiver<SessionEvent>,
    http: HttpRequest,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    let metrics = http.app_data::<Data<Metrics>>().cloned();
    let turn = Box::pin(super::outcome(turn.reply()));
    futures::stream::unfold(Stage::Running { turn, events, http }, move |stage| {
        let metrics = metrics.clone();
        async move {
            match stage {
                Stage::Running {
                    mut turn,
                    mut events,
                    http,
                } => {
                    let client_left = async {
                        match http.conn_data::<PeerWatch>() {
                            Some(watch) => watch.closed().await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        biased;
                        Some(e) = events.recv() => {
                            let bytes = session_event(e, metrics.as_ref());
                            Some((Ok(bytes), Stage::Running { turn, events, http }))
                        }
                        outcome = &mut turn => {
                            let last = match outcome {
                                Ok(response) => event(DONE, &response),
                                Err(e) => error_event(&e),
                            };
                            Some((Ok(Bytes::new()), Stage::Draining { events, last }))
                        }
                        () = client_left => {
                            // Dropping the turn stops the session.
                            tracing::info!("the client closed the connection; session cancelled");
                            None
                        }
                        () = tokio::time::sleep(KEEP_ALIVE) => {
                            Some((Ok(Bytes::from_static(b": keep-alive\n\n")), Stage::Running { turn, events, http }))
                        }
                    }
                }
                Stage::Draining { mut events, last } => match events.try_recv() {
                    Ok(e) => {
                        let bytes = session_event(e, metrics.as_ref());
                        Some((Ok(bytes), Stage::Draining { events, last }))
                    }
                    Err(_) => Some((Ok(last), Stage::Over)),
                },
                Stage::Over => None,
            }
        }
    })
    .filter(|chunk| std::future::ready(!matches!(chunk, Ok(b) if b.is_empty())))
}
