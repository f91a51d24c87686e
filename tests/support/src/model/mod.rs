//! A fake model server on 127.0.0.1:0 speaking both wire formats, OpenAI
//! Chat Completions (`POST /v1/chat/completions`) and Anthropic Messages
//! (`POST /v1/messages`), for every test that needs a model: the gateway's
//! and the providers' own.
//!
//! It records every request ([`Recorded`]) and answers from a [`Script`]
//! that reads the request: a [`Reply`] it renders in the request's format
//! (one JSON body, or, to a request with `"stream": true`, an event stream
//! that cuts text and tool arguments into several deltas and can be held
//! after its first text delta), or a [`Canned`] HTTP answer sent as it is
//! (a provider's error bodies, retry headers, malformed streams; see
//! [`FakeLlm::scripted`] for a plain sequence of them). It can wait before
//! each answer, counts the requests in flight, and reports the token usage
//! its [`Billing`] computes (fixed counts by default, in proportion to the
//! request's size, or [`Caching`] like the providers' prompt caches, which
//! also refuses with a 400 what Anthropic's API refuses). [`sse`] builds event-stream bodies for canned
//! answers. It depends on nothing of the core: the wire formats are written
//! here as a provider would send them.

mod anthropic;
mod billing;
mod caching;
mod load;
mod openai;
mod recorded;
mod reply;
mod server;
pub mod sse;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use billing::{Billed, Billing, Flat, Format, Usage};
pub use caching::{Caching, Ledger};
pub use recorded::{
    Recorded, assert_prefix_holds, last_is_tool_result, last_user_content, last_user_text,
};
pub use reply::{Call, Canned, Reply, Script};

use load::Load;
use server::Shared;

/// A running fake model server; it stops with the test's runtime.
#[derive(Clone)]
pub struct FakeLlm {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
}

/// How a [`FakeLlm`] starts: its script, a delay before each answer, and
/// its billing.
pub struct FakeLlmBuilder {
    script: Script,
    delay: Duration,
    billing: Arc<dyn Billing>,
}

impl FakeLlmBuilder {
    /// Waits `delay` before each answer (counted in flight meanwhile).
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Reports the usage `billing` computes.
    #[must_use]
    pub fn billing(mut self, billing: impl Billing + 'static) -> Self {
        self.billing = Arc::new(billing);
        self
    }

    /// Starts the server.
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start(self) -> FakeLlm {
        let shared = Arc::new(Shared {
            script: self.script,
            requests: Mutex::default(),
            delay: self.delay,
            load: Arc::new(Mutex::new(Load::default())),
            billing: self.billing,
            hold: watch::Sender::new(false),
        });
        let app = server::router(Arc::clone(&shared));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(listener, app).await });
        FakeLlm { addr, shared }
    }
}

impl FakeLlm {
    /// A server answering every request with `script`, to be adjusted
    /// before it starts.
    pub fn builder(script: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> FakeLlmBuilder {
        FakeLlmBuilder {
            script: Arc::new(script),
            delay: Duration::ZERO,
            billing: Arc::new(Flat::default()),
        }
    }

    /// Starts a server answering every request with `script`.
    pub async fn start(script: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Self {
        Self::builder(script).start().await
    }

    /// Like [`FakeLlm::start`], reporting prompt tokens in proportion to the
    /// request's size.
    pub async fn start_counting(script: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Self {
        Self::builder(script)
            .billing(Flat { counting: true })
            .start()
            .await
    }

    /// Like [`FakeLlm::start`], waiting `delay` before each answer.
    pub async fn start_with_delay(
        script: impl Fn(&Value) -> Reply + Send + Sync + 'static,
        delay: Duration,
    ) -> Self {
        Self::builder(script).delay(delay).start().await
    }

    /// A server answering the requests with `replies` in order, whatever
    /// they ask, and with a 500 once they are spent.
    pub async fn scripted<R: Into<Reply>>(replies: impl IntoIterator<Item = R>) -> Self {
        let replies: VecDeque<Reply> = replies.into_iter().map(Into::into).collect();
        let replies = Mutex::new(replies);
        Self::start(move |_| {
            replies
                .lock()
                .expect("lock")
                .pop_front()
                .unwrap_or_else(|| Canned::json(500, "script exhausted").into())
        })
        .await
    }

    /// A model that answers `echo: <last user text>`.
    pub async fn echo() -> Self {
        Self::start(|body| Reply::Text(format!("echo: {}", last_user_text(body)))).await
    }

    /// From now on, event streams stop after their first text delta until
    /// [`FakeLlm::release_streams`].
    pub fn hold_streams(&self) {
        self.shared.hold.send_replace(true);
    }

    /// Lets held event streams go on.
    pub fn release_streams(&self) {
        self.shared.hold.send_replace(false);
    }

    /// `http://<addr>`: the Anthropic base URL, and the root of the
    /// server's paths.
    pub fn root_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The OpenAI base URL, up to and including `/v1`.
    pub fn openai_base(&self) -> String {
        format!("{}/v1", self.root_url())
    }

    /// The Anthropic base URL (the client appends `/v1/messages`).
    pub fn anthropic_base(&self) -> String {
        self.root_url()
    }

    /// The requests received so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().expect("lock").clone()
    }

    /// Most requests ever in flight at once.
    pub fn peak_concurrency(&self) -> usize {
        self.shared.load.lock().expect("lock").peak()
    }

    /// Most requests ever in flight at once for one conversation (told
    /// apart by its first message after the system prompt).
    pub fn peak_concurrency_per_session(&self) -> usize {
        self.shared.load.lock().expect("lock").peak_per_key()
    }
}
