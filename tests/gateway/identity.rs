//! One person, many devices: principals and link codes, one direct
//! conversation across linked identities, private sessions kept private, and
//! the chat commands — through the HTTP API (a `user` field) and a fake
//! platform submitted through `InboundSink`.

use std::sync::Arc;

use serde_json::Value;
use switchboard_contract::{ChatKind, InboundSink, OutboundMessage, PlatformSender, Submitted};
use switchboard_test_support::eventually_some;
use switchboard_test_support::inbound::message;
use switchboard_test_support::sender::RecordingSender;

use crate::helpers::{FakeLlm, TestApp, session_id};

/// The fake platform "fake" wired into a running gateway.
pub struct Fake {
    sender: Arc<RecordingSender>,
}

impl Fake {
    pub fn register(app: &TestApp) -> Self {
        let sender = Arc::new(RecordingSender::new());
        app.gateway
            .service
            .runner()
            .register_sender("fake", Arc::clone(&sender) as Arc<dyn PlatformSender>);
        Self { sender }
    }

    pub fn sent(&self) -> Vec<OutboundMessage> {
        self.sender.attempts()
    }

    /// `user` writes `text` in a direct chat; returns the reply sent back.
    pub async fn dm(&self, app: &TestApp, user: &str, text: &str) -> String {
        self.say(app, user, &format!("dm-{user}"), ChatKind::Direct, text)
            .await
    }

    /// `user` writes `text` in `chat`; returns the reply sent back there.
    pub async fn say(
        &self,
        app: &TestApp,
        user: &str,
        chat: &str,
        kind: ChatKind,
        text: &str,
    ) -> String {
        let before = self.sent().len();
        let sink: &dyn InboundSink = app.gateway.service.as_ref();
        let submitted = sink
            .submit(message(user, chat, kind, text))
            .await
            .expect("submitted");
        assert!(
            matches!(submitted, Submitted::Accepted | Submitted::Handled),
            "{submitted:?}"
        );
        let what = format!("a reply to {text:?}");
        let reply =
            eventually_some(&what, || std::future::ready(self.sender.attempt(before))).await;
        assert_eq!(
            reply.chat.as_str(),
            chat,
            "the reply goes where the message came from"
        );
        reply.text
    }
}

/// The code in a `/link` reply.
pub fn code_in(reply: &str) -> String {
    reply
        .split_whitespace()
        .map(|word| word.trim_matches(|c: char| !c.is_ascii_alphanumeric()))
        .find(|word| {
            word.len() == 8
                && word
                    .bytes()
                    .all(|b| b"ABCDEFGHJKMNPQRSTUVWXYZ23456789".contains(&b))
        })
        .unwrap_or_else(|| panic!("no code in {reply:?}"))
        .to_owned()
}

/// The (role, content) pairs of the last request the model received.
fn last_request(llm: &FakeLlm) -> Vec<(String, String)> {
    let request = llm.requests().last().expect("a request").json();
    request["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

pub fn user_texts(llm: &FakeLlm) -> Vec<String> {
    last_request(llm)
        .into_iter()
        .filter(|(role, _)| role == "user")
        .map(|(_, content)| content)
        .collect()
}

async fn session_of_last_inbound(app: &TestApp) -> String {
    sqlx::query_scalar::<_, String>("SELECT session_id FROM inbound ORDER BY id DESC LIMIT 1")
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("row")
}

#[tokio::test]
async fn a_conversation_started_on_the_api_continues_on_another_platform_after_linking() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let fake = Fake::register(&app);

    let (session, _) = app.say_as("alice", "my name is Alice").await;
    let (same, _) = app.say_as("alice", "I live in Lyon").await;
    let (_, link) = app.say_as("alice", "/link").await;
    let linked = fake
        .dm(
            &app,
            "tg-alice",
            &format!("/link {}", code_in(&link).to_lowercase()),
        )
        .await;
    let reply = fake.dm(&app, "tg-alice", "where do I live?").await;

    assert_eq!(same, session, "one API user, one conversation");
    assert!(linked.starts_with("Linked"), "{linked}");
    assert_eq!(reply, "echo: where do I live?");
    assert_eq!(
        user_texts(&llm),
        ["my name is Alice", "I live in Lyon", "where do I live?"],
        "the model sees the whole history"
    );
    assert_eq!(session_of_last_inbound(&app).await, session);
    let (back, _) = app.say_as("alice", "and my name?").await;
    assert_eq!(back, session, "and back on the API, still the same one");
    assert_eq!(user_texts(&llm).len(), 4);
    app.stop().await;
}

#[tokio::test]
async fn a_link_code_works_once() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let fake = Fake::register(&app);

    let code = code_in(&fake.dm(&app, "owner", "/link").await);
    let first = fake.dm(&app, "phone", &format!("/link {code}")).await;
    let second = fake.dm(&app, "mallory", &format!("/link {code}")).await;
    fake.dm(&app, "owner", "secret plans").await;
    fake.dm(&app, "mallory", "what are the plans?").await;

    assert_eq!(
        first,
        switchboard::session::texts::linked(switchboard::session::settings::DmSessions::Shared)
    );
    assert!(
        second.contains("wrong, expired or already used"),
        "{second}"
    );
    assert_eq!(user_texts(&llm), ["what are the plans?"]);
    app.stop().await;
}

#[tokio::test]
async fn wrong_link_codes_are_rate_limited_per_identity() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let fake = Fake::register(&app);
    let code = code_in(&app.say_as("alice", "/link").await.1);

    for _ in 0..5 {
        let reply = fake.dm(&app, "guesser", "/link ABCDEFGH").await;
        assert!(reply.contains("wrong"), "{reply}");
    }
    let sixth = fake.dm(&app, "guesser", &format!("/link {code}")).await;
    let other = fake.dm(&app, "honest", &format!("/link {code}")).await;

    assert!(sixth.contains("Too many wrong codes"), "{sixth}");
    assert!(
        other.starts_with("Linked"),
        "another identity is not limited: {other}"
    );
    app.stop().await;
}

#[tokio::test]
async fn unlink_detaches_the_identity_into_a_fresh_conversation() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let fake = Fake::register(&app);
    let (session, _) = app.say_as("alice", "private notes").await;
    let code = code_in(&app.say_as("alice", "/link").await.1);
    fake.dm(&app, "tg-alice", &format!("/link {code}")).await;

    let unlinked = fake.dm(&app, "tg-alice", "/unlink").await;
    fake.dm(&app, "tg-alice", "hello again").await;
    let fresh = session_of_last_inbound(&app).await;
    let not_linked = app.say_as("alice", "/unlink").await.1;

    assert!(unlinked.starts_with("Unlinked"), "{unlinked}");
    assert_eq!(user_texts(&llm), ["hello again"]);
    assert_ne!(fresh, session);
    assert!(not_linked.contains("not linked"), "{not_linked}");
    app.stop().await;
}

#[tokio::test]
async fn one_principal_can_never_resume_another_principals_session() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let fake = Fake::register(&app);
    let (alices, _) = app.say_as("alice", "alice's secret").await;

    let by_command = fake.dm(&app, "bob", &format!("/resume {alices}")).await;
    let (status, _, _) = app.chat_as(Some("bob"), Some(&alices), "show me").await;
    let listed = fake.dm(&app, "bob", "/sessions").await;
    fake.dm(&app, "bob", "what did alice say?").await;

    assert!(
        by_command.contains("No conversation of yours"),
        "{by_command}"
    );
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND);
    assert!(!listed.contains(&alices[..8]), "{listed}");
    assert_eq!(user_texts(&llm), ["what did alice say?"]);
    app.stop().await;
}

#[tokio::test]
async fn group_chats_never_list_or_resume_private_sessions() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let fake = Fake::register(&app);
    fake.dm(&app, "alice", "private thing").await;
    let private = session_of_last_inbound(&app).await;

    let listed = fake
        .say(&app, "alice", "group-1", ChatKind::Group, "/sessions")
        .await;
    let resumed = fake
        .say(
            &app,
            "alice",
            "group-1",
            ChatKind::Group,
            &format!("/resume {private}"),
        )
        .await;
    let linked = fake
        .say(&app, "alice", "group-1", ChatKind::Group, "/link")
        .await;
    fake.say(&app, "alice", "group-1", ChatKind::Group, "hi all")
        .await;

    for reply in [&listed, &resumed, &linked] {
        assert!(reply.contains("direct chat"), "{reply}");
        assert!(!reply.contains(&private[..8]), "{reply}");
    }
    // A sender without a display name is named by id.
    assert_eq!(user_texts(&llm), ["[user alice] hi all"]);
    app.stop().await;
}

#[tokio::test]
async fn sessions_lists_conversations_and_resume_switches_the_chat_back() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let fake = Fake::register(&app);
    fake.dm(&app, "alice", "first topic about boats").await;
    let first = session_of_last_inbound(&app).await;
    fake.dm(&app, "alice", "/title Boats").await;
    fake.dm(&app, "alice", "/new").await;
    fake.dm(&app, "alice", "second topic about trains").await;

    let listed = fake.dm(&app, "alice", "/sessions").await;
    let resumed = fake
        .dm(&app, "alice", &format!("/resume {}", &first[..8]))
        .await;
    fake.dm(&app, "alice", "more on that").await;

    assert!(listed.contains(&first[..8]), "{listed}");
    assert!(listed.contains("Boats"), "{listed}");
    assert!(listed.contains("second topic about trains"), "{listed}");
    assert!(listed.contains("[fake,"), "{listed}");
    assert!(resumed.contains("Boats"), "{resumed}");
    assert_eq!(
        user_texts(&llm),
        ["first topic about boats", "more on that"]
    );
    let title = app
        .gateway
        .store
        .sessions()
        .get(&session_id(&first))
        .await
        .expect("read")
        .and_then(|s| s.title);
    assert_eq!(title.as_deref(), Some("Boats"));
    app.stop().await;
}

#[tokio::test]
async fn direct_chats_can_be_kept_per_platform() {
    use switchboard::session::settings::DmSessions;
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.sessions.dm_sessions = DmSessions::PerPlatform).await;
    let fake = Fake::register(&app);
    app.say_as("alice", "on the api").await;
    let offered = app.say_as("alice", "/link").await.1;
    let code = code_in(&offered);
    let linked = fake.dm(&app, "tg-alice", &format!("/link {code}")).await;

    fake.dm(&app, "tg-alice", "on the platform").await;
    let listed = fake.dm(&app, "tg-alice", "/sessions").await;

    assert!(
        offered.contains("conversations stay per chat"),
        "the code's answer does not promise shared conversations: {offered}"
    );
    assert_eq!(
        linked,
        switchboard::session::texts::linked(DmSessions::PerPlatform)
    );
    assert!(!linked.contains("shares its conversations"), "{linked}");
    assert_eq!(user_texts(&llm), ["on the platform"]);
    assert!(
        listed.contains("on the api"),
        "linked sessions are listed: {listed}"
    );
    app.stop().await;
}

#[tokio::test]
async fn model_switches_only_to_configured_models() {
    let llm = FakeLlm::echo().await;
    let app =
        TestApp::spawn_with(&llm, |s| s.llm.extra_models = vec!["big-model".to_owned()]).await;
    let fake = Fake::register(&app);

    let refused = app.say_as("alice", "/model gpt-9000").await.1;
    let switched = app.say_as("alice", "/model big-model").await.1;
    app.say_as("alice", "hello").await;
    let on_api: Value = llm.requests().last().expect("request").json()["model"].clone();
    let listed = fake.dm(&app, "bob", "/model@mybot").await;
    fake.dm(&app, "bob", "hi").await;
    let on_fake: Value = llm.requests().last().expect("request").json()["model"].clone();

    assert!(refused.contains("Unknown model"), "{refused}");
    assert!(switched.contains("big-model"), "{switched}");
    assert_eq!(on_api, "big-model");
    assert!(listed.contains("fake-model, big-model"), "{listed}");
    assert_eq!(on_fake, "fake-model", "other sessions keep their model");
    app.stop().await;
}

#[tokio::test]
async fn usage_reports_todays_tokens_and_cache_share_for_the_principal() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let fake = Fake::register(&app);
    app.say_as("alice", "one").await;
    let code = code_in(&app.say_as("alice", "/link").await.1);
    fake.dm(&app, "tg-alice", &format!("/link {code}")).await;
    fake.dm(&app, "tg-alice", "two").await;
    fake.dm(&app, "bob", "not alice").await;

    let usage = fake.dm(&app, "tg-alice", "/usage").await;
    let api_usage = app.say_as("alice", "/usage").await.1;

    // Each fake call: 120 input tokens, 100 of them cached, 7 output.
    assert!(usage.contains("2 model calls"), "{usage}");
    assert!(usage.contains("240 input tokens (83%"), "{usage}");
    assert!(usage.contains("14 output tokens"), "{usage}");
    assert!(
        usage.contains("cost unknown"),
        "no prices configured: {usage}"
    );
    assert_eq!(usage, api_usage, "the same principal on both platforms");
    app.stop().await;
}

#[tokio::test]
async fn usage_shows_todays_estimated_cost_and_the_daily_limit() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.prices = [(
            "fake-model".to_owned(),
            switchboard::usage::Price {
                input: 1000.0,
                output: 2000.0,
                cache_read: 100.0,
                cache_write: 0.0,
                cache_write_1h: None,
            },
        )]
        .into();
        s.limits.principal_daily_usd = 5.0;
    })
    .await;
    app.say_as("alice", "one").await;
    app.say_as("alice", "two").await;

    let (_, usage) = app.say_as("alice", "/usage").await;

    // Each call: 20 fresh input tokens at $1000/M, 100 cached at $100/M and
    // 7 output at $2000/M: $0.044.
    assert!(
        usage.contains("about $0.0880 (estimated from the price table)"),
        "{usage}"
    );
    assert!(usage.ends_with("Daily limit: $5.00."), "{usage}");
    app.stop().await;
}

#[tokio::test]
async fn undo_drops_the_last_exchange_from_the_model_view_but_keeps_it_stored() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let fake = Fake::register(&app);
    app.say_as("alice", "keep this").await;
    app.say_as("alice", "drop this").await;

    let undone = app.say_as("alice", "/undo").await.1;
    app.say_as("alice", "next").await;
    fake.dm(&app, "bob", "only message").await;
    let bob_undo = fake.dm(&app, "bob", "/undo").await;
    let bob_again = fake.dm(&app, "bob", "/undo").await;

    assert!(undone.starts_with("Removed"), "{undone}");
    let alice_request = llm.requests()[2].json();
    let texts: Vec<&str> = alice_request["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["content"].as_str())
        .skip(1)
        .collect();
    assert_eq!(texts, ["keep this", "echo: keep this", "next"]);
    assert!(bob_undo.starts_with("Removed"), "{bob_undo}");
    assert!(bob_again.contains("Nothing to undo"), "{bob_again}");
    let hidden: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE hidden = 1")
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("count");
    assert_eq!(
        hidden, 4,
        "both undone exchanges stay stored, marked hidden"
    );
    assert_eq!(app.count("messages").await, 8);
    app.stop().await;
}

#[tokio::test]
async fn retry_answers_the_last_message_again_as_a_new_task() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let fake = Fake::register(&app);
    app.say_as("alice", "first").await;
    app.say_as("alice", "tell me a joke").await;

    let (_, again) = app.say_as("alice", "/retry").await;
    let fake_nothing = fake.dm(&app, "bob", "/retry").await;
    fake.dm(&app, "bob", "question").await;
    let fake_again = fake.dm(&app, "bob", "/RETRY@mybot").await;

    assert_eq!(again, "echo: tell me a joke");
    assert_eq!(llm.requests().len(), 5);
    let alice_retry = llm.requests()[2].json();
    let users: Vec<&str> = alice_retry["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(users, ["first", "tell me a joke"], "asked once, not twice");
    assert!(fake_nothing.contains("Nothing to retry"), "{fake_nothing}");
    assert_eq!(fake_again, "echo: question");
    assert_eq!(user_texts(&llm), ["question"]);
    app.stop().await;
}

#[tokio::test]
async fn unknown_commands_get_help_on_every_platform() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let fake = Fake::register(&app);

    let api = app.say_as("alice", "/frobnicate").await.1;
    let platform = fake.dm(&app, "bob", "/frobnicate@mybot now").await;

    for reply in [&api, &platform] {
        assert!(reply.starts_with("Unknown command /frobnicate."), "{reply}");
        assert!(reply.contains("/resume ID"), "{reply}");
    }
    assert!(llm.requests().is_empty());
    assert_eq!(fake.sent().len(), 1);
    app.stop().await;
}

#[tokio::test]
async fn link_codes_are_stored_only_as_hashes() {
    use sha2::{Digest, Sha256};
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn(&llm).await;
    let fake = Fake::register(&app);

    let code = code_in(&fake.dm(&app, "alice", "/link").await);
    let while_live = database_contains(&app, &code).await;
    let hashes: Vec<String> = sqlx::query_scalar("SELECT code_sha256 FROM link_codes")
        .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("rows");
    let (_, linked) = app
        .say_as("alice-api", &format!("/link {}", code.to_lowercase()))
        .await;
    let after_use = database_contains(&app, &code).await;

    assert!(!while_live, "the issued code is not in the database");
    assert_eq!(hashes, [hex::encode(Sha256::digest(code.as_bytes()))]);
    assert!(linked.starts_with("Linked"), "{linked}");
    assert!(!after_use, "nor the redeeming message");
    assert!(
        database_contains(&app, "alice-api").await,
        "the scan finds what is stored"
    );
    app.stop().await;
}

/// Whether `code` (any case) appears anywhere in the app's database: in the
/// SQLite file or its write-ahead log, or in any row of any PostgreSQL table.
async fn database_contains(app: &TestApp, code: &str) -> bool {
    let url = &app.gateway.settings.database.url;
    let upper = code.to_ascii_uppercase();
    let lower = code.to_ascii_lowercase();
    if let Some(path) = url.strip_prefix("sqlite://") {
        let path = path.split('?').next().unwrap_or(path);
        return ["", "-wal", "-journal"].iter().any(|suffix| {
            let bytes = std::fs::read(format!("{path}{suffix}")).unwrap_or_default();
            [&upper, &lower]
                .iter()
                .any(|needle| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
        });
    }
    let mut conn = app.gateway.store.conn().await.expect("conn");
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(tablename AS TEXT) FROM pg_tables WHERE schemaname = 'public'",
    )
    .fetch_all(&mut *conn)
    .await
    .expect("tables");
    assert!(tables.iter().any(|t| t == "link_codes"), "{tables:?}");
    for table in tables {
        let hits: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM \"{table}\" t WHERE strpos(upper(CAST(t AS TEXT)), $1) > 0"
        ))
        .bind(&upper)
        .fetch_one(&mut *conn)
        .await
        .expect("scan");
        if hits > 0 {
            return true;
        }
    }
    false
}
