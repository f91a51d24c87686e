//! `switchboard bench-tasks`: what the scheduler costs.
//!
//! N one-off tasks, spread over S sessions, come due evenly over a window
//! (`--over-secs`), and each run is a real turn (through the runner, the
//! agent loop and the store) against the instant in-process model of
//! `switchboard bench`. Before they come due, the scheduler idles with all
//! N tasks in the future for `--idle-secs`: the CPU it spends then is its
//! idle cost (it reads one due time per look, never the tasks one by one).
//! Reports the lateness of each run (queued after its due time: p50, p99,
//! max), how long after its due time its turn ended (p50, p99), the CPU per
//! run (its turn included; `switchboard bench` gives a turn's own), and the
//! idle CPU per second.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchboard_contract::{AccountId, ChatId, PlatformName, UserId};

use super::{BenchError, InstantModel, cpu_time, ms, tempfile_dir};
use crate::agent::cache::ProviderFactory;
use crate::config::Settings;
use crate::domain::{LocalPlatform, Schedule, SessionId, millis, now_ms};
use crate::gateway::Gateway;
use crate::llm::Provider;
use crate::store::NewSession;
use crate::store::tasks::NewTask;

/// Benchmark shape.
#[derive(Debug, Clone, clap::Args)]
pub struct TaskBenchOptions {
    /// One-off tasks made.
    #[arg(long, default_value_t = 10_000)]
    pub tasks: usize,
    /// Sessions they report to (each session's runs take turns).
    #[arg(long, default_value_t = 200)]
    pub sessions: usize,
    /// The window they come due over, in seconds.
    #[arg(long, default_value_t = 60)]
    pub over_secs: u64,
    /// How long the scheduler idles with every task in the future first.
    #[arg(long, default_value_t = 10)]
    pub idle_secs: u64,
    /// The database to run in (`postgres://…`, `sqlite://…`) instead of a
    /// fresh temporary SQLite file.
    #[arg(long)]
    pub database_url: Option<String>,
}

/// What the benchmark measured.
#[derive(Debug, Clone)]
pub struct TaskBenchReport {
    pub options: TaskBenchOptions,
    pub runs: usize,
    pub lateness_p50: Duration,
    pub lateness_p99: Duration,
    pub lateness_max: Duration,
    pub answered_p50: Duration,
    pub answered_p99: Duration,
    pub cpu_per_run: Duration,
    pub idle_cpu_per_sec: Duration,
}

impl fmt::Display for TaskBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "tasks: {} over {} s in {} sessions; {} runs",
            o.tasks, o.over_secs, o.sessions, self.runs
        )?;
        writeln!(
            f,
            "lateness (queued after due): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            ms(self.lateness_p50),
            ms(self.lateness_p99),
            ms(self.lateness_max)
        )?;
        writeln!(
            f,
            "answered after due: p50 {:.1} ms, p99 {:.1} ms",
            ms(self.answered_p50),
            ms(self.answered_p99)
        )?;
        writeln!(
            f,
            "cpu per run (its turn included): {:.3} ms",
            ms(self.cpu_per_run)
        )?;
        write!(
            f,
            "idle scheduler with {} future tasks: {:.3} ms cpu per second",
            o.tasks,
            ms(self.idle_cpu_per_sec)
        )
    }
}

/// Runs the benchmark.
///
/// # Errors
/// The gateway could not start, a task could not be made, or the runs did
/// not all end.
pub async fn run(options: &TaskBenchOptions) -> Result<TaskBenchReport, BenchError> {
    let dir = tempfile_dir()?;
    let mut settings = Settings::default();
    settings.database.url = options
        .database_url
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}/bench.db", dir.display()));
    settings.agent.tools = vec!["current_time".to_owned()];
    settings.sessions.burst_window = Duration::ZERO;
    let factory: ProviderFactory = Arc::new(|_| Arc::new(InstantModel) as Arc<dyn Provider>);
    let gateway = Arc::new(
        Gateway::build_with(settings, factory)
            .await
            .map_err(|err| BenchError::Setup(err.to_string()))?,
    );
    let start_at = now_ms() + millis(Duration::from_secs(options.idle_secs + 5));
    let first_id = make_tasks(&gateway, options, start_at).await?;
    let stop = tokio_util::sync::CancellationToken::new();
    let scheduler = gateway.scheduler().spawn(stop.clone());

    // Idle: every task in the future.
    let settle = Duration::from_secs(1);
    tokio::time::sleep(settle).await;
    let cpu_before = cpu_time();
    let idle = Duration::from_secs(options.idle_secs.max(1));
    tokio::time::sleep(idle).await;
    let idle_cpu = cpu_time().saturating_sub(cpu_before);

    let cpu_before = cpu_time();
    let runs = wait_for_runs(&gateway, options, first_id, start_at).await?;
    let cpu = cpu_time().saturating_sub(cpu_before);
    stop.cancel();
    let _ = scheduler.await;
    gateway.shutdown.cancel();
    gateway.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
    report(options, &runs, cpu, idle_cpu, idle)
}

/// Makes the sessions and the tasks, due evenly from `start_at` over the
/// window; returns the first task's id (the runs of this benchmark are
/// those of tasks from it on).
async fn make_tasks(
    gateway: &Gateway,
    options: &TaskBenchOptions,
    start_at: i64,
) -> Result<i64, BenchError> {
    let setup = |err: crate::store::StoreError| BenchError::Setup(err.to_string());
    let platform = PlatformName::parse(LocalPlatform::Api.name())
        .map_err(|err| BenchError::Setup(err.to_string()))?;
    let account = AccountId::parse("bench").map_err(|err| BenchError::Setup(err.to_string()))?;
    let mut sessions = Vec::with_capacity(options.sessions.max(1));
    for index in 0..options.sessions.max(1) {
        let id = SessionId::generate();
        let chat = ChatId::parse(format!("bench-{id}"))
            .map_err(|err| BenchError::Setup(err.to_string()))?;
        gateway
            .store
            .sessions()
            .create(&NewSession {
                id: id.clone(),
                origin_key: format!("bench:{id}:{index}"),
                platform: platform.clone(),
                account: account.clone(),
                chat_id: chat.clone(),
                thread_id: None,
                system_prompt: "You are a benchmark.".to_owned(),
                model: gateway.settings.llm.model.clone(),
                toolset: Vec::new(),
                principal: None,
            })
            .await
            .map_err(setup)?;
        sessions.push((id, chat));
    }
    let window = millis(Duration::from_secs(options.over_secs.max(1)));
    let count = i64::try_from(options.tasks.max(1)).unwrap_or(i64::MAX);
    let sender = UserId::parse("bench").map_err(|err| BenchError::Setup(err.to_string()))?;
    let mut first = None;
    for index in 0..options.tasks {
        let (session, chat) = &sessions[index % sessions.len()];
        let offset = i64::try_from(index).unwrap_or(i64::MAX) * window / count;
        let at = start_at + offset;
        let id = gateway
            .store
            .tasks()
            .create(&NewTask {
                principal_id: None,
                session_id: session.clone(),
                platform: platform.clone(),
                account: account.clone(),
                chat_id: chat.clone(),
                thread_id: None,
                sender_id: sender.clone(),
                sender_name: None,
                prompt: format!("Run {index}"),
                schedule: Schedule::Once { at_ms: at },
                timezone: "UTC".to_owned(),
                until_at: None,
                max_runs: None,
                background: false,
                run_session: None,
                next_run_at: Some(at),
            })
            .await
            .map_err(setup)?;
        first.get_or_insert(id.get());
    }
    Ok(first.unwrap_or(0))
}

/// (due, claimed, finished) of each run of this benchmark's tasks.
type Runs = Vec<(i64, i64, i64)>;

/// Waits until every task's run has ended (at most the window plus a
/// minute), and reads when each was due, queued and finished.
async fn wait_for_runs(
    gateway: &Gateway,
    options: &TaskBenchOptions,
    first_id: i64,
    start_at: i64,
) -> Result<Runs, BenchError> {
    let expected = i64::try_from(options.tasks).unwrap_or(i64::MAX);
    let deadline = Instant::now()
        + Duration::from_secs(options.over_secs + options.idle_secs + 65)
        + Duration::from_millis(u64::try_from(start_at - now_ms()).unwrap_or(0));
    loop {
        let done: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM task_runs WHERE task_id >= $1 AND finished_at IS NOT NULL",
        )
        .bind(first_id)
        .fetch_one(&mut *gateway.store.read_conn().await.map_err(turn_error)?)
        .await
        .map_err(|err| BenchError::Turn(err.to_string()))?;
        if done >= expected {
            break;
        }
        if Instant::now() > deadline {
            return Err(BenchError::Turn(format!(
                "{done} of {expected} runs ended in time"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    sqlx::query_as(
        "SELECT due_at, claimed_at, finished_at FROM task_runs WHERE task_id >= $1 \
         AND finished_at IS NOT NULL",
    )
    .bind(first_id)
    .fetch_all(&mut *gateway.store.read_conn().await.map_err(turn_error)?)
    .await
    .map_err(|err| BenchError::Turn(err.to_string()))
}

fn turn_error(err: crate::store::StoreError) -> BenchError {
    BenchError::Turn(err.to_string())
}

fn report(
    options: &TaskBenchOptions,
    runs: &Runs,
    cpu: Duration,
    idle_cpu: Duration,
    idle: Duration,
) -> Result<TaskBenchReport, BenchError> {
    let mut lateness: Vec<i64> = runs.iter().map(|(due, claimed, _)| claimed - due).collect();
    let mut answered: Vec<i64> = runs
        .iter()
        .map(|(due, _, finished)| finished - due)
        .collect();
    lateness.sort_unstable();
    answered.sort_unstable();
    let at = |sorted: &[i64], share: f64| -> Duration {
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let index = ((sorted.len() - 1) as f64 * share).round() as usize;
        Duration::from_millis(u64::try_from(sorted[index].max(0)).unwrap_or(0))
    };
    let count = u32::try_from(runs.len().max(1)).unwrap_or(u32::MAX);
    Ok(TaskBenchReport {
        options: options.clone(),
        runs: runs.len(),
        lateness_p50: at(&lateness, 0.5),
        lateness_p99: at(&lateness, 0.99),
        lateness_max: at(&lateness, 1.0),
        answered_p50: at(&answered, 0.5),
        answered_p99: at(&answered, 0.99),
        cpu_per_run: cpu / count,
        idle_cpu_per_sec: idle_cpu.div_f64(idle.as_secs_f64()),
    })
}
