//! Issue 7 through a real platform adapter: linking, continuing a
//! conversation, `/sessions` and `/resume`, access control with pairing, and
//! the chat commands, exercised through the Telegram adapter (teloxide long
//! polling against a fake Bot API) together with the HTTP API. Every answer
//! is read from the fake Bot API's recorded `sendMessage` calls, in the chat
//! the message came from.

use switchboard::config::Settings;

use crate::access::pairing_cli;
use switchboard_test_support::telegram::{BOT_USERNAME, FakeTelegram, TgUser};

use crate::helpers::{FakeLlm, TestApp, telegram_settings};
use crate::identity::{code_in, user_texts};

const ADA: TgUser = TgUser {
    id: 777,
    first_name: "Ada",
};
const BOB: TgUser = TgUser {
    id: 888,
    first_name: "Bob",
};
const ROOT: TgUser = TgUser {
    id: 1001,
    first_name: "Root",
};
/// A Telegram supergroup the bot is in.
const GROUP: i64 = -100_123;

/// The gateway with the Telegram adapter against a fake Bot API, an echoing
/// model, and `configure` applied to the settings.
async fn spawn(configure: impl FnOnce(&mut Settings)) -> (FakeTelegram, FakeLlm, TestApp) {
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::echo().await;
    let settings = telegram_settings(&telegram);
    let app = TestApp::spawn_with(&llm, |s| {
        s.telegram = Some(settings);
        configure(s);
    })
    .await;
    (telegram, llm, app)
}

/// Only Ada may talk to the agent; Root is an admin.
fn ada_only(settings: &mut Settings) {
    settings.access.allowlist = vec![format!("telegram:{}", ADA.id)];
    settings.access.admins = vec![format!("telegram:{}", ROOT.id)];
}

/// The conversation id in a `/status` answer.
fn session_in(status: &str) -> String {
    status
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("Conversation "))
        .unwrap_or_else(|| panic!("no conversation id in {status:?}"))
        .trim()
        .to_owned()
}

/// The (role, content) pairs of the model's last request, system prompt
/// left out.
fn last_history(llm: &FakeLlm) -> Vec<(String, String)> {
    let request = llm.requests().last().expect("a model request").json();
    request["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(role, text)| ((*role).to_owned(), (*text).to_owned()))
        .collect()
}

#[tokio::test]
async fn a_conversation_linked_on_the_api_continues_in_a_telegram_dm_with_its_history() {
    let (telegram, llm, app) = spawn(|_| {}).await;
    let (session, _) = app.say_as("alice", "my name is Alice").await;
    let code = code_in(&app.say_as("alice", "/link").await.1);

    let linked = telegram.ask(ADA, &format!("/link {code}")).await;
    let reply = telegram.ask(ADA, "what is my name?").await;
    let status = telegram.ask(ADA, "/status").await;

    assert!(linked.starts_with("Linked"), "{linked}");
    assert_eq!(reply, "echo: what is my name?");
    assert_eq!(
        last_history(&llm),
        pairs(&[
            ("user", "my name is Alice"),
            ("assistant", "echo: my name is Alice"),
            ("user", "what is my name?"),
        ]),
        "the Telegram turn sees the API history"
    );
    assert_eq!(session_in(&status), session, "one shared conversation");
    let (back, _) = app.say_as("alice", "and back on the API").await;
    assert_eq!(back, session);
    assert_eq!(
        user_texts(&llm),
        [
            "my name is Alice",
            "what is my name?",
            "and back on the API"
        ]
    );
    app.stop().await;
}

#[tokio::test]
async fn sessions_and_resume_in_a_telegram_dm_switch_back_to_an_earlier_conversation() {
    let (telegram, llm, app) = spawn(|_| {}).await;
    telegram.ask(ADA, "first topic about boats").await;
    let first = session_in(&telegram.ask(ADA, "/status").await);
    telegram.ask(ADA, "/title Boats").await;
    telegram.ask(ADA, "/new").await;
    telegram.ask(ADA, "second topic about trains").await;

    let listed = telegram.ask(ADA, "/sessions").await;
    let resumed = telegram.ask(ADA, &format!("/resume {}", &first[..8])).await;
    telegram.ask(ADA, "more on that").await;

    assert!(listed.contains(&first[..8]), "{listed}");
    assert!(listed.contains("Boats"), "{listed}");
    assert!(listed.contains("second topic about trains"), "{listed}");
    assert!(listed.contains("[telegram,"), "{listed}");
    assert!(resumed.starts_with("Resumed conversation"), "{resumed}");
    assert!(resumed.contains("Boats"), "{resumed}");
    assert_eq!(
        user_texts(&llm),
        ["first topic about boats", "more on that"],
        "the resumed conversation's history, not the other one's"
    );
    app.stop().await;
}

#[tokio::test]
async fn a_second_telegram_user_can_never_resume_the_first_users_session() {
    let (telegram, llm, app) = spawn(|_| {}).await;
    telegram.ask(ADA, "my secret plans").await;
    let adas = session_in(&telegram.ask(ADA, "/status").await);

    let by_id = telegram.ask(BOB, &format!("/resume {adas}")).await;
    let by_prefix = telegram.ask(BOB, &format!("/resume {}", &adas[..8])).await;
    let listed = telegram.ask(BOB, "/sessions").await;
    telegram.ask(BOB, "what are the plans?").await;
    let bobs = session_in(&telegram.ask(BOB, "/status").await);
    let (over_api, _, _) = app.chat_as(Some("bob"), Some(&adas), "show me").await;

    for refused in [&by_id, &by_prefix] {
        assert!(refused.contains("No conversation of yours"), "{refused}");
    }
    assert!(!listed.contains(&adas[..8]), "{listed}");
    assert_ne!(bobs, adas);
    assert_eq!(user_texts(&llm), ["what are the plans?"]);
    assert_eq!(over_api, reqwest::StatusCode::NOT_FOUND, "nor over the API");
    app.stop().await;
}

#[tokio::test]
async fn a_telegram_group_never_lists_or_resumes_private_sessions() {
    let (telegram, llm, app) = spawn(|_| {}).await;
    telegram.ask(ADA, "a private thing").await;
    let private = session_in(&telegram.ask(ADA, "/status").await);

    let listed = telegram
        .ask_in_group(GROUP, ADA, &format!("/sessions@{BOT_USERNAME}"))
        .await;
    let resumed = telegram
        .ask_in_group(GROUP, ADA, &format!("/resume@{BOT_USERNAME} {private}"))
        .await;
    let linked = telegram
        .ask_in_group(GROUP, ADA, &format!("/link@{BOT_USERNAME}"))
        .await;
    let answered = telegram
        .ask_in_group(GROUP, ADA, &format!("@{BOT_USERNAME} hi all"))
        .await;

    for reply in [&listed, &resumed, &linked] {
        assert!(reply.contains("direct chat"), "{reply}");
        assert!(!reply.contains(&private[..8]), "{reply}");
    }
    // Group messages reach the model with their sender's name.
    assert_eq!(answered, "echo: [Ada] hi all");
    assert_eq!(
        user_texts(&llm),
        ["[Ada] hi all"],
        "the group has its own session"
    );
    app.stop().await;
}

#[tokio::test]
async fn an_unknown_telegram_sender_gets_a_pairing_code_and_no_model_call_until_approved() {
    let (telegram, llm, app) = spawn(ada_only).await;

    let ada = telegram.ask(ADA, "hi").await;
    let first = telegram.ask(BOB, "hello").await;
    let again = telegram.ask(BOB, "are you there?").await;
    let calls_before_approval = llm.requests().len();
    let code = code_in(&first);
    let (approved, said) = pairing_cli(&app, &["approve", &code]).await;
    let after = telegram.ask(BOB, "hello again").await;

    assert_eq!(ada, "echo: hi");
    assert!(first.contains("pairing code"), "{first}");
    assert_eq!(code_in(&again), code, "one pairing request per sender");
    assert_eq!(
        calls_before_approval, 1,
        "only Ada's message reached the model"
    );
    assert!(approved, "{said}");
    assert_eq!(after, "echo: hello again");
    assert_eq!(
        user_texts(&llm),
        ["hello again"],
        "nothing from before the approval is in the conversation"
    );
    app.stop().await;
}

#[tokio::test]
async fn an_admin_approves_a_telegram_pairing_request_from_a_telegram_dm() {
    let (telegram, llm, app) = spawn(ada_only).await;
    let code = code_in(&telegram.ask(BOB, "hello").await);

    let not_admin = telegram.ask(ADA, &format!("/approve {code}")).await;
    let approved = telegram
        .ask(
            ROOT,
            &format!("/approve@{BOT_USERNAME} {}", code.to_lowercase()),
        )
        .await;
    let after = telegram.ask(BOB, "thanks").await;

    assert!(not_admin.contains("Only an admin"), "{not_admin}");
    assert_eq!(approved, format!("Approved telegram:{}.", BOB.id));
    assert_eq!(after, "echo: thanks");
    assert_eq!(user_texts(&llm), ["thanks"]);
    assert_eq!(llm.requests().len(), 1);
    app.stop().await;
}

#[tokio::test]
async fn an_unauthorised_sender_in_a_telegram_group_is_ignored_silently() {
    let (telegram, llm, app) = spawn(ada_only).await;

    telegram.group(GROUP, BOB, &format!("@{BOT_USERNAME} hello from Bob"));
    telegram.group(GROUP, BOB, &format!("/help@{BOT_USERNAME}"));
    telegram.settled().await;
    let recorded = app.count("inbound").await;
    let requested = app.count("pairing_requests").await;
    let answered = telegram
        .ask_in_group(GROUP, ADA, &format!("@{BOT_USERNAME} hello from Ada"))
        .await;

    assert_eq!(recorded, 0, "Bob's group messages were not even recorded");
    assert_eq!(requested, 0, "no pairing code is offered in a group");
    assert_eq!(answered, "echo: [Ada] hello from Ada");
    let sent = telegram.sent();
    assert_eq!(sent.len(), 1, "only Ada got an answer: {sent:?}");
    assert_eq!(user_texts(&llm), ["[Ada] hello from Ada"]);
    assert_eq!(llm.requests().len(), 1);
    app.stop().await;
}

#[tokio::test]
async fn help_addressed_to_the_bot_by_name_is_answered_on_telegram_without_a_model_call() {
    let (telegram, llm, app) = spawn(|_| {}).await;

    let in_dm = telegram.ask(ADA, &format!("/help@{BOT_USERNAME}")).await;
    let in_group = telegram
        .ask_in_group(GROUP, ADA, &format!("/help@{BOT_USERNAME}"))
        .await;
    telegram.dm(ADA, "/help@some_other_bot");
    telegram.settled().await;

    for reply in [&in_dm, &in_group] {
        assert!(reply.starts_with("Commands:"), "{reply}");
        assert!(reply.contains("/resume ID"), "{reply}");
    }
    assert_eq!(
        telegram.sent().len(),
        2,
        "a command for another bot gets no answer"
    );
    assert!(llm.requests().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn an_unknown_command_on_telegram_gets_help_and_no_model_call() {
    let (telegram, llm, app) = spawn(|_| {}).await;

    let reply = telegram.ask(ADA, "/frobnicate now").await;

    assert!(reply.starts_with("Unknown command /frobnicate."), "{reply}");
    assert!(reply.contains("/resume ID"), "{reply}");
    assert!(llm.requests().is_empty());
    assert_eq!(
        app.count("messages").await,
        0,
        "nothing entered the history"
    );
    app.stop().await;
}

#[tokio::test]
async fn status_on_telegram_shows_the_conversation_model_budget_and_tokens() {
    let (telegram, llm, app) = spawn(|_| {}).await;
    telegram.ask(ADA, "hello").await;
    let session: String =
        sqlx::query_scalar("SELECT session_id FROM inbound ORDER BY id DESC LIMIT 1")
            .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("row");

    let status = telegram.ask(ADA, "/status").await;

    assert_eq!(session_in(&status), session);
    assert!(status.contains("Model: fake-model"), "{status}");
    assert!(status.contains("Budget: idle"), "{status}");
    // The fake model reports 120 input tokens (100 cached) and 7 output.
    assert!(
        status.contains("Tokens: 120 in (100 from cache), 7 out"),
        "{status}"
    );
    assert_eq!(llm.requests().len(), 1, "/status made no model call");
    app.stop().await;
}

#[tokio::test]
async fn new_on_telegram_starts_a_fresh_conversation_for_every_linked_account() {
    let (telegram, llm, app) = spawn(|_| {}).await;
    let (old, _) = app.say_as("alice", "remember the apples").await;
    let code = code_in(&app.say_as("alice", "/link").await.1);
    telegram.ask(ADA, &format!("/link {code}")).await;

    let started = telegram.ask(ADA, "/new").await;
    telegram.ask(ADA, "what should I remember?").await;
    let fresh = session_in(&telegram.ask(ADA, "/status").await);
    let (on_api, _) = app.say_as("alice", "anything?").await;

    assert!(
        started.starts_with("Started a new conversation"),
        "{started}"
    );
    assert!(started.contains(&fresh), "{started}");
    assert_ne!(fresh, old);
    assert_eq!(on_api, fresh, "the API continues the new conversation too");
    assert_eq!(
        user_texts(&llm),
        ["what should I remember?", "anything?"],
        "the old history is left behind"
    );
    app.stop().await;
}
