//! The console's route handlers: each reads through the store, shapes the
//! figures and hands them to [`templates`](super::templates). The only
//! writes are the pairing decisions (through access control, as the
//! `/approve` and `/deny` commands decide) and unlinking an identity (as
//! `/unlink` does).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE, SET_COOKIE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{AppendHeaders, Html, IntoResponse, Redirect, Response};
use maud::Markup;
use serde::Deserialize;

use super::ConsoleState;
use super::auth::{Admin, Kind, LOGIN_COOKIE, LOGIN_PATH, SESSION_COOKIE, cookie, same_origin};
use super::charts::Bar;
use super::templates::{self, DayFigures, Nav, OverviewView, SearchForm, UsageLine};
use crate::domain::{
    PairingStatus, PrincipalId, SessionId, Usage, day_label, now_ms, start_of_today_ms,
};
use crate::session::access::Decision;
use crate::session::texts::NO_PAIRING_REQUEST;
use crate::store::{SessionFilter, StoreError, UsageGroup, UsageKey};
use crate::usage::cost_of;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;
/// Days the overview's per-day figures cover.
const OVERVIEW_DAYS: i64 = 14;
/// Rows per page of a list.
const PAGE_ROWS: i64 = 50;
/// Turns per page of a conversation.
const PAGE_TURNS: i64 = 30;
/// Rows per page of the usage detail.
const PAGE_USAGE_ROWS: i64 = 100;
/// How long a wrong password holds back the next login attempt.
const FAILED_LOGIN_PAUSE: std::time::Duration = std::time::Duration::from_millis(500);

/// Why a page could not be shown.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("database: {0}")]
    Store(#[from] StoreError),
    #[error("not found")]
    NotFound,
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        match self {
            Self::NotFound => (StatusCode::NOT_FOUND, "not found").into_response(),
            Self::Store(err) => {
                tracing::error!(error = %err, "console: the database did not answer");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the database did not answer; see the gateway's log",
                )
                    .into_response()
            }
        }
    }
}

pub(super) type PageResult = Result<Response, PageError>;

pub(super) fn render(title: &str, nav: Nav, admin: &Admin, body: Markup) -> Response {
    Html(templates::layout(title, Some(nav), Some(&admin.csrf), body).into_string()).into_response()
}

/// The page number of a `page` query value (1 when absent or 0).
pub(super) fn page_of(page: Option<u32>) -> u32 {
    page.unwrap_or(1).max(1)
}

pub(super) fn offset_of(page: u32, rows: i64) -> i64 {
    i64::from(page - 1).saturating_mul(rows)
}

/// A `page` query.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PageQuery {
    page: Option<u32>,
    notice: Option<String>,
}

/// Adds `usage` of `model` to `figures`, priced from `prices`.
fn add(
    figures: &mut DayFigures,
    prices: &BTreeMap<String, crate::usage::Price>,
    model: &str,
    calls: u64,
    usage: &Usage,
) {
    figures.calls += calls;
    figures.input += usage.input_tokens;
    figures.output += usage.output_tokens;
    figures.cache_read += usage.cache_read_tokens;
    figures.cache_write += usage.cache_write_tokens;
    figures.cost_usd += cost_of(prices, model, usage).unwrap_or(0.0);
}

/// Usage groups added up per key, in the order the keys come.
fn lines(groups: &[UsageGroup], state: &ConsoleState) -> Vec<UsageLine> {
    let mut lines: Vec<UsageLine> = Vec::new();
    for group in groups {
        if lines.last().is_none_or(|line| line.key != group.key) {
            lines.push(UsageLine {
                key: group.key.clone(),
                figures: DayFigures::default(),
            });
        }
        if let Some(line) = lines.last_mut() {
            add(
                &mut line.figures,
                &state.prices,
                &group.model,
                group.summary.calls,
                &group.summary.usage,
            );
        }
    }
    lines
}

/// The nearest-rank percentile `p` (0–1) of sorted values.
fn percentile(sorted: &[i64], p: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    // Counts are far below 2^52: the casts are exact.
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// `GET /console`: the overview.
pub async fn overview(
    State(state): State<Arc<ConsoleState>>,
    Extension(admin): Extension<Admin>,
) -> PageResult {
    let store = &state.store;
    let now = now_ms();
    let this_hour = now.div_euclid(HOUR_MS);
    let first_hour = this_hour - 23;
    let today = start_of_today_ms().div_euclid(DAY_MS);
    let first_day = today - (OVERVIEW_DAYS - 1);
    let since_day_ms = first_day * DAY_MS;
    let per_hour = store.console().turns_per_hour(first_hour * HOUR_MS).await?;
    let latencies = store.console().turn_latencies(now - DAY_MS).await?;
    let by_day = store
        .console()
        .usage_by(UsageKey::Day, since_day_ms)
        .await?;
    let by_model = store
        .console()
        .usage_by(UsageKey::Model, since_day_ms)
        .await?;
    let limit_hits = store.console().limit_hits(since_day_ms).await?;
    let outbox = store.gauges().outbox_backlog().await?;
    let queue_depth = store.gauges().queue_depth().await?;

    let turns_per_hour = (first_hour..=this_hour)
        .map(|hour| {
            let count = per_hour
                .iter()
                .find(|(h, _)| *h == hour)
                .map_or(0, |(_, count)| *count);
            Bar {
                label: format!("{:02}", hour.rem_euclid(24)),
                // Counts are far below 2^52: the cast is exact.
                value: count as f64,
            }
        })
        .collect();
    let mut days: Vec<DayFigures> = (first_day..=today)
        .map(|day| DayFigures {
            day: day_label(day),
            ..DayFigures::default()
        })
        .collect();
    for group in &by_day {
        let Ok(day) = group.key.parse::<i64>() else {
            continue;
        };
        let index = usize::try_from(day - first_day).ok();
        if let Some(figures) = index.and_then(|index| days.get_mut(index)) {
            add(
                figures,
                &state.prices,
                &group.model,
                group.summary.calls,
                &group.summary.usage,
            );
        }
    }
    let models = lines(&by_model, &state)
        .into_iter()
        .map(|line| (line.key, line.figures))
        .collect();
    let view = OverviewView {
        turns_per_hour,
        turns_24h: per_hour
            .iter()
            .filter(|(hour, _)| *hour >= first_hour)
            .map(|(_, count)| count)
            .sum(),
        p50_ms: percentile(&latencies, 0.50),
        p95_ms: percentile(&latencies, 0.95),
        days,
        models,
        limit_hits,
        adapters: state.platforms.snapshot(),
        outbox,
        queue_depth,
    };
    Ok(render(
        "Overview",
        Nav::Overview,
        &admin,
        templates::overview(&view),
    ))
}

/// `GET /console/conversations`: search.
pub async fn conversations(
    State(state): State<Arc<ConsoleState>>,
    Extension(admin): Extension<Admin>,
    Query(form): Query<SearchForm>,
) -> PageResult {
    let page = page_of(form.page);
    let nonempty = |value: &str| Some(value.trim().to_owned()).filter(|v| !v.is_empty());
    let filter = SessionFilter {
        platform: nonempty(&form.platform),
        principal_id: form.principal.trim().parse().ok().map(PrincipalId::new),
        text: nonempty(&form.q),
    };
    let mut sessions = state
        .store
        .console()
        .sessions(&filter, PAGE_ROWS + 1, offset_of(page, PAGE_ROWS))
        .await?;
    let more = sessions.len() > usize::try_from(PAGE_ROWS).unwrap_or(usize::MAX);
    sessions.truncate(usize::try_from(PAGE_ROWS).unwrap_or(usize::MAX));
    Ok(render(
        "Conversations",
        Nav::Conversations,
        &admin,
        templates::conversations(&form, &sessions, page, more),
    ))
}

/// `GET /console/conversations/{id}`: one conversation, a page of turns.
pub async fn conversation(
    State(state): State<Arc<ConsoleState>>,
    Extension(admin): Extension<Admin>,
    Path(id): Path<String>,
    Query(query): Query<PageQuery>,
) -> PageResult {
    let id = SessionId::parse(&id).map_err(|_| PageError::NotFound)?;
    let store = &state.store;
    let session = store
        .sessions()
        .get(&id)
        .await?
        .ok_or(PageError::NotFound)?;
    let page = page_of(query.page);
    let mut turns = store
        .console()
        .turns(&id, PAGE_TURNS + 1, offset_of(page, PAGE_TURNS))
        .await?;
    let more = turns.len() > usize::try_from(PAGE_TURNS).unwrap_or(usize::MAX);
    turns.truncate(usize::try_from(PAGE_TURNS).unwrap_or(usize::MAX));
    let (messages, approvals) = match (turns.first(), turns.last()) {
        (Some(first), Some(last)) => (
            store.console().messages(&id, first.id, last.id).await?,
            store.console().approvals(&id, first.id, last.id).await?,
        ),
        _ => (Vec::new(), Vec::new()),
    };
    let compactions = store.console().compactions(&id).await?;
    let title = session
        .title
        .clone()
        .unwrap_or_else(|| format!("Conversation {id}"));
    let body = templates::conversation(&templates::ConversationView {
        session: &session,
        turns: &turns,
        messages: &messages,
        approvals: &approvals,
        compactions: &compactions,
        page,
        more,
    });
    Ok(render(&title, Nav::Conversations, &admin, body))
}

/// What a redirect back to the people page says happened.
fn notice_text(notice: &str) -> Option<&'static str> {
    Some(match notice {
        "approved" => "Approved: the sender is answered from their next message on.",
        "denied" => "Denied: the sender's messages are ignored.",
        "no-request" => NO_PAIRING_REQUEST,
        "unlinked" => "Unlinked: the identity is a principal of its own now.",
        "only-identity" => "Not unlinked: it is its principal's only identity.",
        _ => return None,
    })
}

/// `GET /console/people`: principals and the pairing queue.
pub async fn people(
    State(state): State<Arc<ConsoleState>>,
    Extension(admin): Extension<Admin>,
    Query(query): Query<PageQuery>,
) -> PageResult {
    let page = page_of(query.page);
    let store = &state.store;
    let mut principals = store
        .console()
        .principals(
            PAGE_ROWS + 1,
            offset_of(page, PAGE_ROWS),
            start_of_today_ms(),
        )
        .await?;
    let more = principals.len() > usize::try_from(PAGE_ROWS).unwrap_or(usize::MAX);
    principals.truncate(usize::try_from(PAGE_ROWS).unwrap_or(usize::MAX));
    let pairing = store.pairing().requests(PairingStatus::Pending).await?;
    let body = templates::people(&templates::PeopleView {
        principals: &principals,
        pairing: &pairing,
        cap_usd: state.daily_cap_usd,
        csrf: &admin.csrf,
        notice: query.notice.as_deref().and_then(notice_text),
        page,
        more,
    });
    Ok(render("People", Nav::People, &admin, body))
}

/// The pairing form.
#[derive(Debug, Deserialize)]
pub struct PairingForm {
    code: String,
    decision: String,
}

/// `POST /console/pairing`: approve or deny a request, as `/approve CODE`
/// and `/deny CODE` do.
pub async fn decide_pairing(
    State(state): State<Arc<ConsoleState>>,
    axum::Form(form): axum::Form<PairingForm>,
) -> PageResult {
    let decision = match form.decision.as_str() {
        "approve" => Decision::Approve,
        "deny" => Decision::Deny,
        _ => return Ok((StatusCode::BAD_REQUEST, "decision: approve or deny").into_response()),
    };
    let answer = state.access.decide(&form.code, decision).await?;
    let notice = match decision {
        _ if answer == NO_PAIRING_REQUEST => "no-request",
        Decision::Approve => "approved",
        Decision::Deny => "denied",
    };
    tracing::info!(notice, "console: pairing request answered");
    Ok(Redirect::to(&format!("/console/people?notice={notice}")).into_response())
}

/// The unlink form.
#[derive(Debug, Deserialize)]
pub struct UnlinkForm {
    identity_id: i64,
}

/// `POST /console/people/unlink`: detach an identity into a principal of
/// its own, as `/unlink` does.
pub async fn unlink(
    State(state): State<Arc<ConsoleState>>,
    axum::Form(form): axum::Form<UnlinkForm>,
) -> PageResult {
    let store = &state.store;
    let identity = store
        .console()
        .identity_by_id(form.identity_id)
        .await?
        .ok_or(PageError::NotFound)?;
    let notice = match store.principals().unlink_identity(&identity).await? {
        Some(fresh) => {
            tracing::info!(from = %identity.principal, to = %fresh, "console: identity unlinked");
            "unlinked"
        }
        None => "only-identity",
    };
    Ok(Redirect::to(&format!("/console/people?notice={notice}")).into_response())
}

/// The usage page's query.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct UsageQuery {
    days: Option<u32>,
    page: Option<u32>,
}

/// `GET /console/usage`: cost by principal, model and day, and the
/// `switchboard usage` rows.
pub async fn usage(
    State(state): State<Arc<ConsoleState>>,
    Extension(admin): Extension<Admin>,
    Query(query): Query<UsageQuery>,
) -> PageResult {
    let days = query.days.unwrap_or(30).clamp(1, 366);
    let page = page_of(query.page);
    let store = &state.store;
    let since = start_of_today_ms() - (i64::from(days) - 1) * DAY_MS;
    let by_principal = lines(
        &store.console().usage_by(UsageKey::Principal, since).await?,
        &state,
    );
    let by_model = lines(
        &store.console().usage_by(UsageKey::Model, since).await?,
        &state,
    );
    let mut by_day = lines(
        &store.console().usage_by(UsageKey::Day, since).await?,
        &state,
    );
    for line in &mut by_day {
        if let Ok(day) = line.key.parse::<i64>() {
            line.key = day_label(day);
        }
    }
    by_day.reverse();
    let mut rows = store
        .usage()
        .report_page(PAGE_USAGE_ROWS + 1, offset_of(page, PAGE_USAGE_ROWS))
        .await?;
    let more = rows.len() > usize::try_from(PAGE_USAGE_ROWS).unwrap_or(usize::MAX);
    rows.truncate(usize::try_from(PAGE_USAGE_ROWS).unwrap_or(usize::MAX));
    let prices = &state.prices;
    let row_cost = |row: &crate::store::UsageRow| cost_of(prices, &row.model, &row.summary.usage);
    let body = templates::usage(&templates::UsageView {
        days,
        by_principal: &by_principal,
        by_model: &by_model,
        by_day: &by_day,
        rows: &rows,
        row_cost: &row_cost,
        page,
        more,
    });
    Ok(render("Usage", Nav::Usage, &admin, body))
}

/// `GET /console/usage.csv`: the `switchboard usage` report as CSV.
pub async fn usage_csv(State(state): State<Arc<ConsoleState>>) -> PageResult {
    let rows = state.store.usage().report().await?;
    let csv = crate::usage::render_csv(&rows, &state.prices);
    Ok((
        [
            (CONTENT_TYPE, "text/csv; charset=utf-8"),
            (
                CONTENT_DISPOSITION,
                "attachment; filename=\"switchboard-usage.csv\"",
            ),
        ],
        csv,
    )
        .into_response())
}

/// The login page with a fresh form token (and its cookie).
fn login_page(state: &ConsoleState, status: StatusCode, error: Option<&str>) -> Response {
    let credentials = &state.credentials;
    let (value, token) = credentials.issue(Kind::Login, now_ms());
    let page = templates::login(&credentials.csrf(&token), error, credentials.has_password());
    (
        status,
        AppendHeaders([(
            SET_COOKIE,
            credentials.set_cookie(LOGIN_COOKIE, Some(&value), LOGIN_PATH),
        )]),
        Html(page.into_string()),
    )
        .into_response()
}

/// `GET /console/login`: the form (or the overview, when logged in).
pub async fn login_form(State(state): State<Arc<ConsoleState>>, headers: HeaderMap) -> Response {
    let logged_in = cookie(&headers, SESSION_COOKIE)
        .and_then(|value| state.credentials.verify(value, Kind::Session, now_ms()))
        .is_some();
    if logged_in {
        return Redirect::to("/console").into_response();
    }
    login_page(&state, StatusCode::OK, None)
}

/// The login form's fields.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    password: String,
    #[serde(default)]
    csrf: String,
}

/// `POST /console/login`: checks the form's origin and token, then the
/// password; starts a session.
pub async fn login(
    State(state): State<Arc<ConsoleState>>,
    headers: HeaderMap,
    axum::Form(form): axum::Form<LoginForm>,
) -> Response {
    let credentials = &state.credentials;
    if !same_origin(&headers) {
        tracing::warn!("console: cross-site login refused");
        return (StatusCode::FORBIDDEN, "cross-site request refused").into_response();
    }
    let now = now_ms();
    let form_token = cookie(&headers, LOGIN_COOKIE)
        .and_then(|value| credentials.verify(value, Kind::Login, now));
    if !form_token.is_some_and(|token| credentials.csrf_matches(&token, &form.csrf)) {
        return login_page(
            &state,
            StatusCode::FORBIDDEN,
            Some("The login form expired or came from elsewhere; try again."),
        );
    }
    {
        // One password checked at a time, and a wrong one holds the next
        // attempt back: guessing runs at a few tries a second at most.
        let _gate = state.login_gate.lock().await;
        let password = form.password.clone();
        let checked = tokio::task::spawn_blocking({
            let state = Arc::clone(&state);
            move || state.credentials.password_matches(&password)
        })
        .await
        .unwrap_or(false);
        if !checked {
            tracing::warn!("console: failed login");
            tokio::time::sleep(FAILED_LOGIN_PAUSE).await;
            return login_page(&state, StatusCode::UNAUTHORIZED, Some("Wrong password."));
        }
    }
    tracing::info!("console: login");
    let (session, _) = credentials.issue(Kind::Session, now);
    (
        AppendHeaders([
            (
                SET_COOKIE,
                credentials.set_cookie(SESSION_COOKIE, Some(&session), "/console"),
            ),
            (
                SET_COOKIE,
                credentials.set_cookie(LOGIN_COOKIE, None, LOGIN_PATH),
            ),
        ]),
        Redirect::to("/console"),
    )
        .into_response()
}

/// `POST /console/logout`: drops the session cookie.
pub async fn logout(State(state): State<Arc<ConsoleState>>) -> Response {
    (
        AppendHeaders([(
            SET_COOKIE,
            state
                .credentials
                .set_cookie(SESSION_COOKIE, None, "/console"),
        )]),
        Redirect::to(LOGIN_PATH),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn percentiles_are_nearest_rank() {
        let sorted: Vec<i64> = (1..=20).collect();
        assert_eq!(percentile(&sorted, 0.5), Some(10));
        assert_eq!(percentile(&sorted, 0.95), Some(19));
        assert_eq!(percentile(&[7], 0.95), Some(7));
        assert_eq!(percentile(&[], 0.5), None);
    }
}
