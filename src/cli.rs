//! The command line: `serve`, `chat`, `migrate`, `usage`, `pairing`,
//! `check`, `tools`, `bench`, `console-hash`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use clap::{Parser, Subcommand};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api::{self, ApiState};
use crate::bench::{self, BenchOptions};
use crate::config::{self, Settings};
use crate::console::ConsoleState;
use crate::domain::PairingStatus;
use crate::gateway::Gateway;
use crate::platforms::{self, Platforms};
use crate::store::{Store, StoreError, StoreOptions};
use crate::{telemetry, terminal};

/// A multi-platform chat gateway for an LLM agent.
#[derive(Debug, Parser)]
#[command(name = "switchboard", version, about)]
pub struct Cli {
    /// Configuration file (default: config/switchboard.toml if present).
    #[arg(long, short, global = true, env = "SWITCHBOARD_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway: the HTTP API and every configured platform.
    Serve,
    /// Chat with the agent in this terminal.
    Chat {
        /// Continue this session (any platform's, when it is this user's).
        #[arg(long, conflicts_with = "list")]
        session: Option<String>,
        /// List the sessions this terminal user may continue, and exit.
        #[arg(long)]
        list: bool,
    },
    /// Apply database migrations and exit.
    Migrate,
    /// Print tokens and cost per session and day, cache reads and writes
    /// included.
    Usage,
    /// Answer pairing requests from unknown senders (see `access.allowlist`).
    Pairing {
        #[command(subcommand)]
        action: PairingAction,
    },
    /// Measure the gateway's own overhead with an instant in-process model.
    Bench(BenchOptions),
    /// Validate the configuration and reach the database, the model
    /// endpoint and each enabled platform; exits non-zero on a problem.
    Check,
    /// Print the argon2 hash of a password for `console.password_hash`
    /// (the password is read from standard input, one line).
    ConsoleHash,
    /// List every tool the agent is offered with its source (built-in or
    /// the MCP server's name), starting the MCP servers to ask them.
    Tools,
}

#[derive(Debug, Subcommand)]
pub enum PairingAction {
    /// List the requests awaiting a decision.
    List,
    /// Let the sender with this code talk to the agent.
    Approve { code: String },
    /// Refuse the sender with this code; its messages are ignored after.
    Deny { code: String },
}

/// Runs the parsed command.
///
/// # Errors
/// Whatever stopped the command, with context.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    if matches!(cli.command, Command::ConsoleHash) {
        // Needs no configuration: the hash goes into it.
        return console_hash();
    }
    // The error names the file or variable, the key and what is valid.
    let settings = Settings::load(cli.config.as_deref())?;
    match cli.command {
        Command::Serve => {
            telemetry::init(&settings.log, None);
            warn_if_no_llm_key(&settings);
            serve(settings).await
        }
        Command::Chat { session, list } => {
            // The log goes to a file: lines printed into the chat would
            // break it up.
            let files = terminal::ChatFiles::for_database(&settings.database.url);
            let logged = files
                .create_folder()
                .and_then(|()| terminal::log_to_file(&settings.log, &files.log()));
            if let Err(err) = logged {
                telemetry::init(&settings.log, Some("error"));
                eprintln!(
                    "switchboard: cannot write the chat log {}: {err}",
                    files.log().display()
                );
            }
            warn_if_no_llm_key(&settings);
            chat(settings, session, list, files).await
        }
        Command::Check => {
            telemetry::init(&settings.log, Some("error"));
            let source = match config::file_in_use(cli.config.as_deref()) {
                Some(file) => format!("{} is valid", file.display()),
                None => "valid (no file: built-in defaults and the environment)".to_owned(),
            };
            let findings = crate::check::run(&settings, &source).await;
            for finding in &findings {
                println!("{finding}");
            }
            let problems = findings
                .iter()
                .filter(|finding| finding.verdict == crate::check::Verdict::Problem)
                .count();
            match problems {
                0 => Ok(()),
                1 => anyhow::bail!("1 problem found"),
                n => anyhow::bail!("{n} problems found"),
            }
        }
        Command::Migrate => {
            telemetry::init(&settings.log, None);
            let store = Store::connect(&StoreOptions::new(&settings.database.url))
                .await
                .with_context(|| {
                    format!(
                        "migrating the database {}",
                        crate::check::shown_url(&settings.database.url)
                    )
                })?;
            store.close().await;
            tracing::info!(
                database = %crate::check::shown_url(&settings.database.url),
                "migrations applied"
            );
            Ok(())
        }
        Command::Usage => {
            telemetry::init(&settings.log, Some("warn"));
            let store = open_existing(&settings).await?;
            let rows = store.usage().report().await.context("reading usage")?;
            store.close().await;
            println!("{}", crate::usage::render(&rows, &settings.prices));
            Ok(())
        }
        Command::Pairing { action } => {
            telemetry::init(&settings.log, Some("warn"));
            pairing(&settings, action).await
        }
        Command::ConsoleHash => console_hash(),
        Command::Tools => {
            telemetry::init(&settings.log, Some("error"));
            let shutdown = CancellationToken::new();
            // The listing reads names, descriptions and cache policies and
            // calls no tool, so the memory tool needs no real database: an
            // in-memory one keeps this command from creating or touching
            // the gateway's.
            let scratch = Store::connect(&StoreOptions::new("sqlite::memory:"))
                .await
                .context("preparing the tool listing")?;
            let registry = crate::gateway::build_registry(&settings, &scratch, &shutdown)
                .await
                .context("building the tools")?;
            print!("{}", registry.listing());
            shutdown.cancel();
            Ok(())
        }
        Command::Bench(options) => {
            telemetry::init(&settings.log, Some("error"));
            let report = bench::run(&options)
                .await
                .context("running the benchmark")?;
            println!("{report}");
            Ok(())
        }
    }
}

/// `switchboard console-hash`: reads a password from standard input (not
/// echoed on a terminal) and prints its argon2 hash.
fn console_hash() -> anyhow::Result<()> {
    use std::io::{BufRead, IsTerminal};
    let stdin = std::io::stdin();
    let echo_off = stdin.is_terminal().then(|| {
        eprint!("Password for the web console: ");
        EchoOff::new()
    });
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    if echo_off.is_some() {
        eprintln!();
    }
    drop(echo_off);
    read.context("reading the password from standard input")?;
    let password = line.trim_end_matches(['\r', '\n']);
    anyhow::ensure!(!password.is_empty(), "the password is empty");
    let hash = crate::console::auth::hash_password(password)
        .map_err(|err| anyhow::anyhow!("hashing the password: {err}"))?;
    println!("{hash}");
    Ok(())
}

/// Turns the terminal's echo off on standard input until dropped (nothing,
/// where that fails).
struct EchoOff(Option<libc::termios>);

impl EchoOff {
    fn new() -> Self {
        // SAFETY: tcgetattr only writes into the struct we pass.
        let mut saved = unsafe { std::mem::zeroed::<libc::termios>() };
        // SAFETY: fd 0 is this process's standard input; `saved` is a
        // valid, writable termios.
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &raw mut saved) } != 0 {
            return Self(None);
        }
        let mut quiet = saved;
        quiet.c_lflag &= !libc::ECHO;
        // SAFETY: `quiet` is a valid termios read from this terminal.
        if unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw const quiet) } != 0 {
            return Self(None);
        }
        Self(Some(saved))
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        if let Some(saved) = self.0 {
            // SAFETY: restores the settings read from this terminal.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw const saved) };
        }
    }
}

/// Opens the database for a command that only reads or answers what is
/// there: a SQLite file that does not exist is not created.
async fn open_existing(settings: &Settings) -> anyhow::Result<Store> {
    let url = &settings.database.url;
    let shown = crate::check::shown_url(url);
    if let Some((path, _)) = config::sqlite_path(url)
        && !std::path::Path::new(path).exists()
    {
        anyhow::bail!(
            "no database at {shown} (database.url): run `switchboard serve` or `switchboard \
             migrate` first, or point database.url (or --config) at the gateway's database"
        );
    }
    Store::connect(&StoreOptions::new(url))
        .await
        .with_context(|| format!("opening the database {shown}"))
}

/// Warns when the variable that should hold the model's key is unset (local
/// model servers often need none). Names the variable, never a value.
fn warn_if_no_llm_key(settings: &Settings) {
    let var = &settings.llm.api_key_env;
    if !std::env::var(var).is_ok_and(|key| !key.trim().is_empty()) {
        tracing::warn!(
            variable = %var,
            base_url = %settings.llm.base_url,
            "the model's key variable {var} (llm.api_key_env) is unset or empty: model calls \
             go without a key; set it unless the endpoint needs none"
        );
    }
}

async fn serve(settings: Settings) -> anyhow::Result<()> {
    let addr: SocketAddr = settings.bind_addr()?;
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("binding {addr}"))?;
    let database = crate::check::shown_url(&settings.database.url);
    let gateway = Gateway::build(settings)
        .await
        .with_context(|| format!("starting the gateway (database {database})"))?;
    tracing::info!(database = %database, "database open");
    let shutdown = gateway.shutdown.clone();
    tokio::spawn(watch_signals(shutdown.clone()));
    let mut platforms = start_platforms(&gateway, &shutdown);
    // Stopped only once the HTTP server is done: callers still waiting
    // while the instance drains get their replies through them.
    let background_stop = CancellationToken::new();
    let background = gateway.spawn_background(&background_stop);
    let routes = std::mem::take(&mut platforms.routes);
    let grace = gateway.settings.server.shutdown_grace;
    // On SIGTERM the runner drains (no new claims, queued sessions handed
    // back, running turns given the grace period). The server keeps
    // accepting meanwhile, so that `/readyz` and new API requests get 503
    // rather than a refused connection; once the runner is done it stops
    // accepting and answers the requests in flight (bounded by the drain
    // deadline).
    let drained = CancellationToken::new();
    let (served, ()) = tokio::join!(
        async {
            let served = run_server(
                &gateway,
                listener,
                routes,
                drained.clone().cancelled_owned(),
            )
            .await;
            shutdown.cancel();
            served
        },
        async {
            shutdown.cancelled().await;
            tracing::info!("draining");
            gateway.service.runner().shutdown(grace).await;
            drained.cancel();
        }
    );
    served?;
    platforms.stop(grace).await;
    background_stop.cancel();
    for task in background {
        if let Err(err) = task.await {
            tracing::error!(error = %err, "background task failed");
        }
    }
    gateway.shutdown().await;
    tracing::info!("stopped");
    Ok(())
}

/// Starts the platform adapters the settings configure (see
/// [`crate::platforms`]), handed the parts of `gateway` they need; they stop
/// when `shutdown` is cancelled.
#[must_use]
pub fn start_platforms(gateway: &Gateway, shutdown: &CancellationToken) -> Platforms {
    let core = platforms::Core {
        sink: Arc::clone(&gateway.service) as Arc<dyn switchboard_contract::InboundSink>,
        runner: gateway.service.runner().clone(),
        status: gateway.platform_status.clone(),
        shutdown: shutdown.clone(),
        leases: gateway.store.is_shared().then(|| platforms::Leases {
            store: gateway.store.clone(),
            owner: gateway.instance_id.clone(),
            ttl: gateway.settings.runner.lease_ttl,
        }),
    };
    Platforms::start(core, platforms::registry::configured(&gateway.settings))
}

/// Serves the gateway on `listener` until `stop` resolves: recovers
/// unfinished work first, then answers HTTP.
///
/// # Errors
/// Recovery or the server failing.
pub async fn run_server(
    gateway: &Gateway,
    listener: TcpListener,
    platform_routes: Router,
    stop: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    gateway
        .recover()
        .await
        .context("recovering unfinished work")?;
    let settings = &gateway.settings;
    let mut models = vec![settings.llm.model.clone()];
    models.extend(settings.llm.extra_models.iter().cloned());
    let keys = settings.api.keys().context("reading the API keys")?;
    if keys.is_empty() {
        tracing::warn!(
            env = settings.api.keys_env,
            "no API keys configured: the API accepts any caller; keep server.bind on loopback"
        );
    }
    let state = Arc::new(ApiState {
        service: Arc::clone(&gateway.service),
        store: gateway.store.clone(),
        keys,
        models,
        reply_timeout: settings.api.reply_timeout,
        drain_deadline: gateway.drain_deadline.clone(),
        platforms: gateway.platform_status.clone(),
        serve_metrics: settings.server.metrics,
        images: api::ImageFetcher::new(
            &settings.tools.http_get,
            settings.media.max_file_bytes.get(),
        )
        .context("building the image_url client")?,
    });
    let console = ConsoleState::from_settings(
        settings,
        gateway.store.clone(),
        gateway.platform_status.clone(),
    )
    .context("starting the web console")?;
    let mut router = api::router(state, settings.api.max_body_bytes, settings.api.enabled)
        .merge(platform_routes);
    if let Some(console) = console {
        tracing::info!("web console at /console");
        router = router.merge(crate::console::router(Arc::new(console)));
    }
    let local = listener.local_addr()?;
    tracing::info!(address = %local, "listening");
    // Replies are small writes (a streamed delta, a whole answer): Nagle
    // would hold each one back until the client's delayed ACK.
    let listener = axum::serve::ListenerExt::tap_io(listener, |stream| {
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "could not set TCP_NODELAY on a connection");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(stop)
        .await
        .context("serving HTTP")?;
    Ok(())
}

async fn chat(
    settings: Settings,
    session: Option<String>,
    list: bool,
    files: terminal::ChatFiles,
) -> anyhow::Result<()> {
    let reply_timeout = settings.api.reply_timeout;
    let database = crate::check::shown_url(&settings.database.url);
    let gateway = Gateway::build(settings)
        .await
        .with_context(|| format!("starting the gateway (database {database})"))?;
    gateway
        .recover()
        .await
        .context("recovering unfinished work")?;
    let result = if list {
        terminal::list_sessions(&gateway.service)
            .await
            .map(|text| print!("{text}"))
    } else {
        let options = terminal::ChatOptions {
            session,
            reply_timeout,
            files,
        };
        terminal::run_chat(&gateway.service, options).await
    };
    gateway.shutdown().await;
    result.context("chat")
}

/// `switchboard pairing list|approve|deny`.
async fn pairing(settings: &Settings, action: PairingAction) -> anyhow::Result<()> {
    let store = open_existing(settings).await?;
    let result = match action {
        PairingAction::List => {
            let requests = store.pairing().requests(PairingStatus::Pending).await;
            requests.map(|requests| {
                if requests.is_empty() {
                    println!("No pairing requests waiting.");
                }
                for request in requests {
                    println!(
                        "{}  {}:{}  {}",
                        request.code,
                        request.platform,
                        request.user_id,
                        request.display_name.unwrap_or_default()
                    );
                }
                true
            })
        }
        PairingAction::Approve { code } => decide(&store, &code, true).await,
        PairingAction::Deny { code } => decide(&store, &code, false).await,
    };
    store.close().await;
    match result.context("reading pairing requests")? {
        true => Ok(()),
        false => anyhow::bail!("no pairing request awaits a decision with that code"),
    }
}

async fn decide(store: &Store, code: &str, approve: bool) -> Result<bool, StoreError> {
    let decided = store
        .pairing()
        .decide(&code.trim().to_ascii_uppercase(), approve)
        .await?;
    if let Some(request) = &decided {
        println!(
            "{} {}:{}",
            if approve { "Approved" } else { "Denied" },
            request.platform,
            request.user_id
        );
    }
    Ok(decided.is_some())
}

/// Cancels `token` on Ctrl-C or SIGTERM.
async fn watch_signals(token: CancellationToken) {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %err, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::error!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
    tracing::info!("shutting down");
    token.cancel();
}
