//! The command line: [`Cli`] parses it, [`run`] runs one subcommand, each
//! in its own module (`serve` is [`crate::server::serve`]).

mod chat;
mod check;
mod console_hash;
mod pairing;
mod store;
mod tasks;
mod tools;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::bench::{self, BenchOptions};
use crate::config::{self, Settings};
use crate::store::{Store, StoreOptions};
use crate::telemetry;

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
    /// List everyone's scheduled and background tasks, or cancel, pause or
    /// resume one.
    Tasks {
        #[command(subcommand)]
        action: TasksAction,
    },
    /// Measure the gateway's own overhead with an instant in-process model.
    Bench(BenchOptions),
    /// Measure the scheduler: many tasks due over a window, each run a
    /// turn with the instant model; lateness, CPU per run, idle cost.
    BenchTasks(crate::bench::tasks::TaskBenchOptions),
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

#[derive(Debug, Subcommand)]
pub enum TasksAction {
    /// List the live tasks (active and paused).
    List {
        /// Finished and cancelled ones too.
        #[arg(long)]
        all: bool,
    },
    /// Cancel a task.
    Cancel { id: i64 },
    /// Pause a task: no run comes due until it is resumed.
    Pause { id: i64 },
    /// Resume a paused task from its next due time after now.
    Resume { id: i64 },
}

/// Runs the parsed command.
///
/// # Errors
/// Whatever stopped the command, with context.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    if matches!(cli.command, Command::ConsoleHash) {
        // Needs no configuration: the hash goes into it.
        return console_hash::run();
    }
    // The error names the file or variable, the key and what is valid.
    let settings = Settings::load(cli.config.as_deref())?;
    match cli.command {
        Command::Serve => {
            telemetry::init(&settings.log, None);
            warn_if_no_llm_key(&settings);
            crate::server::serve(settings).await
        }
        Command::Chat { session, list } => chat::run(settings, session, list).await,
        Command::Check => check::run(&settings, cli.config.as_deref()).await,
        Command::Migrate => store::migrate(&settings).await,
        Command::Usage => store::usage(&settings).await,
        Command::Pairing { action } => {
            telemetry::init(&settings.log, Some("warn"));
            pairing::run(&settings, action).await
        }
        Command::Tasks { action } => {
            telemetry::init(&settings.log, Some("warn"));
            tasks::run(&settings, action).await
        }
        Command::ConsoleHash => console_hash::run(),
        Command::Tools => tools::run(&settings).await,
        Command::BenchTasks(options) => {
            telemetry::init(&settings.log, Some("error"));
            let report = bench::tasks::run(&options)
                .await
                .context("running the task benchmark")?;
            println!("{report}");
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
