//! `switchboard bench`: the gateway's own cost per turn.
//!
//! N concurrent sessions each run M turns through the real session service,
//! runner, agent loop and store (a fresh SQLite file, or the database given
//! with `--database-url`), against an instant in-process model that asks for
//! one tool call (`current_time`) and then answers. Because the model takes
//! no time, a turn's latency is the gateway's overhead. Reports turns/s,
//! overhead p50/p99, CPU time per turn, idle and peak RSS, the first turn's
//! latency after start, one store round trip's cost, and what a turn sends to
//! the database (statements, round trips, commits: the store's own counts,
//! see `StoreStats`). With `--streamed` each measured turn is followed live,
//! as a streamed API request follows it (the model called streaming, its
//! text published as it arrives), and the time to the reply's first text
//! delta is reported too. With `--http` the measured turns go through the
//! real HTTP server (`POST /v1/chat/completions` on a kept-alive loopback
//! connection per session, `stream: true` with `--streamed`), so a turn's
//! latency includes the API and the socket; streamed, the first text is the
//! first content delta the client reads.

pub mod tasks;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use switchboard_contract::{
    AccountId, ChatId, ChatKind, EventId, InboundMessage, PlatformName, Sender, UserId,
};

use crate::agent::cache::ProviderFactory;
use crate::agent::live::LiveEvent;
use crate::config::Settings;
use crate::domain::{ChatMessage, LocalPlatform, StopReason, ToolCall, Usage};
use crate::gateway::Gateway;
use crate::llm::{
    LlmError, ModelRequest, ModelResponse, OnStream, Provider, ProviderKind, StreamEvent,
};
use crate::session::service::SubmitOptions;
use crate::store::StoreStats;

/// Measured turns per session before moving to the next, so the history
/// stays near the requested length.
const TURNS_PER_SESSION: usize = 10;

/// Benchmark shape.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchOptions {
    /// Sessions running at once.
    #[arg(long, default_value_t = 8)]
    pub sessions: usize,
    /// Measured turns per concurrent session.
    #[arg(long, default_value_t = 250)]
    pub turns: usize,
    /// Turns of history the measured turns see, on average.
    #[arg(long, default_value_t = 20)]
    pub history: usize,
    /// The database to run in (`postgres://…`, `sqlite://…`) instead of a
    /// fresh temporary SQLite file. Its tables are created if missing; the
    /// benchmark's sessions are added to whatever it holds.
    #[arg(long)]
    pub database_url: Option<String>,
    /// Whether each commit waits for its flush to disk (`database.flush_commits`);
    /// unset keeps the engine's default.
    #[arg(long)]
    pub flush_commits: Option<bool>,
    /// Follow each measured turn live, as a streamed API request does: the
    /// model is called streaming and the reply's text published as it
    /// arrives.
    #[arg(long)]
    pub streamed: bool,
    /// Send the measured turns (and their sessions' earlier turns) through
    /// the HTTP API on a loopback socket instead of straight to the session
    /// service.
    #[arg(long)]
    pub http: bool,
}

/// What the benchmark measured.
#[derive(Debug, Clone)]
pub struct BenchReport {
    pub options: BenchOptions,
    pub turns: usize,
    pub elapsed: Duration,
    pub p50: Duration,
    pub p99: Duration,
    pub cpu_per_turn: Duration,
    /// Of which in user space and in the kernel.
    pub user_cpu_per_turn: Duration,
    pub system_cpu_per_turn: Duration,
    /// Read and write system calls (`read`, `pread64`, `write`,
    /// `pwrite64`… as `/proc/self/io` counts them) per measured turn; `None`
    /// where the file is missing.
    pub io_calls_per_turn: Option<(f64, f64)>,
    pub first_turn: Duration,
    pub idle_rss_kib: u64,
    pub peak_rss_kib: u64,
    /// One statement's round trip to the database (`SELECT 1` on the
    /// writer), wall time and CPU: the floor under every store call.
    pub round_trip: Duration,
    pub round_trip_cpu: Duration,
    /// Which database ran the benchmark ("SQLite" or "PostgreSQL").
    pub backend: &'static str,
    /// What the measured turns sent to the database, in all.
    pub traffic: StoreStats,
    /// The WAL during the measured turns (SQLite files only).
    pub wal: Option<WalFigures>,
    /// With `--streamed`: from submitting a message to the first delta of
    /// its reply's text, p50 and p99.
    pub first_text: Option<(Duration, Duration)>,
}

/// The SQLite WAL during the measured turns.
#[derive(Debug, Clone, Copy)]
pub struct WalFigures {
    /// The WAL file's size when the last turn ended.
    pub end_bytes: u64,
    /// Its largest size during the run (sampled every few milliseconds).
    pub peak_bytes: u64,
    /// Frames appended to the WAL by the measured turns.
    pub frames: u64,
    /// Bytes per frame (page size plus frame header).
    pub frame_bytes: u64,
    /// Times the log was restarted because it had passed its size limit.
    pub restarts: u64,
}

/// How often the benchmark samples the WAL file's size.
const WAL_SAMPLE: Duration = Duration::from_millis(2);

/// Long enough for the background checkpointer to have counted every frame
/// written before it (it counts at each checkpoint, every 250 ms).
const WAL_SETTLE: Duration = Duration::from_millis(400);

/// Why the benchmark failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("setup failed: {0}")]
    Setup(String),
    #[error("a turn failed: {0}")]
    Turn(String),
}

/// Runs the benchmark in a fresh temporary SQLite database, or in the one
/// `options` names.
///
/// # Errors
/// Setup or a turn failing.
pub async fn run(options: &BenchOptions) -> Result<BenchReport, BenchError> {
    let dir = tempfile_dir()?;
    let mut settings = Settings::default();
    settings.database.url = settings_url(options, &dir);
    settings.database.flush_commits = options.flush_commits;
    // Chats (and so message ids) of their own, so that a second run in the
    // same database is not taken for redelivered messages.
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let run_id = run_id.get(..8).unwrap_or(&run_id).to_owned();
    settings.agent.tools = vec!["current_time".to_owned()];
    settings.runner.max_concurrent_turns =
        std::num::NonZeroUsize::new(options.sessions).unwrap_or(std::num::NonZeroUsize::MIN);
    // Each measured message is a turn of its own, started at once: the
    // burst window's wait is not the gateway's cost.
    settings.sessions.burst_window = std::time::Duration::from_millis(0);
    // The `--http` server takes any caller (it listens on loopback only).
    settings.api.keys_env = "SWITCHBOARD_BENCH_NO_API_KEYS".to_owned();
    let factory: ProviderFactory = Arc::new(|_| Arc::new(InstantModel) as Arc<dyn Provider>);
    let started = Instant::now();
    let gateway = Arc::new(
        Gateway::build_with(settings, factory)
            .await
            .map_err(|err| BenchError::Setup(err.to_string()))?,
    );
    // As `serve` does: a caller whose turn was answered before it began to
    // wait (an instant model can finish a turn in that gap) gets its reply
    // from the database, instead of waiting for good.
    let polling = tokio_util::sync::CancellationToken::new();
    let poller = gateway.service.runner().spawn_reply_poller(polling.clone());
    let idle_rss_kib = rss_kib("VmRSS:");
    let first_turn = turn(&gateway, &format!("{run_id}-first"), 0, false)
        .await?
        .total;
    let _startup = started.elapsed();

    // Each worker spreads its turns over several sessions, TURNS_PER_SESSION
    // each, seeded so that the measured turns see `history` turns of history
    // on average (a session's history grows by one turn per turn).
    let per_worker = options.turns.div_ceil(TURNS_PER_SESSION);
    let seeded = options.history.saturating_sub(TURNS_PER_SESSION / 2);
    let server = if options.http {
        Some(HttpServer::start(&gateway).await?)
    } else {
        None
    };
    let mut drivers: Vec<Driver> = (0..options.sessions)
        .map(|_| Driver::new(&gateway, server.as_ref()))
        .collect();
    let warm = drivers.iter_mut().enumerate().map(|(worker, driver)| {
        let run_id = &run_id;
        async move {
            for session in 0..per_worker {
                for index in 0..seeded {
                    driver
                        .turn(&format!("{run_id}-w{worker}-s{session}"), index, false)
                        .await?;
                }
            }
            Ok::<(), BenchError>(())
        }
    });
    for result in futures::future::join_all(warm).await {
        result?;
    }

    let wal_path = wal_path(&settings_url(options, &dir));
    let wal_before = match gateway.store.wal_stats() {
        Some(_) => {
            tokio::time::sleep(WAL_SETTLE).await;
            gateway.store.wal_stats()
        }
        None => None,
    };
    let sampling = tokio_util::sync::CancellationToken::new();
    let sampler = wal_path.clone().map(|path| {
        let stop = sampling.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            while !stop.is_cancelled() {
                peak = peak.max(std::fs::metadata(&path).map_or(0, |m| m.len()));
                tokio::time::sleep(WAL_SAMPLE).await;
            }
            peak
        })
    });
    let traffic_before = gateway.store.stats();
    let io_before = io_calls();
    let (user_before, system_before) = cpu_times();
    let cpu_before = cpu_time();
    let wall = Instant::now();
    let turns = options.turns;
    let streamed = options.streamed;
    let runs = drivers.into_iter().enumerate().map(|(worker, mut driver)| {
        let run_id = run_id.clone();
        tokio::spawn(async move {
            let mut timings = Vec::with_capacity(turns);
            for index in 0..turns {
                let chat = format!("{run_id}-w{worker}-s{}", index / TURNS_PER_SESSION);
                let event = seeded + index % TURNS_PER_SESSION;
                timings.push(driver.turn(&chat, event, streamed).await?);
            }
            Ok::<Vec<Timed>, BenchError>(timings)
        })
    });
    let mut latencies = Vec::new();
    let mut first_texts = Vec::new();
    for handle in futures::future::join_all(runs).await {
        let measured = handle.map_err(|err| BenchError::Turn(err.to_string()))??;
        for timed in measured {
            latencies.push(timed.total);
            first_texts.extend(timed.first_text);
        }
    }
    let elapsed = wall.elapsed();
    let cpu = cpu_time().saturating_sub(cpu_before);
    let (user_after, system_after) = cpu_times();
    let io_after = io_calls();
    let traffic = gateway.store.stats().since(traffic_before);
    sampling.cancel();
    let end_bytes = wal_path
        .as_ref()
        .map_or(0, |path| std::fs::metadata(path).map_or(0, |m| m.len()));
    let peak_bytes = match sampler {
        Some(task) => task.await.unwrap_or(0).max(end_bytes),
        None => 0,
    };
    let wal = match wal_before {
        Some(before) => {
            tokio::time::sleep(WAL_SETTLE).await;
            gateway.store.wal_stats().map(|after| WalFigures {
                end_bytes,
                peak_bytes,
                frames: after.frames.saturating_sub(before.frames),
                frame_bytes: after.frame_bytes,
                restarts: after.restarts.saturating_sub(before.restarts),
            })
        }
        None => None,
    };
    latencies.sort();
    first_texts.sort();
    let turns = latencies.len();
    let percentile_of = |sorted: &[Duration], p: f64| {
        let index = ((sorted.len() as f64 * p).ceil() as usize).saturating_sub(1);
        sorted.get(index).copied().unwrap_or_default()
    };
    let percentile = |p: f64| percentile_of(&latencies, p);
    let first_text = (!first_texts.is_empty()).then(|| {
        (
            percentile_of(&first_texts, 0.50),
            percentile_of(&first_texts, 0.99),
        )
    });
    let (round_trip, round_trip_cpu) = round_trip(&gateway).await?;
    let report = BenchReport {
        options: options.clone(),
        turns,
        elapsed,
        p50: percentile(0.50),
        p99: percentile(0.99),
        cpu_per_turn: cpu / u32::try_from(turns.max(1)).unwrap_or(u32::MAX),
        user_cpu_per_turn: user_after.saturating_sub(user_before)
            / u32::try_from(turns.max(1)).unwrap_or(u32::MAX),
        system_cpu_per_turn: system_after.saturating_sub(system_before)
            / u32::try_from(turns.max(1)).unwrap_or(u32::MAX),
        io_calls_per_turn: io_before.zip(io_after).map(|((r0, w0), (r1, w1))| {
            let turns = turns.max(1) as f64;
            (
                r1.saturating_sub(r0) as f64 / turns,
                w1.saturating_sub(w0) as f64 / turns,
            )
        }),
        first_turn,
        idle_rss_kib,
        peak_rss_kib: rss_kib("VmHWM:"),
        round_trip,
        round_trip_cpu,
        backend: if gateway.store.is_shared() {
            "PostgreSQL"
        } else {
            "SQLite"
        },
        traffic,
        wal,
        first_text,
    };
    if let Some(server) = server {
        server.stop().await;
    }
    polling.cancel();
    let _ = poller.await;
    gateway.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(report)
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.elapsed.as_secs_f64().max(f64::EPSILON);
        writeln!(
            f,
            "switchboard bench: {} sessions x {} turns (history {} turns), one tool call per turn, {}{}{}",
            self.options.sessions,
            self.options.turns,
            self.options.history,
            self.backend,
            match self.options.flush_commits {
                Some(true) => ", every commit flushed",
                Some(false) => ", commits not flushed",
                None => "",
            },
            match (self.options.streamed, self.options.http) {
                (true, true) => ", streamed over HTTP",
                (false, true) => ", over HTTP",
                (true, false) => ", streamed",
                (false, false) => "",
            }
        )?;
        writeln!(f, "  turns/s            {:.0}", self.turns as f64 / secs)?;
        writeln!(f, "  overhead p50       {:.3} ms", ms(self.p50))?;
        writeln!(f, "  overhead p99       {:.3} ms", ms(self.p99))?;
        if let Some((p50, p99)) = self.first_text {
            writeln!(
                f,
                "  first text         {:.3} ms p50, {:.3} ms p99",
                ms(p50),
                ms(p99)
            )?;
        }
        writeln!(
            f,
            "  CPU per turn       {:.3} ms ({:.3} user, {:.3} system)",
            ms(self.cpu_per_turn),
            ms(self.user_cpu_per_turn),
            ms(self.system_cpu_per_turn)
        )?;
        if let Some((reads, writes)) = self.io_calls_per_turn {
            writeln!(
                f,
                "  I/O calls per turn {reads:.1} reads, {writes:.1} writes"
            )?;
        }
        writeln!(f, "  first turn         {:.3} ms", ms(self.first_turn))?;
        let per_turn = |count: u64| count as f64 / self.turns.max(1) as f64;
        writeln!(
            f,
            "  per turn           {:.1} round trips, {:.1} statements, {:.1} commits",
            per_turn(self.traffic.round_trips),
            per_turn(self.traffic.statements),
            per_turn(self.traffic.commits)
        )?;
        if let Some(wal) = &self.wal {
            let frames = per_turn(wal.frames);
            writeln!(
                f,
                "  WAL per turn       {frames:.1} frames, {:.1} KiB",
                frames * wal.frame_bytes as f64 / 1024.0
            )?;
            writeln!(
                f,
                "  WAL file           {:.1} MiB at the end, {:.1} MiB peak, {} restarts",
                mib(wal.end_bytes),
                mib(wal.peak_bytes),
                wal.restarts
            )?;
        }
        writeln!(
            f,
            "  RSS idle           {:.1} MiB",
            self.idle_rss_kib as f64 / 1024.0
        )?;
        writeln!(
            f,
            "  RSS peak           {:.1} MiB",
            self.peak_rss_kib as f64 / 1024.0
        )?;
        write!(
            f,
            "  store round trip   {:.1} µs ({:.1} µs CPU)",
            self.round_trip.as_secs_f64() * 1e6,
            self.round_trip_cpu.as_secs_f64() * 1e6
        )
    }
}

/// Statements timed for the round-trip figure.
const ROUND_TRIPS: u32 = 2000;

/// The mean wall and CPU time of one `SELECT 1` on the store's writer (a
/// pooled connection on PostgreSQL).
async fn round_trip(gateway: &Gateway) -> Result<(Duration, Duration), BenchError> {
    let store = &gateway.store;
    let cpu_before = cpu_time();
    let started = Instant::now();
    for _ in 0..ROUND_TRIPS {
        let mut conn = store
            .conn()
            .await
            .map_err(|err| BenchError::Turn(err.to_string()))?;
        sqlx::query("SELECT 1")
            .execute(&mut *conn)
            .await
            .map_err(|err| BenchError::Turn(err.to_string()))?;
    }
    Ok((
        started.elapsed() / ROUND_TRIPS,
        cpu_time().saturating_sub(cpu_before) / ROUND_TRIPS,
    ))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// The database URL the benchmark runs in.
fn settings_url(options: &BenchOptions, dir: &std::path::Path) -> String {
    match &options.database_url {
        Some(url) => url.clone(),
        None => format!("sqlite://{}/bench.db", dir.display()),
    }
}

/// The WAL file of a SQLite file database; `None` for anything else.
fn wal_path(url: &str) -> Option<std::path::PathBuf> {
    let rest = url.strip_prefix("sqlite:")?.trim_start_matches("//");
    let path = rest.split_once('?').map_or(rest, |(path, _)| path);
    (!path.is_empty() && !path.starts_with(":memory:"))
        .then(|| std::path::PathBuf::from(format!("{path}-wal")))
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// The gateway's HTTP server on a loopback port, as `serve` runs it.
struct HttpServer {
    base: String,
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl HttpServer {
    async fn start(gateway: &Arc<Gateway>) -> Result<Self, BenchError> {
        let setup = |err: std::io::Error| BenchError::Setup(err.to_string());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(setup)?;
        let base = format!("http://{}/v1", listener.local_addr().map_err(setup)?);
        let stop = tokio_util::sync::CancellationToken::new();
        let (server, stopped) = (Arc::clone(gateway), stop.clone());
        let task = tokio::spawn(async move {
            let stopping = async move { stopped.cancelled().await };
            if let Err(err) =
                crate::server::run_server(&server, listener, axum::Router::new(), stopping).await
            {
                tracing::error!(error = %err, "the benchmark's HTTP server failed");
            }
        });
        Ok(Self { base, stop, task })
    }

    async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// Sends one worker's turns: to the session service, or over HTTP (one
/// kept-alive connection, each chat's session named by `X-Session-Id` after
/// its first turn).
enum Driver {
    InProcess(Arc<Gateway>),
    Http {
        client: reqwest::Client,
        base: String,
        sessions: std::collections::HashMap<String, String>,
    },
}

impl Driver {
    fn new(gateway: &Arc<Gateway>, server: Option<&HttpServer>) -> Self {
        match server {
            None => Self::InProcess(Arc::clone(gateway)),
            Some(server) => Self::Http {
                client: reqwest::Client::new(),
                base: server.base.clone(),
                sessions: std::collections::HashMap::new(),
            },
        }
    }

    async fn turn(
        &mut self,
        chat: &str,
        index: usize,
        streamed: bool,
    ) -> Result<Timed, BenchError> {
        match self {
            Self::InProcess(gateway) => turn(gateway, chat, index, streamed).await,
            Self::Http {
                client,
                base,
                sessions,
            } => {
                let session = sessions.get(chat).cloned();
                let (timed, session) =
                    http_turn(client, base, session, chat, index, streamed).await?;
                sessions.insert(chat.to_owned(), session);
                Ok(timed)
            }
        }
    }
}

/// One turn through the HTTP API; returns its timing and its session.
async fn http_turn(
    client: &reqwest::Client,
    base: &str,
    session: Option<String>,
    chat: &str,
    index: usize,
    streamed: bool,
) -> Result<(Timed, String), BenchError> {
    let failed = |err: reqwest::Error| BenchError::Turn(err.to_string());
    let body = serde_json::json!({
        "stream": streamed,
        "messages": [{"role": "user", "content": format!("What time is it? ({chat}, message {index})")}],
    });
    let started = Instant::now();
    let mut request = client.post(format!("{base}/chat/completions")).json(&body);
    if let Some(session) = &session {
        request = request.header("X-Session-Id", session);
    }
    let mut response = request.send().await.map_err(failed)?;
    if !response.status().is_success() {
        return Err(BenchError::Turn(format!("HTTP {}", response.status())));
    }
    let session = response
        .headers()
        .get("x-session-id")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| BenchError::Turn("no X-Session-Id".to_owned()))?;
    let mut first_text = None;
    let mut received = Vec::new();
    while let Some(piece) = response.chunk().await.map_err(failed)? {
        received.extend_from_slice(&piece);
        if streamed && first_text.is_none() && has_text_delta(&received) {
            first_text = Some(started.elapsed());
        }
    }
    let total = started.elapsed();
    let text = String::from_utf8_lossy(&received);
    let complete = if streamed {
        text.contains("data: [DONE]") && !text.contains("\"error\"")
    } else {
        text.contains("\"chat.completion\"")
    };
    if !complete {
        return Err(BenchError::Turn(format!("unexpected answer: {text}")));
    }
    Ok((Timed { total, first_text }, session))
}

/// Whether a streamed body holds a chunk with text (not the opening one,
/// whose content is empty).
fn has_text_delta(body: &[u8]) -> bool {
    const MARK: &[u8] = b"\"delta\":{\"content\":\"";
    body.windows(MARK.len() + 1)
        .any(|window| window.starts_with(MARK) && window[MARK.len()] != b'"')
}

/// How long one turn took, and (followed live) until its first text.
struct Timed {
    total: Duration,
    first_text: Option<Duration>,
}

/// One turn through the session service, followed live when `streamed`.
async fn turn(
    gateway: &Gateway,
    chat: &str,
    index: usize,
    streamed: bool,
) -> Result<Timed, BenchError> {
    let message = message(chat, index).map_err(BenchError::Setup)?;
    let started = Instant::now();
    let submission = gateway
        .service
        .submit(
            message,
            SubmitOptions {
                session: None,
                wait: true,
                // Each benchmark chat is its own session.
                own_chat: true,
                model: None,
                live: streamed,
                turn: Default::default(),
            },
        )
        .await
        .map_err(|err| BenchError::Turn(err.to_string()))?;
    let receiver = submission
        .reply
        .ok_or_else(|| BenchError::Turn("message not accepted".to_owned()))?;
    let mut first_text = None;
    if let Some(mut live) = submission.live {
        while let Some(event) = live.next().await {
            if matches!(event, LiveEvent::Text(_)) {
                first_text = Some(started.elapsed());
                break;
            }
        }
    }
    receiver
        .await
        .map_err(|_| BenchError::Turn("no reply".to_owned()))?;
    Ok(Timed {
        total: started.elapsed(),
        first_text,
    })
}

fn message(chat: &str, index: usize) -> Result<InboundMessage, String> {
    let err = |e: switchboard_contract::IdError| e.to_string();
    Ok(InboundMessage {
        platform: PlatformName::parse(LocalPlatform::Api.name()).map_err(err)?,
        account: AccountId::parse("bench").map_err(err)?,
        event_id: EventId::parse(format!("{chat}-{index}")).map_err(err)?,
        chat: ChatId::parse(chat).map_err(err)?,
        chat_kind: ChatKind::Direct,
        thread: None,
        sender: Sender {
            // One person per chat: a shared sender would share one DM session.
            id: UserId::parse(chat).map_err(err)?,
            display_name: None,
            is_bot: false,
        },
        text: format!("What time is it? (message {index})"),
        mentions_bot: true,
        reply_to: None,
        message_id: None,
        attachments: Vec::new(),
    })
}

/// A model that answers instantly: a tool call for a new user message, then
/// a short answer once the tool result is in.
struct InstantModel;

#[async_trait]
impl Provider for InstantModel {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Openai
    }

    async fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelResponse, LlmError> {
        let asked = matches!(request.messages.last(), Some(ChatMessage::User { .. }));
        let tool_calls = if asked {
            vec![ToolCall {
                id: format!("call_{}", request.messages.len()),
                name: "current_time".to_owned(),
                arguments: "{}".to_owned(),
            }]
        } else {
            Vec::new()
        };
        Ok(ModelResponse {
            content: (!asked).then(|| "It is now.".to_owned()),
            reasoning: None,
            stop_reason: if asked {
                StopReason::ToolUse
            } else {
                StopReason::EndTurn
            },
            finish_reason: if asked { "tool_calls" } else { "stop" }.to_owned(),
            tool_calls,
            usage: Usage {
                input_tokens: 100,
                output_tokens: 10,
                cache_read_tokens: 90,
                cache_write_tokens: 0,
                cache_write_1h_tokens: 0,
            },
            model: request.model.to_owned(),
            request_id: None,
        })
    }

    /// The same answer, its text passed on in three pieces.
    async fn stream(
        &self,
        request: &ModelRequest<'_>,
        on: OnStream<'_>,
    ) -> Result<ModelResponse, LlmError> {
        let response = self.complete(request).await?;
        if let Some(text) = response.content.as_deref() {
            let third = text.len() / 3;
            for piece in [&text[..third], &text[third..2 * third], &text[2 * third..]] {
                on(StreamEvent::Text(piece));
            }
        }
        Ok(response)
    }
}

fn tempfile_dir() -> Result<std::path::PathBuf, BenchError> {
    let dir = std::env::temp_dir().join(format!("switchboard-bench-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).map_err(|err| BenchError::Setup(err.to_string()))?;
    Ok(dir)
}

/// User plus system CPU time of this process.
fn cpu_time() -> Duration {
    let (user, system) = cpu_times();
    user + system
}

/// The read and write system calls this process made (`syscr`, `syscw` of
/// `/proc/self/io`); `None` where it is not available.
fn io_calls() -> Option<(u64, u64)> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    let field = |name: &str| {
        io.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|value| value.trim().parse().ok())
    };
    Some((field("syscr:")?, field("syscw:")?))
}

/// User and system CPU time of this process.
fn cpu_times() -> (Duration, Duration) {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut usage = unsafe { std::mem::zeroed::<libc::rusage>() };
    // SAFETY: RUSAGE_SELF is valid and `usage` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &raw mut usage) } != 0 {
        return (Duration::ZERO, Duration::ZERO);
    }
    let to_duration = |tv: libc::timeval| {
        Duration::from_secs(u64::try_from(tv.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(tv.tv_usec).unwrap_or(0))
    };
    (to_duration(usage.ru_utime), to_duration(usage.ru_stime))
}

/// A memory figure from /proc/self/status in KiB (0 where unavailable).
fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with(field))
                .and_then(|line| line.split_whitespace().nth(1))
                .and_then(|value| value.parse().ok())
        })
        .unwrap_or(0)
}
