//! The prompt-cache figures of `docs/caching.md`: cache-read share, the most
//! any cache could read, and the input bill against no caching, for five
//! kinds of use on both billing models of the fake provider. Ignored by
//! default (it measures, it checks nothing a test elsewhere does not);
//! `cargo test -p switchboard --test gateway cache_figures -- --ignored
//! --nocapture` prints the table.

use std::time::Duration;

use serde_json::{Value, json};
use switchboard::config::Settings;
use switchboard::domain::BaseUrl;
use switchboard::llm::ProviderKind;
use switchboard_test_support::model::{Caching, Ledger};

use crate::helpers::{FakeLlm, Reply, TestApp, last_is_tool_result, last_user_text};

/// A system prompt of ~1,700 tokens with the built-in tools.
fn persona() -> String {
    "You are a careful assistant. Answer precisely and briefly, cite what you found, and say \
     plainly when you do not know. "
        .repeat(60)
}

/// Summarises, extracts nothing, remembers when asked, calculates on
/// even turns, and otherwise answers at some length.
fn model(body: &Value) -> Reply {
    let text = last_user_text(body);
    if text.starts_with("[switchboard] Compaction") {
        return Reply::Text("Goal: a long chat about numbers. Open: keep going.".to_owned());
    }
    if text.starts_with("[switchboard] Memory") {
        return Reply::Text("NONE".to_owned());
    }
    let n = body["messages"].as_array().map_or(0, Vec::len);
    if last_is_tool_result(body) {
        return Reply::Text(format!("done. {}", "Here is more detail. ".repeat(10)));
    }
    if let Some((_, fact)) = text.split_once("remember: ") {
        let args = json!({"action": "remember", "text": fact}).to_string();
        return Reply::Tools(vec![(format!("m{n}"), "memory".to_owned(), args)]);
    }
    let turn: usize = text
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.trim_end_matches(':').parse().ok())
        .unwrap_or(1);
    if turn.is_multiple_of(2) {
        let args = format!("{{\"expression\":\"{turn}*7\"}}");
        Reply::Tools(vec![(format!("c{n}"), "calculator".to_owned(), args)])
    } else {
        Reply::Text(format!(
            "answer {turn}. {}",
            "Some words of reply. ".repeat(15)
        ))
    }
}

async fn app(
    llm: &FakeLlm,
    provider: ProviderKind,
    configure: impl FnOnce(&mut Settings),
) -> TestApp {
    let base = match provider {
        ProviderKind::Anthropic => llm.anthropic_base(),
        ProviderKind::Openai => llm.openai_base(),
    };
    TestApp::spawn_with(llm, |s| {
        s.llm.provider = provider;
        s.llm.base_url = BaseUrl::parse(&base).expect("a test URL");
        s.agent.persona = persona();
        s.agent.tools.push("memory".to_owned());
        s.context.keep_recent_turns = 2;
        configure(s);
    })
    .await
}

fn question(turn: usize) -> String {
    format!("turn {turn}: tell me about the number {turn} and what follows from it")
}

/// A person's pause: the session's last turn ended `gap` earlier, and the
/// provider's clock moved as far.
async fn pause(app: &TestApp, billing: &Caching, gap: Duration) {
    let millis = i64::try_from(gap.as_millis()).expect("a short gap");
    sqlx::query("UPDATE sessions SET updated_at = updated_at - $1")
        .bind(millis)
        .execute(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("update");
    billing.advance(gap);
}

#[derive(Clone, Copy, Debug)]
enum Scenario {
    TwentyTurns,
    Compaction,
    MemoryAndCompaction,
    Staggered,
    TenMinuteGaps,
    /// The same with `llm.cache_ttl = "1h"` instead of `auto`.
    TenMinuteGapsHour,
}

/// What a scenario cost, and the misses the gateway's cache report found.
async fn run(scenario: Scenario, provider: ProviderKind) -> (Ledger, Vec<String>) {
    let billing = Caching::new().tick(Duration::from_secs(2));
    let llm = FakeLlm::builder(model)
        .billing(billing.clone())
        .start()
        .await;
    let app = app(&llm, provider, |s| {
        s.memory.extract_at_compaction = matches!(scenario, Scenario::MemoryAndCompaction);
        if matches!(scenario, Scenario::TenMinuteGapsHour) {
            s.llm.cache_ttl = switchboard::llm::settings::CacheTtl::OneHour;
        }
    })
    .await;
    match scenario {
        Scenario::TwentyTurns | Scenario::Compaction | Scenario::MemoryAndCompaction => {
            for turn in 1..=20 {
                let text = match scenario {
                    Scenario::MemoryAndCompaction if turn % 5 == 3 => {
                        format!("remember: fact number {turn} about me")
                    }
                    _ => question(turn),
                };
                app.say_as("ada", &text).await;
                if turn == 10 && !matches!(scenario, Scenario::TwentyTurns) {
                    app.say_as("ada", "/compact").await;
                }
            }
        }
        Scenario::Staggered => {
            let mut sessions: Vec<Option<String>> = vec![None; 8];
            for round in 1..=12 {
                for (index, session) in sessions.iter_mut().enumerate() {
                    if round <= index || round > index + 5 {
                        continue;
                    }
                    let (id, _) = app.say(session.as_deref(), &question(round - index)).await;
                    *session = Some(id);
                }
            }
        }
        Scenario::TenMinuteGaps | Scenario::TenMinuteGapsHour => {
            for turn in 1..=10 {
                if turn > 1 {
                    pause(&app, &billing, Duration::from_secs(600)).await;
                }
                app.say_as("ada", &question(turn)).await;
            }
        }
    }
    let misses: Vec<String> =
        sqlx::query_scalar("SELECT cache_miss FROM usage WHERE cache_miss IS NOT NULL ORDER BY id")
            .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("misses");
    app.stop().await;
    (billing.ledger(), misses)
}

#[tokio::test]
#[ignore = "measures; run with --ignored --nocapture"]
async fn cache_figures() {
    println!(
        "| use | provider | requests | read share | possible | input bill (× uncached) | misses reported |"
    );
    println!("|---|---|---|---|---|---|---|");
    for scenario in [
        Scenario::TwentyTurns,
        Scenario::Compaction,
        Scenario::MemoryAndCompaction,
        Scenario::Staggered,
        Scenario::TenMinuteGaps,
        Scenario::TenMinuteGapsHour,
    ] {
        for provider in [ProviderKind::Anthropic, ProviderKind::Openai] {
            let (ledger, misses) = run(scenario, provider).await;
            println!(
                "| {scenario:?} | {} | {} | {:.3} | {:.3} | {:.3} | {} |",
                provider.as_str(),
                ledger.requests,
                ledger.read_share(),
                ledger.possible_share(),
                ledger.cost_ratio(),
                misses.len()
            );
            for miss in misses {
                println!("  - {miss}");
            }
        }
    }
}
