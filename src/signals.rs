//! Cross-instance signals: what one instance tells the others through
//! PostgreSQL `LISTEN/NOTIFY` on channel `switchboard`.
//!
//! The database sends them itself (triggers in the migrations), when the
//! change commits: a turn's reply was stored (`reply:<inbound id>`), a stop
//! was requested for a session's running turn (`stop:<session id>`), a
//! draining instance handed a session back (`handback:<session id>`). Each
//! instance listens and acts on what concerns it. Signals are a shortcut,
//! never the only path: a reconnecting listener misses what was sent
//! meanwhile, so waiting callers are also found by polling, stop requests
//! are read at each lease renewal, and orphaned sessions by the sweep. On
//! SQLite (one process) the runner's in-process paths do the same and no
//! listener runs.

use crate::domain::{InboundId, SessionId};
use std::time::Duration;

use sqlx::postgres::PgListener;
use switchboard_contract::backoff::{self, Backoff, Wait};
use tokio_util::sync::CancellationToken;

use crate::session::runner::Runner;

/// The channel every instance listens on.
pub const CHANNEL: &str = "switchboard";

/// Between attempts to (re)connect the listener: from 500 ms, doubling, at
/// most 30 s.
const RECONNECT: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(30));

/// One signal, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    ReplyStored(InboundId),
    StopRequested(SessionId),
    HandedBack(SessionId),
}

impl Signal {
    /// Reads a notification's payload; `None` for one this version does not
    /// know (a newer instance's, say), which is ignored.
    pub fn parse(payload: &str) -> Option<Self> {
        let (kind, value) = payload.split_once(':')?;
        match kind {
            "reply" => value
                .parse()
                .ok()
                .map(InboundId::new)
                .map(Self::ReplyStored),
            "stop" => SessionId::parse(value).ok().map(Self::StopRequested),
            "handback" => SessionId::parse(value).ok().map(Self::HandedBack),
            _ => None,
        }
    }
}

/// Listens until `stop` and hands each signal to `runner`. The caller owns
/// the returned task.
pub fn spawn_listener(
    database_url: String,
    runner: Runner,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut retries = RECONNECT.retries();
        loop {
            match listen(&database_url, &runner, &stop).await {
                Ok(()) => return,
                Err(err) => {
                    let delay = retries.next_delay(None);
                    tracing::warn!(
                        error = %err,
                        retry_in_secs = delay.as_secs_f64(),
                        "listening for other instances' signals failed; polling meanwhile"
                    );
                    if backoff::wait(delay, &stop).await == Wait::Cancelled {
                        return;
                    }
                }
            }
        }
    })
}

async fn listen(
    database_url: &str,
    runner: &Runner,
    stop: &CancellationToken,
) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect(database_url).await?;
    listener.listen(CHANNEL).await?;
    tracing::debug!("listening for other instances' signals");
    loop {
        let notification = tokio::select! {
            received = listener.recv() => received?,
            () = stop.cancelled() => return Ok(()),
        };
        let Some(signal) = Signal::parse(notification.payload()) else {
            tracing::debug!(payload = notification.payload(), "unknown signal ignored");
            continue;
        };
        let handled = match &signal {
            Signal::ReplyStored(id) => runner.reply_stored(Some(&[*id])).await,
            Signal::StopRequested(session) => runner.stop_requested(session).await,
            Signal::HandedBack(session) => {
                runner.handed_back(session);
                Ok(())
            }
        };
        if let Err(err) = handled {
            tracing::warn!(error = %err, ?signal, "acting on a signal failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_parse_and_unknown_ones_are_ignored() {
        assert_eq!(
            Signal::parse("reply:42"),
            Some(Signal::ReplyStored(InboundId::new(42)))
        );
        let session = SessionId::parse("s-1").expect("id");
        assert_eq!(
            Signal::parse("stop:s-1"),
            Some(Signal::StopRequested(session.clone()))
        );
        assert_eq!(
            Signal::parse("handback:s-1"),
            Some(Signal::HandedBack(session))
        );
        assert_eq!(Signal::parse("reply:x"), None);
        assert_eq!(Signal::parse("future:1"), None);
        assert_eq!(Signal::parse("no colon"), None);
    }
}
