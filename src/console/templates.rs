//! The console's HTML, rendered with `maud` (which escapes every value):
//! the layout with its navigation and log-out form, and one function per
//! page. Figures the tests read back carry a `data-k` attribute.

use std::collections::BTreeMap;

use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::charts::{Bar, bar_chart};
use crate::platforms::AdapterStatus;
use crate::store::{
    ApprovalRow, ConsoleCompaction, ConsoleMessage, ConsolePrincipal, ConsoleSession, ConsoleTurn,
    PairingRequest, SessionRow,
};

/// The console's style sheet, inline (no other request, no script).
const CSS: &str = r#"
:root { --fg:#1d2430; --muted:#5f6b7a; --line:#d9dee5; --bg:#f6f7f9; --accent:#2f6fdf; --bad:#c23b3b; --ok:#2e8b57; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color:var(--fg); background:var(--bg); }
header { background:#1d2430; color:#fff; }
header nav { display:flex; gap:1.2em; align-items:center; max-width:1200px; margin:0 auto; padding:.6em 1em; }
header a { color:#cfd8e3; text-decoration:none; }
header a.active, header a:hover { color:#fff; }
header .brand { font-weight:700; color:#fff; margin-right:1em; }
header form { margin-left:auto; }
main { max-width:1200px; margin:0 auto; padding:1em; }
h1 { font-size:1.4em; margin:.4em 0 .8em; }
h2 { font-size:1.1em; margin:1.4em 0 .5em; }
table { border-collapse:collapse; width:100%; background:#fff; margin-bottom:1em; }
th, td { text-align:left; padding:.35em .6em; border-bottom:1px solid var(--line); vertical-align:top; }
th { background:#eef1f5; font-weight:600; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
.cards { display:grid; grid-template-columns:repeat(auto-fill, minmax(170px, 1fr)); gap:.7em; margin-bottom:1em; }
.card { background:#fff; border:1px solid var(--line); border-radius:6px; padding:.6em .8em; }
.card .v { font-size:1.5em; font-weight:600; }
.card .k { color:var(--muted); font-size:.85em; }
.charts { display:grid; grid-template-columns:repeat(auto-fill, minmax(460px, 1fr)); gap:1em; }
figure.chart { background:#fff; border:1px solid var(--line); border-radius:6px; margin:0; padding:.6em; }
figure.chart figcaption { font-weight:600; margin-bottom:.3em; }
svg { width:100%; height:auto; }
svg .bar { fill:var(--accent); }
svg .axis { stroke:#9aa5b1; stroke-width:1; }
svg .tick { font-size:10px; fill:var(--muted); }
.empty, .muted { color:var(--muted); }
.state-up, .state-standby { color:var(--ok); font-weight:600; }
.state-retrying, .state-failed, .state-starting, .state-stopped { color:var(--bad); font-weight:600; }
form.inline { display:inline; }
form.search { display:flex; gap:.5em; flex-wrap:wrap; margin-bottom:1em; }
input, select, button { font:inherit; padding:.3em .5em; }
button { cursor:pointer; }
.turn { background:#fff; border:1px solid var(--line); border-radius:6px; margin-bottom:1em; }
.turn > .meta { background:#eef1f5; padding:.4em .7em; font-size:.9em; display:flex; flex-wrap:wrap; gap:.4em 1.2em; }
.msg { padding:.4em .7em; border-top:1px solid var(--line); white-space:pre-wrap; word-break:break-word; }
.cache-miss { color:var(--bad); }
.msg .role { font-weight:600; color:var(--muted); margin-right:.5em; }
.msg.hidden { opacity:.55; }
.msg.replaced { border-left:4px solid #e0b341; }
details > summary { cursor:pointer; color:var(--accent); }
pre { white-space:pre-wrap; word-break:break-word; background:#f3f5f8; padding:.4em; margin:.3em 0; }
.compaction { background:#fff8e6; border:1px solid #e0b341; border-radius:6px; padding:.5em .7em; margin-bottom:1em; }
.notice { background:#e8f4ec; border:1px solid #9fd3b2; padding:.5em .7em; border-radius:6px; margin-bottom:1em; }
.error { background:#fbeaea; border:1px solid #e3a3a3; padding:.5em .7em; border-radius:6px; margin-bottom:1em; }
.pager { display:flex; gap:1em; margin:1em 0; }
.login { max-width:340px; margin:4em auto; background:#fff; border:1px solid var(--line); border-radius:8px; padding:1.2em; }
.login input { width:100%; margin:.3em 0 .8em; }
"#;

/// The section a page belongs to, highlighted in the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Overview,
    Conversations,
    People,
    Tasks,
    Usage,
}

/// A whole page: `csrf` is the session's token for the log-out form
/// (`None` on the login page: no navigation).
pub fn layout(title: &str, nav: Option<Nav>, csrf: Option<&str>, body: Markup) -> Markup {
    let link = |target: Nav, href: &str, text: &str| {
        html! { a href=(href) class=[(nav == Some(target)).then_some("active")] { (text) } }
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Switchboard console" }
                style { (PreEscaped(CSS)) }
            }
            body {
                @if let Some(csrf) = csrf {
                    header {
                        nav {
                            a.brand href="/console" { "Switchboard" }
                            (link(Nav::Overview, "/console", "Overview"))
                            (link(Nav::Conversations, "/console/conversations", "Conversations"))
                            (link(Nav::People, "/console/people", "People"))
                            (link(Nav::Tasks, "/console/tasks", "Tasks"))
                            (link(Nav::Usage, "/console/usage", "Usage"))
                            form.inline method="post" action="/console/logout" {
                                input type="hidden" name="csrf" value=(csrf);
                                button type="submit" { "Log out" }
                            }
                        }
                    }
                }
                main {
                    @if nav.is_some() { h1 { (title) } }
                    (body)
                }
            }
        }
    }
}

/// The login form.
pub fn login(csrf: &str, error: Option<&str>, has_password: bool) -> Markup {
    let body = html! {
        div.login {
            h1 { "Switchboard console" }
            @if let Some(error) = error { p.error { (error) } }
            @if has_password {
                form method="post" action="/console/login" {
                    input type="hidden" name="csrf" value=(csrf);
                    label for="password" { "Password" }
                    input #password type="password" name="password" autocomplete="current-password" required autofocus;
                    button type="submit" { "Log in" }
                }
            } @else {
                p.muted { "Password login is not configured (console.password_hash); send the admin key as a bearer token." }
            }
        }
    };
    layout("Log in", None, None, body)
}

/// Milliseconds as `850 ms` or `1.2 s`.
pub fn duration(ms: i64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        // Latencies are far below 2^52 ms: the cast is exact.
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// Dollars with four decimals.
pub fn usd(dollars: f64) -> String {
    format!("${dollars:.4}")
}

/// Billionths of a dollar as dollars.
pub fn nanousd(nanos: i64) -> String {
    // Costs are far below 2^52 nano-dollars: the cast is exact.
    usd(nanos as f64 / 1e9)
}

/// A share as a percentage with one decimal.
pub fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// The share of `usage`'s input read from the prompt cache.
fn cache_share(usage: &crate::domain::Usage) -> f64 {
    if usage.input_tokens == 0 {
        0.0
    } else {
        // Token counts are far below 2^52: the division is exact enough.
        usage.cache_read_tokens as f64 / usage.input_tokens as f64
    }
}

/// Unix milliseconds as `YYYY-MM-DD HH:MM:SS` (UTC).
pub fn time(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_else(|_| ms.to_string())
}

/// Tokens and cost of one day.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DayFigures {
    /// `YYYY-MM-DD`.
    pub day: String,
    pub calls: u64,
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    /// Estimated from `[prices]`; models without a price count as 0.
    pub cost_usd: f64,
}

impl DayFigures {
    /// The share of input tokens read from the provider's prompt cache.
    pub fn cache_share(&self) -> f64 {
        if self.input == 0 {
            0.0
        } else {
            // Token counts are far below 2^52: the casts are exact.
            self.cache_read as f64 / self.input as f64
        }
    }
}

/// Everything the overview shows.
#[derive(Debug, Clone, Default)]
pub struct OverviewView {
    /// Finished turns in each of the last 24 hours (label: UTC hour).
    pub turns_per_hour: Vec<Bar>,
    pub turns_24h: i64,
    pub p50_ms: Option<i64>,
    pub p95_ms: Option<i64>,
    /// The last 14 days, oldest first (days without calls included).
    pub days: Vec<DayFigures>,
    /// Per model over the same days.
    pub models: Vec<(String, DayFigures)>,
    /// Turns stopped by a limit over the same days, per outcome.
    pub limit_hits: Vec<(String, i64)>,
    pub adapters: BTreeMap<String, AdapterStatus>,
    /// Replies waiting for delivery, per platform.
    pub outbox: Vec<(String, i64)>,
    pub queue_depth: i64,
}

/// The overview page's body.
pub fn overview(view: &OverviewView) -> Markup {
    let today = view.days.last().cloned().unwrap_or_default();
    let backlog: i64 = view.outbox.iter().map(|(_, count)| count).sum();
    let limit_hits: i64 = view.limit_hits.iter().map(|(_, count)| count).sum();
    let card = |key: &str, label: &str, value: String| {
        html! { div.card { div.v data-k=(key) { (value) } div.k { (label) } } }
    };
    let show_ms = |ms: Option<i64>| ms.map_or_else(|| "–".to_owned(), duration);
    let per_day = |value: fn(&DayFigures) -> f64| -> Vec<Bar> {
        view.days
            .iter()
            .map(|day| Bar {
                // `MM-DD` of `YYYY-MM-DD`.
                label: day.day.get(5..).unwrap_or(&day.day).to_owned(),
                value: value(day),
            })
            .collect()
    };
    // Token counts are far below 2^52: the casts are exact.
    let input_bars = per_day(|day| day.input as f64);
    let output_bars = per_day(|day| day.output as f64);
    let cost_bars = per_day(|day| day.cost_usd);
    let share_bars = per_day(DayFigures::cache_share);
    let model_bars: Vec<Bar> = view
        .models
        .iter()
        .map(|(model, figures)| Bar {
            label: model.clone(),
            value: figures.cache_share(),
        })
        .collect();
    html! {
        div.cards {
            (card("turns-24h", "turns, last 24 h", view.turns_24h.to_string()))
            (card("latency-p50", "p50 turn latency, 24 h", show_ms(view.p50_ms)))
            (card("latency-p95", "p95 turn latency, 24 h", show_ms(view.p95_ms)))
            (card("tokens-in-today", "input tokens today (UTC)", today.input.to_string()))
            (card("tokens-out-today", "output tokens today", today.output.to_string()))
            (card("cost-today", "estimated cost today", usd(today.cost_usd)))
            (card("cache-share-today", "input read from cache today", percent(today.cache_share())))
            (card("limit-hits", "limit hits, 14 days", limit_hits.to_string()))
            (card("outbox-backlog", "replies waiting (outbox)", backlog.to_string()))
            (card("queue-depth", "messages queued or running", view.queue_depth.to_string()))
        }
        div.charts {
            (bar_chart("Turns per hour (UTC), last 24 h", &view.turns_per_hour, None, |v| format!("{v:.0}")))
            (bar_chart("Estimated cost per day", &cost_bars, None, usd))
            (bar_chart("Input tokens per day", &input_bars, None, |v| format!("{v:.0}")))
            (bar_chart("Output tokens per day", &output_bars, None, |v| format!("{v:.0}")))
            (bar_chart("Prompt-cache read share per day", &share_bars, Some(1.0), percent))
            (bar_chart("Prompt-cache read share per model, 14 days", &model_bars, Some(1.0), percent))
        }
        h2 { "Adapters" }
        @if view.adapters.is_empty() {
            p.muted { "No platform adapter is configured." }
        } @else {
            table {
                tr { th { "adapter" } th { "state" } th { "since" } th.num { "failed attempts" } th { "last error" } }
                @for (name, status) in &view.adapters {
                    tr data-adapter=(name) {
                        td { (name) }
                        td class=(format!("state-{}", status.state.as_str())) { (status.state.as_str()) }
                        td { (status.since) }
                        td.num { (status.failed_attempts) }
                        td { (status.last_error.as_deref().unwrap_or("")) }
                    }
                }
            }
        }
        h2 { "Limit hits, last 14 days" }
        @if view.limit_hits.is_empty() {
            p.muted { "No turn was stopped by a limit." }
        } @else {
            table {
                tr { th { "limit" } th.num { "turns stopped" } }
                @for (outcome, count) in &view.limit_hits {
                    tr { td { (outcome) } td.num data-k=(format!("limit-{outcome}")) { (count) } }
                }
            }
        }
        h2 { "Outbox backlog" }
        @if view.outbox.is_empty() {
            p.muted { "Every reply is delivered." }
        } @else {
            table {
                tr { th { "platform" } th.num { "waiting" } }
                @for (platform, count) in &view.outbox {
                    tr { td { (platform) } td.num { (count) } }
                }
            }
        }
        h2 { "Per day" }
        (days_table(&view.days))
    }
}

fn days_table(days: &[DayFigures]) -> Markup {
    html! {
        table {
            tr {
                th { "day" } th.num { "calls" } th.num { "input" } th.num { "cache read" }
                th.num { "cache write" } th.num { "output" } th.num { "cache share" } th.num { "cost" }
            }
            @for day in days.iter().rev() {
                tr {
                    td { (day.day) } td.num { (day.calls) } td.num { (day.input) }
                    td.num { (day.cache_read) } td.num { (day.cache_write) } td.num { (day.output) }
                    td.num { (percent(day.cache_share())) } td.num { (usd(day.cost_usd)) }
                }
            }
        }
    }
}

/// The conversation search form's values.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(default)]
pub struct SearchForm {
    pub q: String,
    pub platform: String,
    pub principal: String,
    pub page: Option<u32>,
}

impl SearchForm {
    /// The query string of this search at `page`.
    pub fn link(&self, page: u32) -> String {
        let query: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("q", &self.q)
            .append_pair("platform", &self.platform)
            .append_pair("principal", &self.principal)
            .append_pair("page", &page.to_string())
            .finish();
        format!("?{query}")
    }
}

/// Previous/next links; `link` makes the href of a page.
pub(super) fn pager(page: u32, more: bool, link: impl Fn(u32) -> String) -> Markup {
    html! {
        div.pager {
            @if page > 1 { a href=(link(page - 1)) { "← previous" } }
            span.muted { "page " (page) }
            @if more { a href=(link(page + 1)) { "next →" } }
        }
    }
}

/// The conversation list.
pub fn conversations(
    form: &SearchForm,
    sessions: &[ConsoleSession],
    page: u32,
    more: bool,
) -> Markup {
    html! {
        form.search method="get" action="/console/conversations" {
            input type="search" name="q" value=(form.q) placeholder="title or text";
            input type="text" name="platform" value=(form.platform) placeholder="platform";
            input type="text" name="principal" value=(form.principal) placeholder="principal id" size="10";
            button type="submit" { "Search" }
        }
        @if sessions.is_empty() {
            p.muted { "No conversation matches." }
        } @else {
            table {
                tr { th { "conversation" } th { "platform" } th { "chat" } th.num { "principal" } th { "model" } th { "last active (UTC)" } }
                @for session in sessions {
                    tr {
                        td {
                            a href=(format!("/console/conversations/{}", session.id)) {
                                (session_label(session.title.as_deref(), session.first_text.as_deref(), session.id.as_str()))
                            }
                        }
                        td { (session.platform) }
                        td { (session.chat_id) }
                        td.num { (session.principal_id.map(|id| id.to_string()).unwrap_or_default()) }
                        td { (session.model) }
                        td { (time(session.updated_at)) }
                    }
                }
            }
        }
        (pager(page, more, |page| form.link(page)))
    }
}

/// A conversation's name: its title, else the start of its first message.
fn session_label(title: Option<&str>, first_text: Option<&str>, id: &str) -> String {
    let text = title
        .or(first_text)
        .map(str::trim)
        .filter(|text| !text.is_empty())
        .unwrap_or(id);
    let mut label: String = text.chars().take(80).collect();
    if text.chars().count() > 80 {
        label.push('…');
    }
    label
}

/// One conversation, a page of its turns.
pub struct ConversationView<'a> {
    pub session: &'a SessionRow,
    pub turns: &'a [ConsoleTurn],
    pub messages: &'a [ConsoleMessage],
    /// The approvals and questions the page's turns asked.
    pub approvals: &'a [ApprovalRow],
    pub compactions: &'a [ConsoleCompaction],
    pub page: u32,
    pub more: bool,
}

/// The conversation page's body.
pub fn conversation(view: &ConversationView<'_>) -> Markup {
    let session = view.session;
    let latest = view.compactions.last();
    let replaced_by = |message: &ConsoleMessage| {
        latest.filter(|c| {
            message.scope.is_empty()
                && message.id > c.pinned_id
                && message.id <= c.through_id
                && Some(message.id) != c.kept_id
        })
    };
    html! {
        table {
            tr { th { "session" } td data-k="session-id" { (session.id) } th { "platform" } td { (session.platform) " · chat " (session.chat_id) } }
            tr { th { "model" } td { (session.model) } th { "principal" } td { (session.principal.map(|p| p.to_string()).unwrap_or_else(|| "– (group)".to_owned())) } }
            tr {
                th { "tokens (in / cache read / out)" }
                td { (session.totals.input_tokens) " / " (session.totals.cache_read_tokens) " / " (session.totals.output_tokens) }
                th { "started / last active (UTC)" }
                td { (time(session.created_at)) " / " (time(session.updated_at)) }
            }
        }
        @for compaction in view.compactions {
            div.compaction {
                strong { "Compaction #" (compaction.id) }
                " at " (time(compaction.created_at)) ": a summary replaced messages "
                (compaction.pinned_id + 1) "–" (compaction.through_id)
                @if let Some(kept) = compaction.kept_id { " (message " (kept) " kept)" }
                @if Some(compaction) != latest { " (superseded by a later compaction)" }
                details { summary { "summary" } pre { (compaction.summary) } }
            }
        }
        @if view.turns.is_empty() { p.muted { "No turns on this page." } }
        @for turn in view.turns {
            section.turn data-turn=(turn.id) {
                div.meta {
                    strong { "turn " (turn.id) }
                    span { "from " (turn.sender_name.as_deref().unwrap_or(&turn.sender_id)) }
                    span data-k="turn-status" { (turn.status) @if let Some(outcome) = &turn.outcome { " · " (outcome) } }
                    span { (time(turn.received_at)) }
                    @if let Some(finished) = turn.finished_at { span { "took " (duration(finished - turn.received_at)) } }
                    span { (turn.usage.calls) @if turn.usage.calls == 1 { " model call" } @else { " model calls" } }
                    span { "tokens in " (turn.usage.usage.input_tokens) " (cache " (turn.usage.usage.cache_read_tokens) ") · out " (turn.usage.usage.output_tokens) }
                    @if turn.usage.usage.input_tokens > 0 {
                        span title="the share of the turn's input read from the provider's prompt cache" data-k="cache-share" {
                            "cache read " (percent(cache_share(&turn.usage.usage)))
                        }
                    }
                    @if let Some(miss) = &turn.cache_miss {
                        span.cache-miss title="a model call read less from the prompt cache than the previous call left there" data-k="cache-miss" {
                            "cache miss: " (miss)
                        }
                    }
                    span { "cost " (turn.cost_nanousd.map_or_else(|| "–".to_owned(), nanousd)) }
                    span.muted title="on every log line of the turn; the request id is its first model call's" {
                        @if let Some(trace) = &turn.trace_id { "trace_id=" span data-k="trace-id" { (trace) } " · " }
                        "inbound_id=" (turn.id)
                        @if let Some(request) = &turn.request_id { " · request " (request) }
                    }
                }
                @let messages: Vec<&ConsoleMessage> = view.messages.iter().filter(|m| m.task_id == Some(turn.id)).collect();
                @if messages.is_empty() {
                    div.msg { span.role { "message" } (turn.text) }
                }
                @for message in messages {
                    (message_markup(message, replaced_by(message)))
                }
                @let approvals: Vec<&ApprovalRow> = view.approvals.iter().filter(|a| a.inbound_id == turn.id).collect();
                @if !approvals.is_empty() { (approvals_table(&approvals)) }
            }
        }
        (pager(view.page, view.more, |page| format!("?page={page}")))
    }
}

/// The audit of a turn's approvals and questions: what was asked (the
/// complete arguments and their hash), by whom, and how it was decided.
fn approvals_table(approvals: &[&ApprovalRow]) -> Markup {
    html! {
        table.approvals {
            tr {
                th { "approval" } th { "kind" } th { "tool" } th { "arguments" } th { "sha-256" }
                th { "requester" } th { "outcome" } th { "decided by" } th { "via" }
                th { "asked (UTC)" } th { "decided / expires (UTC)" }
            }
            @for approval in approvals {
                tr data-approval=(approval.id) {
                    td.num { "#" (approval.id) }
                    td data-k="approval-kind" { (approval.kind.as_str()) }
                    td data-k="approval-tool" { (approval.tool) }
                    td { pre data-k="approval-arguments" { (approval.arguments) } }
                    td { code title=(approval.arguments_sha) data-k="approval-sha" { (short_sha(&approval.arguments_sha)) } }
                    td data-k="approval-requester" {
                        (approval.platform) ":" (approval.sender_id)
                        @if let Some(principal) = approval.principal_id { " (principal " (principal) ")" }
                    }
                    td {
                        span data-k="approval-status" { (approval.status.as_str()) }
                        @if let Some(answer) = &approval.answer { ": " span data-k="approval-answer" { (answer) } }
                    }
                    td data-k="approval-decided-by" { (approval.decided_by.as_deref().unwrap_or("–")) }
                    td data-k="approval-via" { (approval.decided_via.as_deref().unwrap_or("–")) }
                    td data-k="approval-asked" { (time(approval.created_at)) }
                    td {
                        @if let Some(decided) = approval.decided_at {
                            span data-k="approval-decided" { (time(decided)) }
                        } @else {
                            "expires " span data-k="approval-expires" { (time(approval.expires_at)) }
                        }
                    }
                }
            }
        }
    }
}

/// The first 12 hex digits of a hash.
fn short_sha(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// One stored entry: text shown, tool calls and results folded.
fn message_markup(message: &ConsoleMessage, replaced: Option<&ConsoleCompaction>) -> Markup {
    let classes = [
        Some("msg"),
        message.hidden.then_some("hidden"),
        replaced.map(|_| "replaced"),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(" ");
    let calls: Vec<serde_json::Value> = message
        .tool_calls
        .as_deref()
        .and_then(|calls| serde_json::from_str(calls).ok())
        .unwrap_or_default();
    let inner = html! {
        @if message.role == "tool" {
            details {
                summary {
                    @if message.is_error { "tool error" } @else { "tool result" }
                    @if let Some(id) = &message.tool_call_id { " (" (id) ")" }
                }
                pre { (message.content.as_deref().unwrap_or("")) }
            }
        } @else {
            span.role { (message.role) }
            (message.content.as_deref().unwrap_or(""))
            @for call in &calls {
                details {
                    summary {
                        "tool call: " (call["name"].as_str().unwrap_or("?"))
                        @if let Some(id) = call["id"].as_str() { " (" (id) ")" }
                    }
                    pre { (call["arguments"].as_str().map_or_else(|| call["arguments"].to_string(), str::to_owned)) }
                }
            }
        }
        @if message.hidden { " " span.muted { "(hidden by /undo or /retry)" } }
        @if let Some(compaction) = replaced { " " span.muted { "(replaced by compaction #" (compaction.id) ")" } }
    };
    html! {
        div class=(classes) data-message=(message.id) {
            @if message.scope.is_empty() {
                (inner)
            } @else {
                details { summary { "sub-agent " (message.scope) } (inner) }
            }
        }
    }
}

/// A principal with today's spend, for the people page.
pub struct PeopleView<'a> {
    pub principals: &'a [ConsolePrincipal],
    pub pairing: &'a [PairingRequest],
    /// `limits.principal_daily_usd` (0: no cap).
    pub cap_usd: f64,
    pub csrf: &'a str,
    pub notice: Option<&'a str>,
    pub page: u32,
    pub more: bool,
}

/// The people page's body.
pub fn people(view: &PeopleView<'_>) -> Markup {
    html! {
        @if let Some(notice) = view.notice { p.notice data-k="notice" { (notice) } }
        h2 { "Pairing requests" }
        @if view.pairing.is_empty() {
            p.muted { "No pairing request is waiting." }
        } @else {
            table {
                tr { th { "code" } th { "who" } th { "asked (UTC)" } th { "decision" } }
                @for request in view.pairing {
                    tr data-pairing=(request.code) {
                        td { code { (request.code) } }
                        td { (request.platform) ":" (request.user_id) @if let Some(name) = &request.display_name { " (" (name) ")" } }
                        td { (time(request.created_at)) }
                        td {
                            @for (decision, label) in [("approve", "Approve"), ("deny", "Deny")] {
                                form.inline method="post" action="/console/pairing" {
                                    input type="hidden" name="csrf" value=(view.csrf);
                                    input type="hidden" name="code" value=(request.code);
                                    input type="hidden" name="decision" value=(decision);
                                    button type="submit" { (label) }
                                }
                                " "
                            }
                        }
                    }
                }
            }
        }
        h2 { "Principals" }
        p.muted {
            "Spend is today's (UTC), estimated when each call was made. "
            @if view.cap_usd > 0.0 { "Daily cap: " (usd(view.cap_usd)) "." } @else { "No daily cap (limits.principal_daily_usd = 0)." }
        }
        table {
            tr { th.num { "principal" } th { "identities" } th { "approved" } th.num { "spent today" } th.num { "of cap" } th { "since (UTC)" } }
            @for principal in view.principals {
                tr data-principal=(principal.id) {
                    td.num { a href=(format!("/console/conversations?principal={}", principal.id)) { (principal.id) } }
                    td {
                        @for identity in &principal.identities {
                            div {
                                (identity.platform) ":" (identity.user_id)
                                @if identity.account != "default" && !identity.account.is_empty() { span.muted { " @" (identity.account) } }
                                @if principal.identities.len() > 1 {
                                    " "
                                    form.inline method="post" action="/console/people/unlink" {
                                        input type="hidden" name="csrf" value=(view.csrf);
                                        input type="hidden" name="identity_id" value=(identity.id);
                                        button type="submit" title="detach this identity into a principal of its own" { "unlink" }
                                    }
                                }
                            }
                        }
                    }
                    td { @if principal.approved { "yes" } @else { "–" } }
                    td.num data-k=(format!("spent-{}", principal.id)) { (nanousd(principal.spent_nanousd)) }
                    td.num {
                        @if view.cap_usd > 0.0 {
                            // Costs are far below 2^52 nano-dollars: the cast is exact.
                            (percent(principal.spent_nanousd as f64 / 1e9 / view.cap_usd))
                        } @else { "–" }
                    }
                    td { (time(principal.created_at)) }
                }
            }
        }
        (pager(view.page, view.more, |page| format!("?page={page}")))
    }
}

/// Usage totals of one group (a principal, a model or a day).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageLine {
    pub key: String,
    pub figures: DayFigures,
}

/// Everything the usage page shows.
pub struct UsageView<'a> {
    pub days: u32,
    pub by_principal: &'a [UsageLine],
    pub by_model: &'a [UsageLine],
    pub by_day: &'a [UsageLine],
    /// A page of `switchboard usage`'s rows: principal, session, day, model.
    pub rows: &'a [crate::store::UsageRow],
    pub row_cost: &'a dyn Fn(&crate::store::UsageRow) -> Option<f64>,
    pub page: u32,
    pub more: bool,
}

fn usage_table(heading: &str, key: &str, lines: &[UsageLine]) -> Markup {
    html! {
        h2 { (heading) }
        @if lines.is_empty() { p.muted { "No model calls." } } @else {
            table {
                tr {
                    th { (key) } th.num { "calls" } th.num { "input" } th.num { "cache read" }
                    th.num { "cache write" } th.num { "output" } th.num { "cache share" } th.num { "cost" }
                }
                @for line in lines {
                    tr {
                        td { (line.key) } td.num { (line.figures.calls) } td.num { (line.figures.input) }
                        td.num { (line.figures.cache_read) } td.num { (line.figures.cache_write) }
                        td.num { (line.figures.output) } td.num { (percent(line.figures.cache_share())) }
                        td.num { (usd(line.figures.cost_usd)) }
                    }
                }
            }
        }
    }
}

/// The usage page's body.
pub fn usage(view: &UsageView<'_>) -> Markup {
    html! {
        p {
            "Costs are estimated from " code { "[prices]" } " (models without a price count as 0), as "
            code { "switchboard usage" } " computes them. "
            a href="/console/usage.csv" download="switchboard-usage.csv" { "Download everything as CSV" }
        }
        form.search method="get" action="/console/usage" {
            label { "Totals over the last " input type="number" name="days" min="1" max="366" value=(view.days); " days" }
            button type="submit" { "Show" }
        }
        (usage_table("By principal", "principal", view.by_principal))
        (usage_table("By model", "model", view.by_model))
        (usage_table("By day", "day", view.by_day))
        h2 { "By principal, session, model and day (all time)" }
        table {
            tr {
                th { "day" } th { "principal" } th { "session" } th { "model" } th.num { "calls" }
                th.num { "input" } th.num { "cache read" } th.num { "output" } th.num { "cost" }
            }
            @for row in view.rows {
                tr {
                    td { (crate::domain::day_label(row.day)) }
                    td { (row.principal_id.map(|id| id.to_string()).unwrap_or_else(|| "-".to_owned())) }
                    td { a href=(format!("/console/conversations/{}", row.session_id)) { (row.session_id) } }
                    td { (row.model) }
                    td.num { (row.summary.calls) }
                    td.num { (row.summary.usage.input_tokens) }
                    td.num { (row.summary.usage.cache_read_tokens) }
                    td.num { (row.summary.usage.output_tokens) }
                    td.num { ((view.row_cost)(row).map_or_else(|| "–".to_owned(), usd)) }
                }
            }
        }
        (pager(view.page, view.more, |page| format!("?days={}&page={page}", view.days)))
    }
}
