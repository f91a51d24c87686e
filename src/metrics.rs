//! Prometheus metrics: the registry this process's counters, histograms
//! and gauges live in, and the text `GET /metrics` serves.
//!
//! The registry belongs to the gateway that builds it and is handed to the
//! parts that own facts (the turn executor, the runner, the agent loop), not
//! to a process-wide recorder: two gateways in one process (the tests)
//! count apart. The points that own the facts record them with one call each: a
//! turn's end ([`Metrics::turn_finished`], in `session::turn`), a model call
//! (`agent::step`), a tool call (`agent::round`), a duplicate event
//! (`session::service`), a delivery attempt (`session::runner`). What is a
//! state rather than an event (queue depth, outbox backlog, running turns,
//! adapters, draining) is read when scraped ([`Metrics::render`] with a
//! [`Snapshot`]).
//!
//! Counters and histograms count what this instance did; sum them over
//! instances. `switchboard_queue_depth` (messages whose turn has not ended,
//! waiting or running) and `switchboard_outbox_backlog` are read from the
//! database, so every instance of a cluster reports the same database-wide
//! value (take `max`, not `sum`; the messages waiting are
//! `max(switchboard_queue_depth) - sum(switchboard_turns_running)`). Labels are bounded:
//! outcomes and kinds are fixed sets, models come from the configuration,
//! tools from the registry (any other name the model invents counts as
//! `unknown`), platforms and adapters from the code; never a session, user
//! or chat id.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::domain::{Outcome, RunStatus, Usage};

/// The content type of [`Metrics::render`]'s text (OpenMetrics, which
/// Prometheus reads).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Turn durations, in seconds: a quick answer to a long tool-using task.
const TURN_BUCKETS: [f64; 14] = [
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0,
];

/// How late a task's run was queued, in seconds.
const LATENESS_BUCKETS: [f64; 10] = [0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 60.0, 300.0, 3600.0];

/// Model call durations, in seconds.
const MODEL_CALL_BUCKETS: [f64; 13] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0, 300.0,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    provider: String,
    model: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelOutcomeLabels {
    provider: String,
    model: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    provider: String,
    model: String,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CacheMissLabels {
    provider: String,
    model: String,
    cause: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlatformLabel {
    platform: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlatformKindLabels {
    platform: String,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdapterLabel {
    adapter: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdapterStateLabels {
    adapter: String,
    state: &'static str,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn model_call_histogram() -> Histogram {
    Histogram::new(MODEL_CALL_BUCKETS)
}

/// What is read at scrape time rather than counted as it happens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Messages whose turn has not ended (waiting or running),
    /// database-wide; `None` when the database did not answer.
    pub queue_depth: Option<i64>,
    /// Replies waiting to be delivered, per platform, database-wide; `None`
    /// when the database did not answer.
    pub outbox_backlog: Option<Vec<(String, i64)>>,
    /// Turns running in this instance.
    pub turns_running: i64,
    /// Each configured adapter: its state's name and whether it counts as
    /// up (connected, or standing by for another instance).
    pub adapters: Vec<(String, &'static str, bool)>,
    pub draining: bool,
    /// Active tasks, database-wide; `None` when the database did not
    /// answer.
    pub tasks_active: Option<i64>,
}

/// The metrics of one gateway; cheap to clone (all clones share them).
#[derive(Clone, Default)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

struct Inner {
    registry: Registry,
    turns: Family<OutcomeLabel, Counter>,
    turn_duration: Histogram,
    limit_hits: Family<KindLabel, Counter>,
    model_calls: Family<ModelOutcomeLabels, Counter>,
    model_call_duration: HistogramFamily<ModelLabels>,
    tokens: Family<TokenLabels, Counter>,
    cache_misses: Family<CacheMissLabels, Counter>,
    tool_calls: Family<ToolLabels, Counter>,
    duplicates: Family<PlatformLabel, Counter>,
    delivered: Family<PlatformLabel, Counter>,
    delivery_failures: Family<PlatformKindLabels, Counter>,
    queue_depth: Gauge,
    outbox_backlog: Family<PlatformLabel, Gauge>,
    turns_running: Gauge,
    database_up: Gauge,
    adapter_up: Family<AdapterLabel, Gauge>,
    adapter_state: Family<AdapterStateLabels, Gauge>,
    draining: Gauge,
    task_runs: Family<KindLabel, Counter>,
    task_lateness: Histogram,
    tasks_active: Gauge,
    approvals: Family<KindLabel, Counter>,
    approval_wait: Histogram,
    /// Held while a scrape sets the gauges and encodes, so that two
    /// scrapes do not interleave.
    scrape: Mutex<()>,
}

impl Default for Inner {
    fn default() -> Self {
        let mut inner = Self {
            registry: Registry::default(),
            turns: Family::default(),
            turn_duration: Histogram::new(TURN_BUCKETS),
            limit_hits: Family::default(),
            model_calls: Family::default(),
            model_call_duration: Family::new_with_constructor(
                model_call_histogram as fn() -> Histogram,
            ),
            tokens: Family::default(),
            cache_misses: Family::default(),
            tool_calls: Family::default(),
            duplicates: Family::default(),
            delivered: Family::default(),
            delivery_failures: Family::default(),
            queue_depth: Gauge::default(),
            outbox_backlog: Family::default(),
            turns_running: Gauge::default(),
            database_up: Gauge::default(),
            adapter_up: Family::default(),
            adapter_state: Family::default(),
            draining: Gauge::default(),
            task_runs: Family::default(),
            task_lateness: Histogram::new(LATENESS_BUCKETS),
            tasks_active: Gauge::default(),
            approvals: Family::default(),
            approval_wait: Histogram::new(LATENESS_BUCKETS),
            scrape: Mutex::new(()),
        };
        inner.register();
        inner
    }
}

impl Inner {
    fn register(&mut self) {
        let r = &mut self.registry;
        r.register(
            "switchboard_turns",
            "Turns ended, by outcome (answered, budget_exhausted, model_error, time_limit, ...)",
            self.turns.clone(),
        );
        r.register(
            "switchboard_turn_duration_seconds",
            "How long a turn ran, from its start to its reply stored",
            self.turn_duration.clone(),
        );
        r.register(
            "switchboard_limit_hits",
            "Tasks stopped by a limit, by kind (time_limit, token_limit, no_progress, \
             spend_limit, budget_exhausted)",
            self.limit_hits.clone(),
        );
        r.register(
            "switchboard_model_calls",
            "Model calls, by provider, model and outcome (ok, error)",
            self.model_calls.clone(),
        );
        r.register(
            "switchboard_model_call_duration_seconds",
            "How long a model call took (retries and a fallback included)",
            self.model_call_duration.clone(),
        );
        r.register(
            "switchboard_model_tokens",
            "Tokens of answered model calls, by kind: input (cache reads and writes \
             included), output, cache_read, cache_write",
            self.tokens.clone(),
        );
        r.register(
            "switchboard_prompt_cache_misses",
            "Model calls that read less from the prompt cache than the conversation's previous \
             call left there, by cause: the part that changed (tools, system, facts, history, \
             tool_choice), or nothing changed (expired, provider)",
            self.cache_misses.clone(),
        );
        r.register(
            "switchboard_tool_calls",
            "Tool calls, by tool and outcome (ok, unknown_tool, invalid_arguments, failed, \
             timeout, cancelled, panicked, outcome_unknown)",
            self.tool_calls.clone(),
        );
        r.register(
            "switchboard_inbound_duplicates_dropped",
            "Platform events dropped because they were recorded before, by platform",
            self.duplicates.clone(),
        );
        r.register(
            "switchboard_outbox_delivered",
            "Replies delivered to their platform, by platform",
            self.delivered.clone(),
        );
        r.register(
            "switchboard_outbox_delivery_failures",
            "Failed delivery attempts, by platform and kind (transient, rate_limited, permanent)",
            self.delivery_failures.clone(),
        );
        r.register(
            "switchboard_queue_depth",
            "Messages whose turn has not ended, waiting or running (database-wide, read at \
             scrape time)",
            self.queue_depth.clone(),
        );
        r.register(
            "switchboard_outbox_backlog",
            "Replies waiting to be delivered, by platform (database-wide, read at scrape time)",
            self.outbox_backlog.clone(),
        );
        r.register(
            "switchboard_turns_running",
            "Turns running in this instance",
            self.turns_running.clone(),
        );
        r.register(
            "switchboard_database_up",
            "1 when the database answered this scrape's queries, else 0",
            self.database_up.clone(),
        );
        r.register(
            "switchboard_adapter_up",
            "1 while a configured platform adapter is connected (or standing by while \
             another instance holds its connection), else 0",
            self.adapter_up.clone(),
        );
        r.register(
            "switchboard_adapter_state",
            "1 for each configured adapter's current state (starting, up, standby, \
             retrying, failed, stopped)",
            self.adapter_state.clone(),
        );
        r.register(
            "switchboard_draining",
            "1 while this instance drains for shutdown",
            self.draining.clone(),
        );
        r.register(
            "switchboard_task_runs",
            "Task runs that came due, by what became of them (queued, missed); a queued \
             run's turn counts in switchboard_turns",
            self.task_runs.clone(),
        );
        r.register(
            "switchboard_approvals",
            "Approvals and questions by outcome: asked, then allowed, allowed_session, denied, \
             answered, expired or stopped",
            self.approvals.clone(),
        );
        r.register(
            "switchboard_approval_decision_seconds",
            "How long a person took to decide an approval or answer a question",
            self.approval_wait.clone(),
        );
        r.register(
            "switchboard_task_run_lateness_seconds",
            "How long after its due time a task's run was queued",
            self.task_lateness.clone(),
        );
        r.register(
            "switchboard_tasks_active",
            "Active tasks (database-wide, read at scrape time)",
            self.tasks_active.clone(),
        );
    }
}

impl Metrics {
    /// A turn ended (its reply stored) with `outcome` after `elapsed`.
    /// A turn stopped by a limit counts in `switchboard_limit_hits_total`
    /// as the kind of its outcome.
    pub fn turn_finished(&self, outcome: Outcome, elapsed: Duration) {
        let inner = &self.inner;
        let name = outcome.as_str();
        inner
            .turns
            .get_or_create(&OutcomeLabel { outcome: name })
            .inc();
        inner.turn_duration.observe(elapsed.as_secs_f64());
        if Outcome::LIMITS.contains(&outcome) {
            inner
                .limit_hits
                .get_or_create(&KindLabel { kind: name })
                .inc();
        }
    }

    /// A model call of `provider`'s `model` (the one asked for) ended
    /// after `elapsed`: answered with `usage`, or failed (`None`).
    /// Counts a model call that read less from the prompt cache than it
    /// could, by `cause` (the prompt-cache report's label for it).
    pub fn cache_miss(&self, provider: &str, model: &str, cause: &'static str) {
        self.inner
            .cache_misses
            .get_or_create(&CacheMissLabels {
                provider: provider.to_owned(),
                model: model.to_owned(),
                cause,
            })
            .inc();
    }

    pub fn model_call(
        &self,
        provider: &str,
        model: &str,
        usage: Option<&Usage>,
        elapsed: Duration,
    ) {
        let inner = &self.inner;
        let (provider, model) = (provider.to_owned(), model.to_owned());
        let outcome = if usage.is_some() { "ok" } else { "error" };
        inner
            .model_calls
            .get_or_create(&ModelOutcomeLabels {
                provider: provider.clone(),
                model: model.clone(),
                outcome,
            })
            .inc();
        inner
            .model_call_duration
            .get_or_create(&ModelLabels {
                provider: provider.clone(),
                model: model.clone(),
            })
            .observe(elapsed.as_secs_f64());
        let Some(usage) = usage else { return };
        for (kind, tokens) in [
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
            ("cache_read", usage.cache_read_tokens),
            ("cache_write", usage.cache_write_tokens),
        ] {
            inner
                .tokens
                .get_or_create(&TokenLabels {
                    provider: provider.clone(),
                    model: model.clone(),
                    kind,
                })
                .inc_by(tokens);
        }
    }

    /// A tool call ended. `tool` is the name the model asked for, counted
    /// as `unknown` unless `known` (a tool of the registry); `outcome` is
    /// `ok` or the failure's kind.
    pub fn tool_call(&self, tool: &str, known: bool, outcome: &'static str) {
        let tool = if known { tool } else { "unknown" };
        self.inner
            .tool_calls
            .get_or_create(&ToolLabels {
                tool: tool.to_owned(),
                outcome,
            })
            .inc();
    }

    /// A platform event was dropped as one recorded before.
    pub fn duplicate_dropped(&self, platform: &str) {
        self.inner
            .duplicates
            .get_or_create(&PlatformLabel {
                platform: platform.to_owned(),
            })
            .inc();
    }

    /// A reply was delivered to `platform`.
    pub fn delivered(&self, platform: &str) {
        self.inner
            .delivered
            .get_or_create(&PlatformLabel {
                platform: platform.to_owned(),
            })
            .inc();
    }

    /// A delivery attempt to `platform` failed: `transient`,
    /// `rate_limited` or `permanent`.
    pub fn delivery_failed(&self, platform: &str, kind: &'static str) {
        self.inner
            .delivery_failures
            .get_or_create(&PlatformKindLabels {
                platform: platform.to_owned(),
                kind,
            })
            .inc();
    }

    /// A turn parked on `count` new questions.
    pub fn approvals_asked(&self, count: usize) {
        self.inner
            .approvals
            .get_or_create(&KindLabel { kind: "asked" })
            .inc_by(u64::try_from(count).unwrap_or(0));
    }

    /// An approval was settled (`outcome`) after `waited_ms`.
    pub fn approval_settled(&self, outcome: &'static str, waited_ms: i64) {
        self.inner
            .approvals
            .get_or_create(&KindLabel { kind: outcome })
            .inc();
        #[allow(clippy::cast_precision_loss)]
        self.inner
            .approval_wait
            .observe(waited_ms.max(0) as f64 / 1000.0);
    }

    /// A task's run came due `late_ms` ago and was `status` (queued or
    /// missed).
    pub fn task_run(&self, status: RunStatus, late_ms: i64) {
        let inner = &self.inner;
        inner
            .task_runs
            .get_or_create(&KindLabel {
                kind: status.as_str(),
            })
            .inc();
        if status == RunStatus::Queued {
            #[allow(clippy::cast_precision_loss)]
            inner.task_lateness.observe(late_ms.max(0) as f64 / 1000.0);
        }
    }

    /// The exposition text, with the gauges set from `snapshot`.
    #[must_use]
    pub fn render(&self, snapshot: &Snapshot) -> String {
        let inner = &self.inner;
        let _scrape = inner.scrape.lock().unwrap_or_else(PoisonError::into_inner);
        inner.queue_depth.set(snapshot.queue_depth.unwrap_or(0));
        inner.outbox_backlog.clear();
        if let Some(backlog) = &snapshot.outbox_backlog {
            for (platform, rows) in backlog {
                inner
                    .outbox_backlog
                    .get_or_create(&PlatformLabel {
                        platform: platform.clone(),
                    })
                    .set(*rows);
            }
        }
        let database_up = snapshot.queue_depth.is_some() && snapshot.outbox_backlog.is_some();
        inner.database_up.set(i64::from(database_up));
        inner.turns_running.set(snapshot.turns_running);
        inner.adapter_up.clear();
        inner.adapter_state.clear();
        for (adapter, state, up) in &snapshot.adapters {
            inner
                .adapter_up
                .get_or_create(&AdapterLabel {
                    adapter: adapter.clone(),
                })
                .set(i64::from(*up));
            inner
                .adapter_state
                .get_or_create(&AdapterStateLabels {
                    adapter: adapter.clone(),
                    state,
                })
                .set(1);
        }
        inner.draining.set(i64::from(snapshot.draining));
        inner.tasks_active.set(snapshot.tasks_active.unwrap_or(0));
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &inner.registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample `name{labels}` in `text` (labels exactly as
    /// rendered, in the order the label set declares them).
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
            .and_then(|value| value.parse().ok())
    }

    #[test]
    fn events_and_the_snapshot_appear_with_their_labels() {
        let metrics = Metrics::default();
        metrics.turn_finished(Outcome::Answered, Duration::from_millis(300));
        metrics.turn_finished(Outcome::TokenLimit, Duration::from_secs(3));
        let usage = Usage {
            input_tokens: 120,
            output_tokens: 7,
            cache_read_tokens: 100,
            cache_write_tokens: 5,
            cache_write_1h_tokens: 0,
        };
        metrics.model_call("openai", "m", Some(&usage), Duration::from_millis(40));
        metrics.model_call("openai", "m", None, Duration::from_millis(40));
        metrics.tool_call("calculator", true, "ok");
        metrics.tool_call("made-up name", false, "unknown_tool");
        metrics.duplicate_dropped("telegram");
        metrics.delivery_failed("telegram", "transient");
        metrics.task_run(RunStatus::Queued, 300);
        metrics.task_run(RunStatus::Missed, 7_200_000);
        let text = metrics.render(&Snapshot {
            queue_depth: Some(2),
            outbox_backlog: Some(vec![("telegram".to_owned(), 1)]),
            turns_running: 1,
            adapters: vec![("telegram".to_owned(), "retrying", false)],
            draining: false,
            tasks_active: Some(3),
        });
        let expected = [
            ("switchboard_turns_total{outcome=\"answered\"}", 1.0),
            ("switchboard_turn_duration_seconds_count", 2.0),
            ("switchboard_turn_duration_seconds_bucket{le=\"0.5\"}", 1.0),
            ("switchboard_limit_hits_total{kind=\"token_limit\"}", 1.0),
            (
                "switchboard_model_calls_total{provider=\"openai\",model=\"m\",outcome=\"error\"}",
                1.0,
            ),
            (
                "switchboard_model_tokens_total{provider=\"openai\",model=\"m\",kind=\"cache_read\"}",
                100.0,
            ),
            (
                "switchboard_tool_calls_total{tool=\"unknown\",outcome=\"unknown_tool\"}",
                1.0,
            ),
            (
                "switchboard_inbound_duplicates_dropped_total{platform=\"telegram\"}",
                1.0,
            ),
            (
                "switchboard_outbox_delivery_failures_total{platform=\"telegram\",kind=\"transient\"}",
                1.0,
            ),
            ("switchboard_queue_depth", 2.0),
            ("switchboard_task_runs_total{kind=\"missed\"}", 1.0),
            ("switchboard_task_run_lateness_seconds_count", 1.0),
            (
                "switchboard_task_run_lateness_seconds_bucket{le=\"0.5\"}",
                1.0,
            ),
            ("switchboard_tasks_active", 3.0),
            ("switchboard_outbox_backlog{platform=\"telegram\"}", 1.0),
            ("switchboard_database_up", 1.0),
            ("switchboard_adapter_up{adapter=\"telegram\"}", 0.0),
            (
                "switchboard_adapter_state{adapter=\"telegram\",state=\"retrying\"}",
                1.0,
            ),
        ];
        for (series, value) in expected {
            assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
        }
        assert!(
            !text.contains("made-up"),
            "an invented tool name is no label"
        );
        // A state left is no longer reported.
        let text = metrics.render(&Snapshot {
            adapters: vec![("telegram".to_owned(), "up", true)],
            ..Snapshot::default()
        });
        assert_eq!(
            sample(
                &text,
                "switchboard_adapter_state{adapter=\"telegram\",state=\"retrying\"}"
            ),
            None
        );
        assert_eq!(sample(&text, "switchboard_database_up"), Some(0.0));
    }
}
