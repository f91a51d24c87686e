//! Starting an adapter the way the core does
//! ([`Adapter::start`](switchboard_contract::Adapter::start)): a [`Hookup`]
//! around a test's sink, with an observer that ignores the connection's
//! reports and a shutdown token that is never cancelled.

use std::sync::Arc;

use switchboard_contract::{Hookup, InboundSink, LinkObserver};
use tokio_util::sync::CancellationToken;

/// Ignores what the connection reports.
pub struct Unobserved;

impl LinkObserver for Unobserved {
    fn up(&self) {}
    fn down(&self, _reason: &str) {}
}

/// A hookup handing what arrives to `sink`.
pub fn hookup(sink: Arc<dyn InboundSink>) -> Hookup {
    Hookup {
        sink,
        observer: Arc::new(Unobserved),
        shutdown: CancellationToken::new(),
    }
}
