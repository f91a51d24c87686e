//! The test harness: the fake model server (from
//! `switchboard_test_support::model`, re-exported here with the scripts the
//! gateway's tests give it), a `TestApp` running the real gateway
//! (HTTP server included) on a fresh database (a SQLite file, or a fresh
//! PostgreSQL database when `TEST_DATABASE_URL` is set), the settings that
//! point the gateway at the shared fake platforms, and the real binary.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{Value, json};
use switchboard::config::Settings;
use switchboard::domain::SessionId;
use switchboard::gateway::Gateway;
use switchboard::platforms::Platforms;
use switchboard::store::{SessionRow, StoredMessage, WireEntry};
use switchboard_telegram::TelegramSettings;
use switchboard_test_support::eventually;
pub use switchboard_test_support::model::{
    FakeLlm, Recorded, Reply, assert_prefix_holds, last_is_tool_result, last_user_content,
    last_user_text,
};
use switchboard_test_support::postgres::TestDatabase;
use switchboard_test_support::telegram::{self, FakeTelegram};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The variable holding the fake Telegram bot's token, set once per test
/// process.
const TELEGRAM_TOKEN_ENV: &str = "SB_TEST_TG_TOKEN";

/// The model's answer to the user message `turn N` in the scripts that
/// call a tool every second turn: on even `turn`, a call of `tool` with
/// `arguments` (id `call_N`); on odd, the text `reply N`.
pub fn tool_on_even_turns(turn: usize, tool: &str, arguments: String) -> Reply {
    if turn.is_multiple_of(2) {
        Reply::Tools(vec![(format!("call_{turn}"), tool.to_owned(), arguments)])
    } else {
        Reply::Text(format!("reply {turn}"))
    }
}

/// A model that asks for the calculator forever, with different arguments
/// each time (so no-progress detection stays out of the way).
pub fn endless_calculator(body: &Value) -> Reply {
    let n = body["messages"].as_array().map_or(0, Vec::len);
    Reply::Tools(vec![(
        format!("c{n}"),
        "calculator".to_owned(),
        format!("{{\"expression\":\"{n}*2\"}}"),
    )])
}

/// A model that asks for the same calculation (`2+2`) forever, each call
/// with an id of its own.
pub fn same_calculation(body: &Value) -> Reply {
    let n = body["messages"].as_array().map_or(0, Vec::len);
    Reply::Tools(vec![(
        format!("c{n}"),
        "calculator".to_owned(),
        r#"{"expression":"2+2"}"#.to_owned(),
    )])
}

/// Whether a model request comes from a sub-agent (`delegate`).
pub fn is_sub_agent(body: &Value) -> bool {
    body["messages"][0]["content"]
        .as_str()
        .is_some_and(|s| s.starts_with("You are a sub-agent"))
}

/// The top agent delegates a sub-task (not idempotent) and computes
/// something (idempotent), then answers naming its job; the sub-agent just
/// answers.
pub fn delegate_and_calculate(body: &Value) -> Reply {
    if is_sub_agent(body) {
        return Reply::Text("sub-task done".to_owned());
    }
    let job = last_user_text(body);
    if last_is_tool_result(body) {
        return Reply::Text(format!("done: {job}"));
    }
    Reply::Tools(vec![
        (
            format!("d-{job}"),
            "delegate".to_owned(),
            json!({"task": format!("sub-task for {job}")}).to_string(),
        ),
        (
            format!("c-{job}"),
            "calculator".to_owned(),
            r#"{"expression":"6*7"}"#.to_owned(),
        ),
    ])
}

/// A fresh database for one test: a new PostgreSQL database when
/// `TEST_DATABASE_URL` is set (dropped again with this guard), else a SQLite
/// file in `dir`. Reads as its URL.
pub struct FreshDatabase {
    url: String,
    _postgres: Option<TestDatabase>,
}

impl std::ops::Deref for FreshDatabase {
    type Target = str;
    fn deref(&self) -> &str {
        &self.url
    }
}

impl std::fmt::Display for FreshDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.url)
    }
}

/// A fresh database (see [`FreshDatabase`]); keep it until the test is done.
pub async fn fresh_database(dir: &std::path::Path) -> FreshDatabase {
    match std::env::var("TEST_DATABASE_URL") {
        Ok(base) if !base.is_empty() => {
            let database = TestDatabase::create(&base).await;
            FreshDatabase {
                url: database.url().to_owned(),
                _postgres: Some(database),
            }
        }
        _ => FreshDatabase {
            url: format!("sqlite://{}/switchboard.db", dir.display()),
            _postgres: None,
        },
    }
}

/// The databases of [`test_settings`], by URL, until the [`TestApp`] started
/// with those settings takes theirs.
static UNCLAIMED: Mutex<Vec<FreshDatabase>> = Mutex::new(Vec::new());

/// The database guard of settings made by [`test_settings`], if any.
fn claim_database(url: &str) -> Option<FreshDatabase> {
    let mut unclaimed = UNCLAIMED.lock().expect("lock");
    let index = unclaimed.iter().position(|database| database.url == url)?;
    Some(unclaimed.swap_remove(index))
}

/// Takes the database guard of settings made by [`test_settings`], so that
/// the database outlives the apps started with them (a restart test); the
/// database goes when the guard is dropped.
pub fn hold_database(settings: &Settings) -> Option<FreshDatabase> {
    claim_database(&settings.database.url)
}

/// The gateway running on 127.0.0.1 with its HTTP API.
pub struct TestApp {
    pub addr: SocketAddr,
    pub http: reqwest::Client,
    pub gateway: Arc<Gateway>,
    /// Keeps the SQLite file (and anything a test puts there) alive.
    _dir: tempfile::TempDir,
    /// Drops a PostgreSQL test database with the app.
    _database: Option<FreshDatabase>,
    stop: CancellationToken,
    platforms: Platforms,
}

impl TestApp {
    /// Starts the gateway against `llm` (OpenAI wire format).
    pub async fn spawn(llm: &FakeLlm) -> Self {
        Self::spawn_with(llm, |_| {}).await
    }

    /// Starts the gateway after `configure` adjusts the settings.
    pub async fn spawn_with(llm: &FakeLlm, configure: impl FnOnce(&mut Settings)) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut settings = test_settings(llm, &dir).await;
        configure(&mut settings);
        Self::start(settings, dir).await
    }

    /// Starts the gateway with exactly these settings, and waits until its
    /// platform adapters are up and its MCP servers have started (or failed
    /// to, within their start timeout), so the first session is offered
    /// their tools.
    pub async fn start(settings: Settings, dir: tempfile::TempDir) -> Self {
        let startup_timeout = settings.mcp.startup_timeout;
        let app = Self::start_unready(settings, dir).await;
        let status = app.gateway.platform_status.clone();
        eventually("the platform adapters to be up", || {
            std::future::ready(status.all_ready())
        })
        .await;
        if let Some(mcp) = app.gateway.tools.mcp() {
            mcp.wait_started(startup_timeout).await;
        }
        app
    }

    /// Like [`TestApp::spawn_with`], without waiting for the platform
    /// adapters to come up.
    pub async fn spawn_unready(llm: &FakeLlm, configure: impl FnOnce(&mut Settings)) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut settings = test_settings(llm, &dir).await;
        configure(&mut settings);
        Self::start_unready(settings, dir).await
    }

    /// Starts the gateway with exactly these settings; its platform
    /// adapters come up in the background.
    pub async fn start_unready(settings: Settings, dir: tempfile::TempDir) -> Self {
        let database = claim_database(&settings.database.url);
        let gateway = Arc::new(Gateway::build(settings).await.expect("gateway builds"));
        let mut platforms = switchboard::server::start_platforms(&gateway, &gateway.shutdown);
        let routes = std::mem::take(&mut platforms.routes);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let stop = CancellationToken::new();
        // The scheduler runs as under `serve` (the other background loops,
        // sweeps and pruning, are driven by the tests that need them).
        gateway.scheduler().spawn(stop.clone());
        let server_gateway = Arc::clone(&gateway);
        let server_stop = stop.clone();
        tokio::spawn(async move {
            switchboard::server::run_server(
                &server_gateway,
                listener,
                routes,
                server_stop.cancelled_owned(),
            )
            .await
            .expect("server runs");
        });
        Self {
            addr,
            http: reqwest::Client::new(),
            gateway,
            _dir: dir,
            _database: database,
            stop,
            platforms,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Sends one user message; returns the status, the session id header and
    /// the JSON body.
    pub async fn chat(
        &self,
        session: Option<&str>,
        text: &str,
    ) -> (StatusCode, Option<String>, Value) {
        self.chat_as(None, session, text).await
    }

    /// Like [`TestApp::chat`], from the API user `user` (the request's
    /// `user` field) when given.
    pub async fn chat_as(
        &self,
        user: Option<&str>,
        session: Option<&str>,
        text: &str,
    ) -> (StatusCode, Option<String>, Value) {
        // No `model`: the session's stands (a `/model` switch holds).
        let mut body = json!({
            "messages": [{"role": "user", "content": text}]
        });
        if let Some(user) = user {
            body["user"] = json!(user);
        }
        let mut request = self.http.post(self.url("/v1/chat/completions")).json(&body);
        if let Some(session) = session {
            request = request.header("X-Session-Id", session);
        }
        let response = request.send().await.expect("request sent");
        let status = StatusCode::from_u16(response.status().as_u16()).expect("status");
        let session = response
            .headers()
            .get("x-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response.json().await.unwrap_or(Value::Null);
        (status, session, body)
    }

    /// Sends one message and returns (session id, reply text), asserting 200,
    /// or for a turn that failed (an HTTP error naming its turn) the
    /// error's message: the text a chat platform would show.
    pub async fn say(&self, session: Option<&str>, text: &str) -> (String, String) {
        answered(self.chat(session, text).await)
    }

    /// Sends one message as the API user `user` (no session header: the
    /// user's own conversation) and returns (session id, reply text),
    /// asserting 200 (or a failed turn, as [`TestApp::say`]).
    pub async fn say_as(&self, user: &str, text: &str) -> (String, String) {
        answered(self.chat_as(Some(user), None, text).await)
    }

    /// How the latest non-command turn ended (`inbound.outcome`).
    pub async fn outcome_of_last_turn(&self) -> String {
        sqlx::query_scalar::<_, Option<String>>(
            "SELECT outcome FROM inbound WHERE status <> 'command' ORDER BY id DESC LIMIT 1",
        )
        .fetch_one(&mut *self.gateway.store.conn().await.expect("conn"))
        .await
        .expect("row")
        .unwrap_or_default()
    }

    /// The stored session `id`, which must exist.
    pub async fn session_row(&self, id: &str) -> SessionRow {
        self.gateway
            .store
            .sessions()
            .get(&session_id(id))
            .await
            .expect("db")
            .expect("row")
    }

    /// The session's main history as stored, internal fields included.
    pub async fn stored_history(&self, session: &str) -> Vec<StoredMessage> {
        self.gateway
            .store
            .transcript()
            .history(&session_id(session), &switchboard::domain::Scope::top())
            .await
            .expect("history")
    }

    /// The session's main history as it goes on the wire.
    pub async fn wire_history(&self, session: &str) -> Vec<WireEntry> {
        self.gateway
            .store
            .transcript()
            .wire_history(&session_id(session), &switchboard::domain::Scope::top())
            .await
            .expect("history")
    }

    /// Counts rows in a table.
    pub async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar::<_, i64>(&format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(&mut *self.gateway.store.conn().await.expect("conn"))
            .await
            .expect("count")
    }

    pub async fn stop(self) {
        self.stop.cancel();
        self.gateway.shutdown.cancel();
        self.platforms.stop(Duration::from_secs(5)).await;
        self.gateway.shutdown().await;
    }
}

/// (session id, reply text) of a completion that must have succeeded.
fn answered((status, session, body): (StatusCode, Option<String>, Value)) -> (String, String) {
    let session = session.expect("session header");
    if !status.is_success() && body["error"]["turn"].is_i64() {
        // A turn that failed: its message is the text a chat platform shows.
        let message = body["error"]["message"].as_str().expect("message");
        return (session, message.to_owned());
    }
    assert_eq!(status, StatusCode::OK, "body: {body}");
    (session, reply_text(&body))
}

/// The assistant's text in a chat completion.
fn reply_text(body: &Value) -> String {
    body["choices"][0]["message"]["content"]
        .as_str()
        .expect("reply text")
        .to_owned()
}

/// Waits until `app` has recorded an inbound message.
pub async fn eventually_recorded(app: &TestApp) {
    eventually("an inbound message to be recorded", || async {
        app.count("inbound").await > 0
    })
    .await;
}

/// Settings for a test gateway: a fresh database in `dir`, the fake model,
/// fast retries, the calculator, clock and delegate tools, no API keys.
pub async fn test_settings(llm: &FakeLlm, dir: &tempfile::TempDir) -> Settings {
    let mut settings = Settings::default();
    let database = fresh_database(dir.path()).await;
    settings.database.url = database.url.clone();
    UNCLAIMED.lock().expect("lock").push(database);
    settings.llm.base_url =
        switchboard::domain::BaseUrl::parse(&llm.openai_base()).expect("a test URL");
    settings.llm.model = "fake-model".to_owned();
    settings.llm.api_key_env = "SWITCHBOARD_TEST_LLM_KEY".to_owned();
    settings.llm.retry_base = std::time::Duration::from_millis(1);
    settings.llm.retry_max = std::time::Duration::from_millis(5);
    settings.llm.timeout = std::time::Duration::from_secs(10);
    settings.agent.tools = vec![
        "calculator".to_owned(),
        "current_time".to_owned(),
        "delegate".to_owned(),
    ];
    settings.api.keys_env = "SWITCHBOARD_TEST_API_KEYS_UNSET".to_owned();
    settings.api.reply_timeout = std::time::Duration::from_secs(60);
    // One turn per message, at once: the tests send messages faster than a
    // burst window and count turns (the burst tests set their own window).
    settings.sessions.burst_window = std::time::Duration::from_millis(0);
    // Files sent to the bot stay in the test's folder.
    settings.media.folder = dir.path().join("media");
    settings
}

/// The `[telegram]` settings that point the adapter at `fake` (long
/// polling, a one-second poll timeout).
pub fn telegram_settings(fake: &FakeTelegram) -> TelegramSettings {
    static TOKEN_SET: Once = Once::new();
    // SAFETY (test): set once per process, before the first adapter reads
    // it; nothing else writes this variable.
    TOKEN_SET.call_once(|| unsafe { std::env::set_var(TELEGRAM_TOKEN_ENV, telegram::TOKEN) });
    TelegramSettings {
        token_env: TELEGRAM_TOKEN_ENV.to_owned(),
        api_url: Some(fake.url()),
        poll_timeout_secs: 1,
        ..TelegramSettings::default()
    }
}

/// The real `switchboard serve` binary, started on a free loopback port in
/// `dir` and waited for until `/healthz` answers.
pub struct ServeProcess {
    pub child: tokio::process::Child,
    pub base: String,
    /// Reads the piped stderr as it is written (a full pipe would block the
    /// process's logging, and so its shutdown), and yields it at exit.
    logs: Option<tokio::task::JoinHandle<String>>,
}

impl ServeProcess {
    /// Starts the binary with `env` (on top of the bind address) and stderr
    /// piped or discarded.
    pub async fn start(dir: &std::path::Path, env: &[(&str, &str)], capture_logs: bool) -> Self {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("addr").port()
        };
        let stderr = if capture_logs {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        };
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
            .arg("serve")
            .current_dir(dir)
            .env("SWITCHBOARD__SERVER__BIND", format!("127.0.0.1:{port}"))
            // As in `test_settings`: one turn per message (`env` may differ).
            .env("SWITCHBOARD__SESSIONS__BURST_WINDOW_MS", "0")
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .expect("binary starts");
        let logs = child.stderr.take().map(|mut stderr| {
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut bytes = Vec::new();
                // A read error ends the capture; what was read is kept.
                let _ = stderr.read_to_end(&mut bytes).await;
                String::from_utf8_lossy(&bytes).into_owned()
            })
        });
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        eventually("the server to come up", || async {
            http.get(format!("{base}/healthz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        Self { child, base, logs }
    }

    /// The logs written until the process exited (empty when they were not
    /// captured).
    async fn collected_logs(&mut self) -> String {
        match self.logs.take() {
            Some(reader) => reader.await.expect("log reader"),
            None => String::new(),
        }
    }

    /// Stops the process with SIGTERM, checks it exits cleanly, and returns
    /// its logs (empty when they were not captured).
    pub async fn stop(mut self) -> String {
        let pid = self.child.id().expect("pid");
        // SAFETY: sending SIGTERM to our own child process.
        unsafe { libc::kill(i32::try_from(pid).expect("pid fits"), libc::SIGTERM) };
        let status = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("stops after SIGTERM")
            .expect("wait");
        assert!(status.success(), "clean exit: {status}");
        self.collected_logs().await
    }

    /// The process id (while it has not been reaped).
    pub fn pid(&self) -> i32 {
        let pid = self.child.id().expect("pid");
        i32::try_from(pid).expect("pid fits")
    }

    /// The base URL of its HTTP server (`http://127.0.0.1:<port>`).
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Freezes the process with SIGSTOP (it keeps its sockets and leases but
    /// does nothing until [`ServeProcess::resume`]).
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Lets a paused process go on with SIGCONT.
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    /// Sends SIGTERM without waiting: the process drains, then exits (see
    /// [`ServeProcess::exited`]).
    pub fn terminate(&self) {
        self.signal(libc::SIGTERM);
    }

    /// Waits (at most `patience`) for the process to exit, and returns its
    /// exit status and its logs (empty when they were not captured).
    pub async fn exited(mut self, patience: Duration) -> (std::process::ExitStatus, String) {
        let status = tokio::time::timeout(patience, self.child.wait())
            .await
            .expect("the process exits")
            .expect("wait");
        (status, self.collected_logs().await)
    }

    fn signal(&self, signal: i32) {
        // SAFETY: sending a signal to our own child process, not yet reaped.
        let sent = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(sent, 0, "signal {signal} sent");
    }

    /// Kills the process with SIGKILL.
    pub async fn kill(mut self) {
        self.child.start_kill().expect("SIGKILL");
        self.child.wait().await.expect("reaped");
    }

    /// Sends one user message to the API and returns the reply text, or
    /// for a turn that failed (an HTTP error naming its turn) the error's
    /// message: the text a chat platform would show.
    pub async fn say(&self, text: &str) -> String {
        let response = reqwest::Client::new()
            .post(format!("{}/v1/chat/completions", self.base))
            .json(&json!({"messages": [{"role": "user", "content": text}]}))
            .send()
            .await
            .expect("sent");
        let status = response.status();
        let body: Value = response.json().await.expect("json");
        if !status.is_success() && body["error"]["turn"].is_i64() {
            return body["error"]["message"]
                .as_str()
                .expect("message")
                .to_owned();
        }
        assert_eq!(status, StatusCode::OK, "{body}");
        reply_text(&body)
    }
}

/// A session id the gateway handed out (a response header, a stored row).
pub fn session_id(text: &str) -> SessionId {
    SessionId::parse(text).expect("a session id")
}

/// A valid 1×1 PNG (one red pixel).
pub const TINY_PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0xF8, 0xCF, 0xC0, 0xF0,
    0x1F, 0x00, 0x05, 0x00, 0x01, 0xFF, 0x89, 0x99, 0x3D, 0x1D, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4E, 0x44, 0xAE, 0x42, 0x60, 0x82,
];

/// Every file under `folder`, recursively.
pub fn files_under(folder: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(folder) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}
