//! Following a turn for a streamed answer, whatever its wire shape (chat
//! completion chunks, Responses API events): the text to show as it
//! arrives ([`Shown`]), tool activity, then the rest of the turn's visible
//! reply (for a turn that parked, the request it waits for) or the error
//! that ends the wait. The events go to an [`Outlet`],
//! drained by the response body; a client that hangs up ends the following
//! (the turn goes on, its reply stays in the history).

use std::convert::Infallible;
use std::sync::Arc;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;

use super::completions::{NoReply, Turn};
use super::shown::{Diverged, Shown};
use super::{ApiError, ApiState, reply};
use crate::agent::live::{LiveEvent, LiveSubscription};
use crate::domain::InboundStatus;

/// Where a streamed answer's events go.
pub struct Outlet {
    // Unbounded: a turn sends what its model streams, at most the reply's
    // length in pieces, and the body drains it as fast as the client reads.
    sender: mpsc::UnboundedSender<Event>,
}

impl Outlet {
    pub fn send(&self, event: Event) {
        // A client that hung up is noticed by `closed`.
        let _ = self.sender.send(event);
    }
}

/// What happens in a followed turn.
pub enum Seen<'a> {
    /// Text to show (a later model call's first piece after a blank line).
    Text(String),
    /// A tool started or ended.
    Tool(&'a LiveEvent),
}

/// A server-sent event response whose events `produce` sends to its outlet,
/// in a task of its own.
pub fn sse<F, Fut>(state: &Arc<ApiState>, produce: F) -> Response
where
    F: FnOnce(Arc<ApiState>, Outlet) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (sender, receiver) = mpsc::unbounded_channel();
    let state = Arc::clone(state);
    tokio::spawn(produce(state, Outlet { sender }));
    let events = futures::stream::unfold(receiver, |mut receiver| async move {
        receiver
            .recv()
            .await
            .map(|event| (Ok::<Event, Infallible>(event), receiver))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// How a followed turn ended.
#[derive(Debug)]
pub struct Ended {
    /// Its visible reply not shown yet.
    pub rest: Option<String>,
    /// The turn parked: its reply, for now, is the request it waits for
    /// (after the text its model wrote before asking).
    pub parked: bool,
}

/// Follows `turn` until it ends, telling `seen` what to show; returns the
/// rest of its visible reply not shown yet, or the error that ended the
/// wait; `None` when the client hung up.
pub async fn follow(
    state: &ApiState,
    mut turn: Turn,
    out: &Outlet,
    mut seen: impl FnMut(Seen<'_>),
) -> Option<Result<Ended, ApiError>> {
    let (session_id, inbound_id) = (turn.session_id.clone(), turn.inbound_id);
    let deadline = tokio::time::Instant::now() + state.reply_timeout;
    let mut live = turn.live.take();
    let mut shown = Shown::default();
    let reply = loop {
        tokio::select! {
            // Live events first: those of a turn are all queued before its
            // reply is handed out.
            biased;
            event = next_live(&mut live) => match event {
                Some(event @ (LiveEvent::ToolCall { .. } | LiveEvent::ToolResult { .. })) => {
                    seen(Seen::Tool(&event));
                }
                Some(event) => {
                    if let Some(text) = shown.text(&event) {
                        seen(Seen::Text(text));
                    }
                }
                None => live = None,
            },
            reply = &mut turn.reply => break reply.map_err(|_closed| NoReply::Closed),
            () = tokio::time::sleep_until(deadline) => break Err(NoReply::TimedOut),
            () = state.drain_deadline.cancelled() => break Err(NoReply::Draining),
            () = out.sender.closed() => {
                drop(turn);
                state.service.runner().forget(inbound_id);
                return None;
            }
        }
    };
    drop(live);
    let parked = reply
        .as_ref()
        .is_ok_and(|reply| reply.status == InboundStatus::Waiting);
    let visible = match reply {
        Ok(reply) => reply::visible(state, &reply).await,
        Err(no_reply) => {
            drop(turn);
            // Its reply will be in the conversation's history, and a retry
            // gets it.
            state.service.runner().forget(inbound_id);
            Err(no_reply.into_error(&session_id, inbound_id))
        }
    };
    Some(visible.and_then(|visible| {
        let rest = if parked {
            // The request is not the model's text: it follows what was
            // shown of it.
            shown.rest_of_parked(&visible)
        } else {
            shown
                .rest_of(&visible)
                .map_err(|Diverged| ApiError::Diverged {
                    session_id: session_id.to_string(),
                    turn: inbound_id,
                })?
        };
        Ok(Ended { rest, parked })
    }))
}

/// The next live event; never, without a subscription.
async fn next_live(live: &mut Option<LiveSubscription>) -> Option<LiveEvent> {
    match live {
        Some(live) => live.next().await,
        None => std::future::pending().await,
    }
}
