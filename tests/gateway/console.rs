//! The operators' web console (`/console`): every route refuses a request
//! without the admin credential and a cross-site form post; the password
//! login and the admin bearer key work; the overview's figures match the
//! database after scripted turns; the usage CSV is the `switchboard usage`
//! report; approving a pairing request lets the waiting Telegram user be
//! answered. And the same through a real browser: `tests/clients/console.mjs`
//! drives headless Chromium with Playwright (`playwright-core` in
//! `tests/clients/node_modules`, Chromium at `/usr/bin/chromium` or
//! `CHROMIUM_PATH`), taking a screenshot of each page. Without them that
//! test prints `SKIPPED: …` and passes, unless
//! `SWITCHBOARD_REQUIRE_CONSOLE_BROWSER=1` (CI) makes that a failure.
//! `SWITCHBOARD_CONSOLE_SCREENSHOTS=DIR` keeps the screenshots in `DIR`
//! (the README's come from `docs/console`).

use std::io::Write as _;
use std::sync::Once;
use std::time::Duration;

use reqwest::StatusCode;
use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use serde_json::Value;
use switchboard::config::Settings;
use switchboard::usage::Price;
use switchboard_test_support::eventually;
use switchboard_test_support::telegram::{FakeTelegram, TgUser};
use tokio::process::Command;

use crate::helpers::{FakeLlm, Reply, TestApp, last_is_tool_result, last_user_text};
use crate::identity::code_in;

const SECRET_ENV: &str = "SWITCHBOARD_TEST_CONSOLE_SECRET";
const KEY_ENV: &str = "SWITCHBOARD_TEST_CONSOLE_KEY";
const ADMIN_KEY: &str = "console-admin-key-for-tests";
const PASSWORD: &str = "correct horse battery staple";

/// A Telegram user the allowlist does not know.
const STRANGER: TgUser = TgUser {
    id: 4242,
    first_name: "Grace",
};

/// Every page a logged-in admin reads.
const READ_ROUTES: [&str; 7] = [
    "/console",
    "/console/conversations",
    "/console/conversations/some-session",
    "/console/people",
    "/console/tasks",
    "/console/usage",
    "/console/usage.csv",
];

/// Every form an admin sends, with a valid body apart from the token.
const POST_ROUTES: [(&str, &str); 3] = [
    ("/console/pairing", "code=ABCDEFGH&decision=approve"),
    ("/console/people/unlink", "identity_id=1"),
    ("/console/logout", ""),
];

/// Enables the console with the test password and admin key.
fn enable_console(settings: &mut Settings) {
    static ENV_SET: Once = Once::new();
    // SAFETY (test): set once per process, before any gateway reads them;
    // nothing else writes these variables.
    ENV_SET.call_once(|| unsafe {
        std::env::set_var(
            SECRET_ENV,
            "a-console-cookie-secret-of-48-characters-for-tests",
        );
        std::env::set_var(KEY_ENV, ADMIN_KEY);
    });
    settings.console.enabled = true;
    settings.console.secret_env = SECRET_ENV.to_owned();
    settings.console.admin_key_env = KEY_ENV.to_owned();
    settings.console.password_hash =
        Some(switchboard::console::auth::hash_password(PASSWORD).expect("hashes"));
    settings.prices.insert(
        "fake-model".to_owned(),
        Price {
            input: 3.0,
            output: 15.0,
            cache_read: 0.3,
            cache_write: 3.75,
            cache_write_1h: None,
        },
    );
}

/// Echoes, except that `calculate: EXPR` gets a calculator round first.
async fn calculating_llm() -> FakeLlm {
    FakeLlm::start(|body| {
        let text = last_user_text(body);
        match text.strip_prefix("calculate: ") {
            Some(_) if last_is_tool_result(body) => Reply::Text("The result is 42.".to_owned()),
            Some(expression) => Reply::TextAndTools(
                "Calculating.".to_owned(),
                vec![(
                    "calc-1".to_owned(),
                    "calculator".to_owned(),
                    serde_json::json!({"expression": expression}).to_string(),
                )],
            ),
            None => Reply::Text(format!("echo: {text}")),
        }
    })
    .await
}

/// A client that does not follow redirects (they are what is checked).
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// The value of `name=…` in a response's `Set-Cookie` headers.
fn set_cookie(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .find(|value| value.starts_with(&format!("{name}=")))
        .map(str::to_owned)
}

/// The first hidden `csrf` field of a page.
fn csrf_in(html: &str) -> String {
    let start = html
        .find("name=\"csrf\" value=\"")
        .unwrap_or_else(|| panic!("no csrf field in {html}"))
        + "name=\"csrf\" value=\"".len();
    html[start..].split('"').next().expect("token").to_owned()
}

/// The text of the element with `data-k="key"`.
fn figure(html: &str, key: &str) -> String {
    let marker = format!("data-k=\"{key}\">");
    let start = html
        .find(&marker)
        .unwrap_or_else(|| panic!("no {key} in the page"))
        + marker.len();
    html[start..]
        .split('<')
        .next()
        .expect("text")
        .trim()
        .to_owned()
}

/// A logged-in browser-like session: its cookie and CSRF token.
struct Admin {
    http: reqwest::Client,
    base: String,
    cookie: String,
    csrf: String,
}

impl Admin {
    /// Logs in through the form, as a browser does.
    async fn login(app: &TestApp) -> Self {
        let http = client();
        let form = http
            .get(app.url("/console/login"))
            .send()
            .await
            .expect("login form");
        assert_eq!(form.status(), StatusCode::OK);
        let login_cookie = set_cookie(&form, "sb_console_login").expect("form cookie");
        assert!(login_cookie.contains("HttpOnly") && login_cookie.contains("SameSite=Strict"));
        let login_cookie = login_cookie.split(';').next().expect("pair").to_owned();
        let csrf = csrf_in(&form.text().await.expect("body"));

        let wrong = http
            .post(app.url("/console/login"))
            .header(COOKIE, &login_cookie)
            .form(&[("password", "not it"), ("csrf", csrf.as_str())])
            .send()
            .await
            .expect("login");
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
        assert!(set_cookie(&wrong, "sb_console").is_none());

        let response = http
            .post(app.url("/console/login"))
            .header(COOKIE, &login_cookie)
            .header("origin", app.url(""))
            .form(&[("password", PASSWORD), ("csrf", csrf.as_str())])
            .send()
            .await
            .expect("login");
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        assert_eq!(response.headers()[LOCATION], "/console");
        let session = set_cookie(&response, "sb_console").expect("session cookie");
        assert!(
            session.contains("HttpOnly")
                && session.contains("SameSite=Strict")
                && session.contains("Path=/console"),
            "{session}"
        );
        let cookie = session.split(';').next().expect("pair").to_owned();
        let overview = http
            .get(app.url("/console"))
            .header(COOKIE, &cookie)
            .send()
            .await
            .expect("overview");
        assert_eq!(overview.status(), StatusCode::OK);
        let csrf = csrf_in(&overview.text().await.expect("body"));
        Self {
            http,
            base: app.url(""),
            cookie,
            csrf,
        }
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        self.http
            .get(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .send()
            .await
            .expect("request")
    }

    async fn page(&self, path: &str) -> String {
        let response = self.get(path).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        response.text().await.expect("body")
    }

    /// Posts `body` (URL-encoded) from the console's own origin.
    async fn post(&self, path: &str, body: &str) -> reqwest::Response {
        self.http
            .post(format!("{}{path}", self.base))
            .header(COOKIE, &self.cookie)
            .header("origin", &self.base)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body.to_owned())
            .send()
            .await
            .expect("request")
    }
}

#[tokio::test]
async fn console_hash_prints_an_argon2_hash_of_the_password_read_from_stdin() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("console-hash")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("binary runs");
    let mut stdin = child.stdin.take().expect("stdin");
    tokio::io::AsyncWriteExt::write_all(&mut stdin, b"s3cret pass\n")
        .await
        .expect("write");
    drop(stdin);
    let output = child.wait_with_output().await.expect("exits");
    assert!(output.status.success());
    let hash = String::from_utf8(output.stdout).expect("utf-8");
    let hash = hash.trim();
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    let parsed = argon2::PasswordHash::new(hash).expect("a PHC string");
    assert!(
        argon2::PasswordVerifier::verify_password(
            &argon2::Argon2::default(),
            b"s3cret pass",
            &parsed
        )
        .is_ok()
    );
}

#[tokio::test]
async fn the_console_is_off_unless_enabled() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let response = client()
        .get(app.url("/console/login"))
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    app.stop().await;
}

#[tokio::test]
async fn every_route_refuses_requests_without_the_credential_or_from_another_site() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, enable_console).await;
    let http = client();

    for path in READ_ROUTES {
        let response = http.get(app.url(path)).send().await.expect("request");
        assert_eq!(response.status(), StatusCode::SEE_OTHER, "{path}");
        assert_eq!(response.headers()[LOCATION], "/console/login", "{path}");
        let forged = http
            .get(app.url(path))
            .header(COOKIE, "sb_console=s.99999999999999.abc.def")
            .send()
            .await
            .expect("request");
        assert_eq!(
            forged.status(),
            StatusCode::SEE_OTHER,
            "forged cookie: {path}"
        );
        let wrong_key = http
            .get(app.url(path))
            .bearer_auth("not-the-key")
            .send()
            .await
            .expect("request");
        assert_eq!(
            wrong_key.status(),
            StatusCode::SEE_OTHER,
            "wrong key: {path}"
        );
    }
    for (path, body) in POST_ROUTES {
        let response = http
            .post(app.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{path}");
    }

    let admin = Admin::login(&app).await;
    let with_token = |body: &str, token: &str| {
        if body.is_empty() {
            format!("csrf={token}")
        } else {
            format!("{body}&csrf={token}")
        }
    };
    for (path, body) in POST_ROUTES {
        let missing = admin.post(path, body).await;
        assert_eq!(missing.status(), StatusCode::FORBIDDEN, "no token: {path}");
        let wrong = admin.post(path, &with_token(body, "0123abcd")).await;
        assert_eq!(wrong.status(), StatusCode::FORBIDDEN, "wrong token: {path}");
        // The right cookie and token, but a browser saying the form came
        // from another site.
        let from_elsewhere = |header: &'static str, value: &'static str| {
            admin
                .http
                .post(app.url(path))
                .header(COOKIE, &admin.cookie)
                .header(header, value)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(with_token(body, &admin.csrf))
                .send()
        };
        let foreign = from_elsewhere("origin", "https://evil.example")
            .await
            .expect("request");
        assert_eq!(
            foreign.status(),
            StatusCode::FORBIDDEN,
            "foreign origin: {path}"
        );
        let cross_site = from_elsewhere("sec-fetch-site", "cross-site")
            .await
            .expect("request");
        assert_eq!(
            cross_site.status(),
            StatusCode::FORBIDDEN,
            "cross-site: {path}"
        );
    }
    // Another session's token is refused too.
    let other = Admin::login(&app).await;
    let stolen = admin
        .post("/console/logout", &with_token("", &other.csrf))
        .await;
    assert_eq!(stolen.status(), StatusCode::FORBIDDEN);
    // A login form posted from another site.
    let login = http
        .post(app.url("/console/login"))
        .header("origin", "https://evil.example")
        .form(&[("password", PASSWORD), ("csrf", "x")])
        .send()
        .await
        .expect("request");
    assert_eq!(login.status(), StatusCode::FORBIDDEN);
    assert!(set_cookie(&login, "sb_console").is_none());

    // With the right token from the own origin the form goes through.
    let logout = admin
        .post("/console/logout", &with_token("", &admin.csrf))
        .await;
    assert_eq!(logout.status(), StatusCode::SEE_OTHER);
    assert!(set_cookie(&logout, "sb_console").is_some_and(|cookie| cookie.contains("Max-Age=0")));
    // Pages refuse framing and scripts.
    let page = admin.get("/console").await;
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(csp.contains("default-src 'none'") && csp.contains("frame-ancestors 'none'"));
    assert_eq!(page.headers()["x-frame-options"], "DENY");
    app.stop().await;
}

#[tokio::test]
async fn the_admin_bearer_key_reads_pages_and_sends_forms_without_a_cookie() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, enable_console).await;
    app.say(None, "someone to unlink").await;
    let http = client();
    for path in READ_ROUTES
        .iter()
        .filter(|path| !path.contains("some-session"))
    {
        let response = http
            .get(app.url(path))
            .bearer_auth(ADMIN_KEY)
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), StatusCode::OK, "{path}");
    }
    let decided = http
        .post(app.url("/console/pairing"))
        .bearer_auth(ADMIN_KEY)
        .form(&[("code", "NOSUCHCD"), ("decision", "deny")])
        .send()
        .await
        .expect("request");
    assert_eq!(decided.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        decided.headers()[LOCATION],
        "/console/people?notice=no-request"
    );
    // The API user's only identity stays where it is.
    let identity = scalar(&app, "SELECT MIN(id) FROM identities").await;
    let unlinked = http
        .post(app.url("/console/people/unlink"))
        .bearer_auth(ADMIN_KEY)
        .form(&[("identity_id", identity)])
        .send()
        .await
        .expect("request");
    assert_eq!(
        unlinked.headers()[LOCATION],
        "/console/people?notice=only-identity"
    );
    let unknown = http
        .get(app.url("/console/conversations/no-such-session"))
        .bearer_auth(ADMIN_KEY)
        .send()
        .await
        .expect("request");
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    app.stop().await;
}

/// One number from the database.
async fn scalar(app: &TestApp, sql: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect(sql)
}

/// The turn latencies of the last day, sorted, as the database has them.
async fn latencies(app: &TestApp) -> Vec<i64> {
    let mut all = sqlx::query_scalar::<_, i64>(
        "SELECT finished_at - received_at FROM inbound WHERE status IN ('done', 'failed') \
         AND finished_at IS NOT NULL AND (outcome IS NULL OR outcome <> 'merged')",
    )
    .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
    .await
    .expect("latencies");
    all.sort_unstable();
    all
}

fn nearest_rank(sorted: &[i64], p: f64) -> i64 {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn shown_duration(ms: i64) -> String {
    switchboard::console::templates::duration(ms)
}

/// The figures the overview should show, read from the database.
async fn expected_overview(app: &TestApp) -> Vec<(&'static str, String)> {
    let today = switchboard::domain::start_of_today_ms();
    let sum = |column: &str| {
        format!(
            "SELECT CAST(COALESCE(SUM({column}), 0) AS BIGINT) FROM usage WHERE created_at >= {today}"
        )
    };
    let input = scalar(app, &sum("input_tokens")).await;
    let output = scalar(app, &sum("output_tokens")).await;
    let read = scalar(app, &sum("cache_read_tokens")).await;
    let write = scalar(app, &sum("cache_write_tokens")).await;
    let fresh = input - read - write;
    let cost =
        (fresh as f64 * 3.0 + output as f64 * 15.0 + read as f64 * 0.3 + write as f64 * 3.75) / 1e6;
    let latencies = latencies(app).await;
    vec![
        ("turns-24h", latencies.len().to_string()),
        ("latency-p50", shown_duration(nearest_rank(&latencies, 0.5))),
        (
            "latency-p95",
            shown_duration(nearest_rank(&latencies, 0.95)),
        ),
        ("tokens-in-today", input.to_string()),
        ("tokens-out-today", output.to_string()),
        ("cost-today", format!("${cost:.4}")),
        (
            "cache-share-today",
            format!("{:.1}%", read as f64 / input as f64 * 100.0),
        ),
        (
            "outbox-backlog",
            scalar(app, "SELECT COUNT(*) FROM outbox WHERE status = 'pending'")
                .await
                .to_string(),
        ),
        (
            "queue-depth",
            scalar(
                app,
                "SELECT COUNT(*) FROM inbound WHERE status IN ('pending', 'running')",
            )
            .await
            .to_string(),
        ),
    ]
}

#[tokio::test]
async fn the_overview_conversations_and_usage_match_the_database() {
    let llm = calculating_llm().await;
    let app = TestApp::spawn_with(&llm, enable_console).await;
    let (session, _) = app.say(None, "hello console").await;
    let (_, answer) = app.say(Some(&session), "calculate: 6*7").await;
    assert_eq!(answer, "Calculating.\n\nThe result is 42.");
    app.say_as("bob", "another conversation").await;
    let admin = Admin::login(&app).await;

    let overview = admin.page("/console").await;
    let expected = expected_overview(&app).await;
    assert_eq!(expected[0].1, "3", "three turns");
    for (key, value) in &expected {
        assert_eq!(&figure(&overview, key), value, "{key}");
    }
    assert!(overview.contains("<svg"), "charts are drawn");

    // Search by text, and by a word in no conversation.
    let found = admin.page("/console/conversations?q=CONSOLE").await;
    assert!(
        found.contains(&format!("/console/conversations/{session}")),
        "{found}"
    );
    assert!(!found.contains("another conversation"));
    let none = admin.page("/console/conversations?q=nowhere%25").await;
    assert!(none.contains("No conversation matches."));
    let by_platform = admin.page("/console/conversations?platform=api").await;
    assert!(by_platform.contains("another conversation"));

    // The transcript: turns with status, tokens and cost; the tool call and
    // its result folded.
    let transcript = admin
        .page(&format!("/console/conversations/{session}"))
        .await;
    assert_eq!(figure(&transcript, "session-id"), session);
    assert_eq!(transcript.matches("data-k=\"turn-status\"").count(), 2);
    assert!(
        transcript.contains("<summary>tool call: calculator (calc-1)</summary>"),
        "{transcript}"
    );
    assert!(
        transcript.contains("<summary>tool result (calc-1)</summary>"),
        "{transcript}"
    );
    assert!(transcript.contains("The result is 42."));
    // Each turn's trace id, as its log lines carry it.
    let traces = sqlx::query_scalar::<_, String>(
        "SELECT trace_id FROM inbound WHERE session_id = $1 ORDER BY id",
    )
    .bind(&session)
    .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
    .await
    .expect("trace ids");
    assert_eq!(traces.len(), 2);
    for trace in &traces {
        assert!(uuid::Uuid::parse_str(trace).is_ok(), "{trace}");
        assert!(
            transcript.contains(&format!("data-k=\"trace-id\">{trace}<")),
            "{trace}"
        );
    }

    // The CSV is the `switchboard usage` report.
    let csv = admin.get("/console/usage.csv").await;
    assert_eq!(csv.headers()["content-type"], "text/csv; charset=utf-8");
    assert!(
        csv.headers()["content-disposition"]
            .to_str()
            .expect("ascii")
            .contains("attachment")
    );
    let csv = csv.text().await.expect("body");
    let rows = app.gateway.store.usage().report().await.expect("report");
    assert_eq!(
        csv,
        switchboard::usage::render_csv(&rows, &app.gateway.settings.prices)
    );
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("day,principal,session,model,calls,"));
    assert_eq!(lines.len(), 1 + rows.len());
    let calls: u64 = lines[1..]
        .iter()
        .map(|line| {
            line.split(',')
                .nth(4)
                .expect("calls")
                .parse::<u64>()
                .expect("number")
        })
        .sum();
    assert_eq!(
        calls,
        u64::try_from(scalar(&app, "SELECT COUNT(*) FROM usage").await).expect("count")
    );
    let usage = admin.page("/console/usage").await;
    assert!(usage.contains("By principal") && usage.contains(&session));
    app.stop().await;
}

#[tokio::test]
async fn compactions_and_limit_hits_are_shown() {
    // Summaries for compaction; endless calculator rounds for `count`.
    let llm = FakeLlm::start(|body| {
        if last_user_text(body).starts_with("[switchboard] Compaction") {
            return Reply::Text("Goal: testing the console. Facts: several turns.".to_owned());
        }
        let text = last_user_text(body);
        if text.starts_with("count") {
            let n = body["messages"].as_array().map_or(0, Vec::len);
            return Reply::Tools(vec![(
                format!("c{n}"),
                "calculator".to_owned(),
                format!("{{\"expression\":\"{n}+1\"}}"),
            )]);
        }
        Reply::Text(format!("echo: {text}"))
    })
    .await;
    // Each fake call reports 127 tokens.
    let app = TestApp::spawn_with(&llm, |s| {
        enable_console(s);
        s.limits.task_max_tokens = 300;
    })
    .await;
    let (session, _) = app.say(None, "the goal").await;
    for turn in 1..6 {
        app.say(Some(&session), &format!("turn {turn}")).await;
    }
    let (_, compacted) = app.say(Some(&session), "/compact").await;
    assert!(
        compacted.starts_with("Older messages were summarised"),
        "{compacted}"
    );
    let (_, stopped) = app.say(Some(&session), "count forever").await;
    assert!(stopped.starts_with("Stopped"), "{stopped}");
    let admin = Admin::login(&app).await;

    let transcript = admin
        .page(&format!("/console/conversations/{session}"))
        .await;
    assert!(transcript.contains("Compaction #1"), "{transcript}");
    assert!(transcript.contains("Goal: testing the console. Facts: several turns."));
    // The entries after the pinned one up to the last it replaces (ids need
    // not be consecutive: a PostgreSQL sequence skips the ids of rolled-back
    // inserts).
    let replaced: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM messages, compactions \
         WHERE messages.session_id = compactions.session_id \
         AND messages.id > compactions.pinned_id AND messages.id <= compactions.through_id",
    )
    .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
    .await
    .expect("one compaction");
    assert!(replaced > 0);
    assert_eq!(
        transcript.matches("(replaced by compaction #1)").count(),
        usize::try_from(replaced).expect("a count"),
        "every replaced entry is marked"
    );
    assert!(transcript.contains("failed · token_limit"), "{transcript}");

    let overview = admin.page("/console").await;
    assert_eq!(figure(&overview, "limit-hits"), "1");
    assert_eq!(figure(&overview, "limit-token_limit"), "1");
    app.stop().await;
}

#[tokio::test]
async fn the_conversation_shows_the_audit_of_each_approval_with_its_arguments_escaped() {
    let llm = calculating_llm().await;
    let app = TestApp::spawn_with(&llm, |s| {
        enable_console(s);
        s.tools.approval.ask = vec!["calculator".to_owned()];
    })
    .await;
    let (status, session, body) = app.chat(None, "calculate: <script>alert(1)</script>").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let session = session.expect("session header");
    let id = body["approval"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("the turn parks: {body}"))
        .to_owned();
    let admin = Admin::login(&app).await;

    // Pending: no decision yet, its expiry shown.
    let page_path = format!("/console/conversations/{session}");
    let pending = admin.page(&page_path).await;
    assert_eq!(figure(&pending, "approval-status"), "pending");
    assert_eq!(figure(&pending, "approval-decided-by"), "–");
    let row = app
        .gateway
        .store
        .approvals()
        .get(id.parse().expect("a number"))
        .await
        .expect("read")
        .expect("the approval");
    assert_eq!(
        figure(&pending, "approval-expires"),
        switchboard::console::templates::time(row.expires_at)
    );

    let decided = app
        .http
        .post(app.url(&format!("/v1/approvals/{id}")))
        .json(&serde_json::json!({"decision": "deny"}))
        .send()
        .await
        .expect("sent");
    assert_eq!(decided.status(), StatusCode::OK);
    let row = app
        .gateway
        .store
        .approvals()
        .get(row.id)
        .await
        .expect("read")
        .expect("the approval");
    let decided_at = row.decided_at.expect("decided");
    let by = row.decided_by.clone().expect("decided by");
    assert!(by.starts_with("api:"), "{by}");

    let page = admin.page(&page_path).await;
    assert_eq!(page.matches("data-approval=").count(), 1, "{page}");
    for (key, value) in [
        ("approval-kind", "tool".to_owned()),
        ("approval-tool", "calculator".to_owned()),
        ("approval-sha", row.arguments_sha[..12].to_owned()),
        (
            "approval-requester",
            format!(
                "api:{}{}",
                row.sender_id,
                row.principal_id
                    .map(|principal| format!(" (principal {principal})"))
                    .unwrap_or_default()
            ),
        ),
        ("approval-status", "denied".to_owned()),
        ("approval-decided-by", by),
        ("approval-via", "api".to_owned()),
        (
            "approval-asked",
            switchboard::console::templates::time(row.created_at),
        ),
        (
            "approval-decided",
            switchboard::console::templates::time(decided_at),
        ),
    ] {
        assert_eq!(figure(&page, key), value, "{key}");
    }
    assert!(
        page.contains(&format!("title=\"{}\"", row.arguments_sha)),
        "the whole hash on hover"
    );
    // The complete arguments, escaped: no script reaches the page.
    assert_eq!(
        figure(&page, "approval-arguments"),
        "{&quot;expression&quot;:&quot;&lt;script&gt;alert(1)&lt;/script&gt;&quot;}"
    );
    assert!(!page.contains("<script>"), "{page}");
    app.stop().await;
}

#[tokio::test]
async fn people_shows_linked_identities_and_unlinks_one() {
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::echo().await;
    let settings = crate::helpers::telegram_settings(&telegram);
    let app = TestApp::spawn_with(&llm, |s| {
        enable_console(s);
        s.telegram = Some(settings);
    })
    .await;
    let (_, link) = app.say_as("alice", "/link").await;
    let linked = telegram
        .ask(STRANGER, &format!("/link {}", code_in(&link)))
        .await;
    assert!(linked.starts_with("Linked"), "{linked}");
    let admin = Admin::login(&app).await;

    let people = admin.page("/console/people").await;
    let (principal, identities) = sqlx::query_as::<_, (i64, i64)>(
        "SELECT principal_id, COUNT(*) FROM identities GROUP BY principal_id \
         ORDER BY COUNT(*) DESC LIMIT 1",
    )
    .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
    .await
    .expect("a principal");
    assert_eq!(identities, 2, "alice's API user and Telegram account");
    let row = people
        .split(&format!("data-principal=\"{principal}\""))
        .nth(1)
        .and_then(|rest| rest.split("</tr>").next())
        .expect("the principal's row");
    assert!(
        row.contains("api:alice") && row.contains("telegram:4242"),
        "{row}"
    );
    assert_eq!(
        row.matches("<button").count(),
        2,
        "an unlink button each: {row}"
    );

    let telegram_identity = scalar(
        &app,
        "SELECT id FROM identities WHERE platform = 'telegram' AND user_id = '4242'",
    )
    .await;
    let unlinked = admin
        .post(
            "/console/people/unlink",
            &format!("identity_id={telegram_identity}&csrf={}", admin.csrf),
        )
        .await;
    assert_eq!(
        unlinked.headers()[LOCATION],
        "/console/people?notice=unlinked"
    );
    let moved = scalar(
        &app,
        &format!("SELECT principal_id FROM identities WHERE id = {telegram_identity}"),
    )
    .await;
    assert_ne!(
        moved, principal,
        "the Telegram account is a principal of its own"
    );
    let after = admin.page("/console/people?notice=unlinked").await;
    assert!(figure(&after, "notice").starts_with("Unlinked"));
    app.stop().await;
}

#[tokio::test]
async fn a_login_on_one_instance_holds_on_another_sharing_the_database() {
    let llm = FakeLlm::echo().await;
    let first = TestApp::spawn_with(&llm, |s| {
        enable_console(s);
        s.server.instance_id = Some("console-a".to_owned());
    })
    .await;
    let mut settings = first.gateway.settings.clone();
    settings.server.instance_id = Some("console-b".to_owned());
    let second = TestApp::start(settings, tempfile::tempdir().expect("tempdir")).await;
    first.say(None, "hello from the first instance").await;

    let admin = Admin::login(&first).await;
    let elsewhere = Admin {
        http: client(),
        base: second.url(""),
        cookie: admin.cookie.clone(),
        csrf: admin.csrf.clone(),
    };
    let page = elsewhere.page("/console/conversations").await;
    assert!(page.contains("hello from the first instance"), "{page}");
    let decided = elsewhere
        .post(
            "/console/pairing",
            &format!("code=NOSUCHCD&decision=deny&csrf={}", admin.csrf),
        )
        .await;
    assert_eq!(
        decided.status(),
        StatusCode::SEE_OTHER,
        "the token holds there too"
    );
    second.stop().await;
    first.stop().await;
}

#[tokio::test]
async fn check_reports_whether_the_console_can_start() {
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let check = |extra: &[(&str, &str)]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_switchboard"));
        command
            .arg("check")
            .current_dir(dir.path())
            .env("SWITCHBOARD__LLM__BASE_URL", llm.openai_base())
            .env("SWITCHBOARD__LLM__MODEL", "fake-model")
            .env("SWITCHBOARD__CONSOLE__ENABLED", "true")
            .env(
                "SWITCHBOARD__CONSOLE__SECRET_ENV",
                "SB_CHECK_CONSOLE_SECRET",
            )
            .env(
                "SWITCHBOARD__CONSOLE__ADMIN_KEY_ENV",
                "SB_CHECK_CONSOLE_KEY",
            )
            .env_remove("SB_CHECK_CONSOLE_SECRET")
            .env_remove("SB_CHECK_CONSOLE_KEY")
            .kill_on_drop(true);
        for (name, value) in extra {
            command.env(name, value);
        }
        command.output()
    };
    let missing = check(&[]).await.expect("runs");
    let said = String::from_utf8_lossy(&missing.stdout);
    assert!(!missing.status.success());
    assert!(
        said.lines()
            .any(|line| line.starts_with("PROBLEM console:")
                && line.contains("SB_CHECK_CONSOLE_SECRET")),
        "{said}"
    );
    let ready = check(&[
        (
            "SB_CHECK_CONSOLE_SECRET",
            "0123456789abcdef0123456789abcdef",
        ),
        ("SB_CHECK_CONSOLE_KEY", "an-admin-key"),
    ])
    .await
    .expect("runs");
    let said = String::from_utf8_lossy(&ready.stdout);
    assert!(
        said.lines()
            .any(|line| line == "ok      console: served at /console (the admin key only)"),
        "{said}"
    );
    assert!(!said.contains("an-admin-key") && !said.contains("0123456789abcdef"));
}

/// A gateway with Telegram and an allowlist the stranger is not on.
async fn with_telegram(llm: &FakeLlm, telegram: &FakeTelegram) -> TestApp {
    let settings = crate::helpers::telegram_settings(telegram);
    TestApp::spawn_with(llm, |s| {
        enable_console(s);
        s.telegram = Some(settings);
        s.access.allowlist = vec!["telegram:1".to_owned()];
        s.limits.principal_daily_usd = 0.01;
    })
    .await
}

#[tokio::test]
async fn approving_a_pairing_request_lets_the_waiting_telegram_user_be_answered() {
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::echo().await;
    let app = with_telegram(&llm, &telegram).await;
    let greeting = telegram.ask(STRANGER, "hello bot").await;
    let code = code_in(&greeting);
    let admin = Admin::login(&app).await;

    let people = admin.page("/console/people").await;
    assert!(
        people.contains(&format!("data-pairing=\"{code}\"")),
        "{people}"
    );
    assert!(people.contains("telegram:4242"));
    let approved = admin
        .post(
            "/console/pairing",
            &format!("code={code}&decision=approve&csrf={}", admin.csrf),
        )
        .await;
    assert_eq!(approved.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        approved.headers()[LOCATION],
        "/console/people?notice=approved"
    );
    let after = admin.page("/console/people?notice=approved").await;
    assert!(!after.contains(&format!("data-pairing=\"{code}\"")));
    assert!(figure(&after, "notice").starts_with("Approved"));

    let answer = telegram.ask(STRANGER, "hello again").await;
    assert_eq!(answer, "echo: hello again");
    assert_eq!(llm.requests().len(), 1, "the first message started no turn");
    app.stop().await;
}

/// Whether Node can load `playwright-core` and Chromium is there; when not,
/// the test is skipped with a notice (a failure when
/// `SWITCHBOARD_REQUIRE_CONSOLE_BROWSER=1`).
async fn browser_available(chromium: &str) -> bool {
    let node = Command::new("node")
        .args([
            "--input-type=module",
            "-e",
            "await import('playwright-core')",
        ])
        .current_dir(clients_dir())
        .output()
        .await
        .is_ok_and(|output| output.status.success());
    let has_chromium = std::path::Path::new(chromium).exists();
    if node && has_chromium {
        return true;
    }
    assert!(
        std::env::var("SWITCHBOARD_REQUIRE_CONSOLE_BROWSER").as_deref() != Ok("1"),
        "SWITCHBOARD_REQUIRE_CONSOLE_BROWSER=1 but node with playwright-core ({node}) or \
         Chromium at {chromium} ({has_chromium}) is missing"
    );
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: the console browser test: it needs node with `playwright-core` in \
         tests/clients/node_modules (found: {node}) and Chromium at {chromium} (found: \
         {has_chromium}); see the README (SWITCHBOARD_REQUIRE_CONSOLE_BROWSER=1 makes this a \
         failure)"
    );
    false
}

fn clients_dir() -> String {
    let root = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned());
    format!("{root}/tests/clients")
}

#[tokio::test]
async fn an_operator_uses_the_console_in_a_real_browser() {
    let chromium =
        std::env::var("CHROMIUM_PATH").unwrap_or_else(|_| "/usr/bin/chromium".to_owned());
    if !browser_available(&chromium).await {
        return;
    }
    let telegram = FakeTelegram::start().await;
    let llm = calculating_llm().await;
    let app = with_telegram(&llm, &telegram).await;
    let (session, _) = app.say(None, "What is six times seven?").await;
    app.say(Some(&session), "calculate: 6*7").await;
    app.say_as("bob", "Summarise the release notes").await;
    let greeting = telegram.ask(STRANGER, "hello bot").await;
    let code = code_in(&greeting);
    eventually("no message queued", || async {
        scalar(
            &app,
            "SELECT COUNT(*) FROM inbound WHERE status IN ('pending', 'running')",
        )
        .await
            == 0
    })
    .await;

    let kept = std::env::var("SWITCHBOARD_CONSOLE_SCREENSHOTS").ok();
    let scratch = tempfile::tempdir().expect("tempdir");
    let shots = kept
        .clone()
        .unwrap_or_else(|| scratch.path().display().to_string());
    std::fs::create_dir_all(&shots).expect("screenshot folder");
    let no_proxy = match std::env::var("NO_PROXY") {
        Ok(hosts) if !hosts.is_empty() => format!("{hosts},127.0.0.1"),
        _ => "127.0.0.1".to_owned(),
    };
    let run = Command::new("node")
        .arg(format!("{}/console.mjs", clients_dir()))
        .args([
            app.url(""),
            PASSWORD.to_owned(),
            shots.clone(),
            session.clone(),
        ])
        .current_dir(clients_dir())
        .env("CHROMIUM_PATH", &chromium)
        .env("NO_PROXY", no_proxy)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), run)
        .await
        .expect("the browser script finishes")
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the browser script failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value =
        serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("not JSON ({err}): {stdout}"));

    assert_eq!(seen["unauthenticated"], "/console/login");
    assert_eq!(seen["afterLogin"], "/console");
    let expected = expected_overview(&app).await;
    for (key, value) in &expected {
        assert_eq!(seen["overview"][key], value.as_str(), "{key}: {seen}");
    }
    assert_eq!(seen["conversation"]["sessionId"], session.as_str());
    assert_eq!(seen["conversation"]["turns"], 2);
    assert!(
        seen["conversation"]["toolCall"]
            .as_str()
            .is_some_and(|text| text.contains("6*7")),
        "{seen}"
    );
    assert_eq!(seen["pairing"]["codes"], serde_json::json!([code]));
    assert!(
        seen["pairing"]["notice"]
            .as_str()
            .is_some_and(|notice| notice.starts_with("Approved")),
        "{seen}"
    );
    assert!(
        seen["csvHeader"]
            .as_str()
            .is_some_and(|header| header.starts_with("day,principal,session,model")),
        "{seen}"
    );
    assert_eq!(seen["loggedOut"], "/console/login");
    for shot in [
        "login",
        "overview",
        "conversations",
        "conversation",
        "people",
        "usage",
    ] {
        let path = format!("{shots}/{shot}.png");
        let bytes = std::fs::read(&path).unwrap_or_else(|err| panic!("{path}: {err}"));
        assert!(bytes.starts_with(b"\x89PNG"), "{path} is a PNG");
    }
    // The approval answered the waiting Telegram user from their next
    // message on.
    let answer = telegram.ask(STRANGER, "hello again").await;
    assert_eq!(answer, "echo: hello again");
    app.stop().await;
}

/// The text of each `usage.cache_miss` of `app`'s database, oldest first.
async fn cache_misses(app: &TestApp) -> Vec<Option<String>> {
    sqlx::query_scalar("SELECT cache_miss FROM usage ORDER BY id")
        .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("misses")
}

/// The value of `switchboard_prompt_cache_misses_total` with `cause`.
async fn misses_counted(app: &TestApp, cause: &str) -> Option<String> {
    let text = app
        .http
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("scraped")
        .text()
        .await
        .expect("body");
    text.lines()
        .find(|line| {
            line.starts_with("switchboard_prompt_cache_misses_total{")
                && line.contains(&format!("cause=\"{cause}\""))
        })
        .and_then(|line| line.rsplit(' ').next())
        .map(str::to_owned)
}

#[tokio::test]
async fn a_broken_prompt_cache_is_shown_on_its_turn_with_why_and_counted() {
    let billing = switchboard_test_support::model::Caching::new();
    let llm = FakeLlm::builder(|body| Reply::Text(format!("echo: {}", last_user_text(body))))
        .billing(billing.clone())
        .start()
        .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = crate::helpers::test_settings(&llm, &dir).await;
    enable_console(&mut settings);
    settings.llm.provider = switchboard::llm::ProviderKind::Anthropic;
    settings.llm.base_url =
        switchboard::domain::BaseUrl::parse(&llm.anthropic_base()).expect("a test URL");
    // Long enough (~1,700 tokens) to be cached.
    settings.agent.persona = "You are a careful assistant. Answer precisely and briefly, cite \
                              what you found, and say plainly when you do not know. "
        .repeat(60);
    let _database = crate::helpers::hold_database(&settings);
    let first = TestApp::start(settings.clone(), tempfile::tempdir().expect("tempdir")).await;

    let (session, _) = first.say(None, "turn 1").await;
    first.say(Some(&session), "turn 2").await;
    assert_eq!(
        cache_misses(&first).await,
        [None, None],
        "turn 2 read turn 1"
    );
    // The provider forgets the conversation (its entries expire on its
    // clock, not the gateway's): nothing changed, and nothing was read.
    billing.advance(Duration::from_secs(600));
    first.say(Some(&session), "turn 3").await;
    let misses = cache_misses(&first).await;
    let miss = misses[2].as_deref().expect("turn 3 missed");
    assert!(
        miss.starts_with("read 0 of ~") && miss.contains("the provider evicted the entry"),
        "{miss}"
    );
    assert_eq!(
        misses_counted(&first, "provider").await.as_deref(),
        Some("1")
    );
    let admin = Admin::login(&first).await;
    let page = admin
        .page(&format!("/console/conversations/{session}"))
        .await;
    assert_eq!(figure(&page, "cache-miss"), format!("cache miss: {miss}"));
    assert!(figure(&page, "cache-share").starts_with("cache read "));
    first.stop().await;

    // After a restart with one tool fewer, the conversation's next call is
    // compared with its last recorded one: the tools changed.
    let mut fewer = settings;
    let removed = fewer.agent.tools.remove(0);
    let second = TestApp::start(fewer, tempfile::tempdir().expect("tempdir")).await;
    second.say(Some(&session), "turn 4").await;
    let misses = cache_misses(&second).await;
    let miss = misses[3].as_deref().expect("turn 4 missed");
    assert!(
        miss.ends_with("the tools changed"),
        "{miss} ({removed} removed)"
    );
    assert_eq!(misses_counted(&second, "tools").await.as_deref(), Some("1"));
    second.stop().await;
}

#[tokio::test]
async fn the_tasks_pages_show_each_task_and_its_runs_with_their_cost() {
    let llm = FakeLlm::start(|body| Reply::Text(format!("done: {}", last_user_text(body)))).await;
    let app = TestApp::spawn_with(&llm, enable_console).await;
    let (session, _) = app.say(None, "hello").await;
    let made: Value = app
        .http
        .post(app.url("/v1/tasks"))
        .json(
            &serde_json::json!({"session_id": session, "prompt": "Check the backups", "in": "90s"}),
        )
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    let id = made["id"].as_i64().expect("a task id");
    let admin = Admin::login(&app).await;
    let live = admin.page("/console/tasks").await;
    assert!(
        live.contains(&format!("href=\"/console/tasks/{id}\"")),
        "{live}"
    );
    assert_eq!(figure(&live, "task-status"), "active");
    assert!(live.contains("Check the backups"));

    app.gateway.clock.advance(Duration::from_secs(91));
    eventually("the run done", || async {
        scalar(&app, "SELECT COUNT(*) FROM task_runs WHERE status = 'done'").await == 1
    })
    .await;
    let listed = admin.page("/console/tasks").await;
    assert!(
        listed.contains("No tasks."),
        "a done task is not live: {listed}"
    );
    let every = admin.page("/console/tasks?all=1").await;
    assert_eq!(figure(&every, "task-status"), "done");
    let page = admin.page(&format!("/console/tasks/{id}")).await;
    assert_eq!(figure(&page, "run-status"), "done");
    assert_eq!(figure(&page, "run-calls"), "1");
    assert!(figure(&page, "run-cost").starts_with('$'), "{page}");
    assert_eq!(
        admin.get("/console/tasks/999").await.status(),
        StatusCode::NOT_FOUND
    );

    // `switchboard usage` attributes the run's call to the task.
    let rows = app.gateway.store.usage().report().await.expect("report");
    let of_task: Vec<_> = rows.iter().filter(|row| row.task_id.is_some()).collect();
    assert_eq!(of_task.len(), 1, "{rows:?}");
    assert_eq!(of_task[0].task_id.map(|task| task.get()), Some(id));
    assert_eq!(of_task[0].summary.calls, 1);
    let csv = switchboard::usage::render_csv(&rows, &app.gateway.settings.prices);
    assert!(csv.lines().next().expect("header").ends_with(",task"));
    assert!(
        csv.lines().any(|line| line.ends_with(&format!(",{id}"))),
        "{csv}"
    );
    app.stop().await;
}
