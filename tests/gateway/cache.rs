//! The prompt cache to its limit, measured against the fake model's billing
//! model that caches like the providers (`Caching`): the budget's last call
//! keeps the prefix (and is accepted by Anthropic), new conversations share
//! the system and tools prefix on OpenAI, compaction's summary reads the
//! conversation as cached, and a person slower than five minutes still
//! finds the conversation cached with the hour's TTL.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard::config::Settings;
use switchboard::domain::BaseUrl;
use switchboard::llm::ProviderKind;
use switchboard::usage::Price;
use switchboard_test_support::model::Caching;

use crate::helpers::{FakeLlm, Reply, TestApp, last_user_text, same_calculation};

/// A persona long enough (~1,700 tokens) for the providers to cache it.
fn long_persona() -> String {
    "You are a careful assistant. Answer precisely and briefly, cite what you found, and say \
     plainly when you do not know. "
        .repeat(60)
}

/// Whether a request is a call that may not use its tools (the budget's
/// last call), in either wire format.
fn tools_barred(body: &Value) -> bool {
    body["tool_choice"] == "none" || body["tool_choice"]["type"] == "none"
}

fn is_summary_request(body: &Value) -> bool {
    last_user_text(body).starts_with("[switchboard] Compaction")
}

fn on_anthropic(llm: &FakeLlm, s: &mut Settings) {
    s.llm.provider = ProviderKind::Anthropic;
    s.llm.base_url = BaseUrl::parse(&llm.anthropic_base()).expect("a test URL");
}

async fn start(billing: &Caching, script: fn(&Value) -> Reply) -> FakeLlm {
    FakeLlm::builder(script)
        .billing(billing.clone())
        .start()
        .await
}

/// Calculates forever; answers only when it may not call tools.
fn calculate_until_barred(body: &Value) -> Reply {
    if tools_barred(body) {
        Reply::Text("here is what I found".to_owned())
    } else {
        same_calculation(body)
    }
}

#[tokio::test]
async fn the_budgets_last_call_on_anthropic_keeps_its_tools_and_is_answered_from_the_cache() {
    let billing = Caching::new();
    let llm = start(&billing, calculate_until_barred).await;
    let app = TestApp::spawn_with(&llm, |s| {
        on_anthropic(&llm, s);
        s.agent.persona = long_persona();
        s.agent.max_iterations = std::num::NonZero::new(4).unwrap();
        s.limits.repeat_limit = 0;
    })
    .await;

    let (_, reply) = app.say(None, "loop forever").await;

    assert_eq!(reply, "here is what I found");
    let requests: Vec<Value> = llm.requests().iter().map(|r| r.json()).collect();
    assert_eq!(requests.len(), 4);
    let last = requests.last().expect("the final call");
    assert_eq!(last["tool_choice"], json!({"type": "none"}));
    assert_eq!(last["tools"], requests[0]["tools"], "the same tools");
    assert_eq!(last["system"], requests[0]["system"], "the same system");
    let bills = billing.bills();
    // Anthropic keeps tools and system cached across a change of
    // `tool_choice` (only the message blocks are invalidated).
    assert!(
        bills[3].cache_read_tokens >= 1024,
        "the final call read {} tokens from the cache",
        bills[3].cache_read_tokens
    );
    app.stop().await;
}

#[tokio::test]
async fn the_budgets_last_call_on_openai_reads_the_whole_prefix() {
    let billing = Caching::new();
    let llm = start(&billing, calculate_until_barred).await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.agent.persona = long_persona();
        s.agent.max_iterations = std::num::NonZero::new(4).unwrap();
        s.limits.repeat_limit = 0;
    })
    .await;

    let (_, reply) = app.say(None, "loop forever").await;

    assert_eq!(reply, "here is what I found");
    let requests = llm.requests();
    let last = requests.last().expect("the final call").json();
    assert_eq!(last["tool_choice"], "none");
    assert_eq!(last["tools"], requests[0].json()["tools"]);
    let bills = billing.bills();
    assert_eq!(bills.len(), 4);
    // Everything the previous call sent is read, up to OpenAI's 128-token
    // steps.
    assert!(
        bills[3].cache_read_tokens + 128 > bills[2].prompt_tokens,
        "read {} of the previous call's {}",
        bills[3].cache_read_tokens,
        bills[2].prompt_tokens
    );
    app.stop().await;
}

fn echo(body: &Value) -> Reply {
    Reply::Text(format!("echo: {}", last_user_text(body)))
}

#[tokio::test]
async fn a_new_conversation_on_openai_reads_the_system_and_tools_another_one_cached() {
    let billing = Caching::new();
    let llm = start(&billing, echo).await;
    let app = TestApp::spawn_with(&llm, |s| s.agent.persona = long_persona()).await;

    let (first, _) = app.say(None, "hello").await;
    let (second, _) = app.say(None, "good morning").await;

    assert_ne!(first, second, "two conversations");
    let bills = billing.bills();
    assert_eq!(bills[0].cache_read_tokens, 0, "nothing cached yet");
    assert!(
        bills[1].cache_read_tokens >= 1024,
        "the second conversation read {} of {} tokens",
        bills[1].cache_read_tokens,
        bills[1].prompt_tokens
    );
    let key = |n: usize| llm.requests()[n].json()["prompt_cache_key"].clone();
    assert_eq!(key(0), key(1), "one key for one prefix");
    app.stop().await;
}

fn summarise_or_echo(body: &Value) -> Reply {
    if is_summary_request(body) {
        Reply::Text("Goal: chatting. Facts: three greetings.".to_owned())
    } else {
        echo(body)
    }
}

#[tokio::test]
async fn compactions_summary_on_anthropic_reads_the_conversation_as_cached_and_writes_nothing() {
    let billing = Caching::new();
    let llm = start(&billing, summarise_or_echo).await;
    let app = TestApp::spawn_with(&llm, |s| {
        on_anthropic(&llm, s);
        s.agent.persona = long_persona();
        s.context.keep_recent_turns = 1;
    })
    .await;
    let (session, _) = app.say(None, "turn 1").await;
    for turn in 2..=4 {
        app.say(Some(&session), &format!("turn {turn}")).await;
    }

    app.say(Some(&session), "/compact").await;

    let requests: Vec<Value> = llm.requests().iter().map(|r| r.json()).collect();
    let at = requests
        .iter()
        .position(is_summary_request)
        .expect("a summary call");
    let summary = &requests[at];
    assert_eq!(summary["system"], requests[0]["system"]);
    assert_eq!(summary["tools"], requests[0]["tools"]);
    // A changed `tool_choice` would drop the cached messages on Anthropic.
    assert!(summary.get("tool_choice").is_none());
    let bills = billing.bills();
    assert_eq!(
        bills[at].cache_read_tokens,
        bills[at - 1].prompt_tokens,
        "the summary reads all the previous request cached"
    );
    assert_eq!(
        bills[at].cache_write_tokens, 0,
        "its question is not cached"
    );
    app.stop().await;
}

/// Moves a person's pause on by `gap`: the session's last turn ended that
/// much earlier, and the provider's clock moved as far.
async fn pause(app: &TestApp, billing: &Caching, gap: Duration) {
    let millis = i64::try_from(gap.as_millis()).expect("a short gap");
    sqlx::query("UPDATE sessions SET updated_at = updated_at - $1")
        .bind(millis)
        .execute(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("update");
    billing.advance(gap);
}

#[tokio::test]
async fn a_person_answering_ten_minutes_later_finds_the_conversation_cached_for_the_hour() {
    let billing = Caching::new();
    let llm = start(&billing, echo).await;
    let app = TestApp::spawn_with(&llm, |s| {
        on_anthropic(&llm, s);
        s.agent.persona = long_persona();
        s.prices.insert(
            "fake-model".to_owned(),
            Price {
                input: 1.0,
                output: 0.0,
                cache_read: 0.1,
                cache_write: 1.25,
                cache_write_1h: None,
            },
        );
    })
    .await;
    let ten_minutes = Duration::from_secs(600);

    let (session, _) = app.say(None, "turn 1").await;
    pause(&app, &billing, ten_minutes).await;
    app.say(Some(&session), "turn 2").await;
    pause(&app, &billing, ten_minutes).await;
    app.say(Some(&session), "turn 3").await;

    let requests = llm.requests();
    assert!(!requests[0].body.contains(r#""ttl":"1h""#), "a quick start");
    assert!(requests[1].body.contains(r#""ttl":"1h""#), "a slow person");
    let bills = billing.bills();
    let third = bills[2];
    let share = third.cache_read_tokens as f64 / third.prompt_tokens as f64;
    assert!(share > 0.85, "turn 3 read {share:.3} from the cache");
    // Turn 2 wrote for an hour, at twice the input price.
    assert!(bills[1].cache_write_1h_tokens > 0);
    let costs: Vec<i64> = sqlx::query_scalar("SELECT cost_nanousd FROM usage ORDER BY id")
        .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("costs");
    let plain = bills[1].prompt_tokens - bills[1].cache_read_tokens - bills[1].cache_write_tokens;
    let expected = plain as f64
        + 0.1 * bills[1].cache_read_tokens as f64
        + 2.0 * bills[1].cache_write_1h_tokens as f64
        + 1.25 * (bills[1].cache_write_tokens - bills[1].cache_write_1h_tokens) as f64;
    assert_eq!(costs[1], (expected * 1000.0).round() as i64);
    // The usage report prices the hour's writes as the calls were priced.
    let rows = app.gateway.store.usage().report().await.expect("report");
    let reported: f64 = rows
        .iter()
        .filter_map(|row| {
            switchboard::usage::cost_of(
                &app.gateway.settings.prices,
                &row.model,
                &row.summary.usage,
            )
        })
        .sum();
    let recorded: i64 = costs.iter().sum();
    assert!(
        (reported * 1e9 - recorded as f64).abs() < 10.0,
        "reported ${reported}, recorded {recorded} nano-dollars"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_call_stopped_mid_flight_is_recorded_with_the_input_it_was_billed() {
    let llm = FakeLlm::start_with_delay(echo, Duration::from_secs(5)).await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.prices.insert(
            "fake-model".to_owned(),
            Price {
                input: 1.0,
                ..Price::default()
            },
        );
    })
    .await;
    let (session, _) = app.say(None, "/help").await;

    let long = app.say(Some(&session), "take your time");
    let stop = async {
        switchboard_test_support::eventually("a model call", || {
            std::future::ready(!llm.requests().is_empty())
        })
        .await;
        app.say(Some(&session), "/stop").await
    };
    let ((_, stopped), _) = tokio::join!(long, stop);

    assert_eq!(stopped, "Stopped, as you asked.");
    let (status, input, estimated, cost): (String, i64, i64, Option<i64>) = sqlx::query_as(
        "SELECT status, input_tokens, input_estimated, cost_nanousd FROM usage ORDER BY id DESC",
    )
    .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
    .await
    .expect("the call's row");
    assert_eq!(status, "failed");
    assert_eq!(estimated, 1, "marked as estimated");
    assert!(
        input > 100,
        "the system prompt and message, billed: {input}"
    );
    assert_eq!(cost, Some(input * 1000), "priced at the input price");
    app.stop().await;
}
