//! A person in the loop, through the HTTP API: a tool that asks first parks
//! its turn and the request answers at once with the approval; a decision
//! (allow once, for the conversation, deny), the expiry, `/stop` and a
//! question's answer resume it; the call runs once, or not at all; the
//! prompt prefix holds across the wait.

use serde_json::{Value, json};
use switchboard_test_support::{eventually, eventually_some};

use crate::helpers::{FakeLlm, Reply, TestApp, assert_prefix_holds, last_is_tool_result};

/// A model that asks for `6*7` on a user message and, given a tool result,
/// answers with it (also the model of `approvals_cluster.rs`).
pub(crate) fn calculate_then_report(body: &Value) -> Reply {
    if last_is_tool_result(body) {
        let messages = body["messages"].as_array().expect("messages");
        let result = messages
            .last()
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default();
        Reply::Text(format!("tool said: {result}"))
    } else {
        let n = body["messages"].as_array().map_or(0, Vec::len);
        Reply::Tools(vec![(
            format!("c{n}"),
            "calculator".to_owned(),
            r#"{"expression":"6*7"}"#.to_owned(),
        )])
    }
}

/// A model that asks the user (`ask_user` with `arguments`) and, given the
/// answer, replies `{prefix} {result}`.
fn ask_then_report(body: &Value, arguments: &str, prefix: &str) -> Reply {
    if last_is_tool_result(body) {
        let messages = body["messages"].as_array().expect("messages");
        let result = messages
            .last()
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default();
        Reply::Text(format!("{prefix} {result}"))
    } else {
        Reply::Tools(vec![(
            "q1".to_owned(),
            "ask_user".to_owned(),
            arguments.to_owned(),
        )])
    }
}

async fn asking_app(llm: &FakeLlm, timeout_secs: u64) -> TestApp {
    TestApp::spawn_with(llm, |settings| {
        settings.tools.approval.ask = vec!["calc*".to_owned()];
        settings.tools.approval.timeout = std::time::Duration::from_secs(timeout_secs);
        if !settings.agent.tools.iter().any(|tool| tool == "ask_user") {
            settings.agent.tools.push("ask_user".to_owned());
        }
    })
    .await
}

/// The text of the session's newest assistant message, once the turn that
/// waited has finished.
async fn final_reply(app: &TestApp, session: &str) -> String {
    eventually("the parked turn to finish", || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT COUNT(*) FROM inbound WHERE status IN ('pending', 'running', 'waiting') \
             AND session_id = $1",
        )
        .bind(session)
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("count")
            == 0
    })
    .await;
    app.stored_history(session)
        .await
        .iter()
        .rev()
        .find(|m| m.message.role == switchboard::domain::Role::Assistant)
        .and_then(|m| m.message.content.clone())
        .unwrap_or_default()
}

/// Sends `text` in a new conversation, whose turn parks; returns the
/// session and the approval it waits for.
async fn parked(app: &TestApp, text: &str) -> (String, Value) {
    let (status, session, body) = app.chat(None, text).await;
    assert_eq!(status, 200, "{body}");
    let approval = body
        .get("approval")
        .cloned()
        .unwrap_or_else(|| panic!("the turn parks: {body}"));
    (session.expect("session header"), approval)
}

async fn decide(app: &TestApp, id: &str, body: Value) -> (u16, Value) {
    let response = app
        .http
        .post(app.url(&format!("/v1/approvals/{id}")))
        .json(&body)
        .send()
        .await
        .expect("sent");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn runs_of_calculator(app: &TestApp) -> i64 {
    sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM tool_calls WHERE name = 'calculator' AND status = 'done'",
    )
    .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
    .await
    .expect("count")
}

#[tokio::test]
async fn an_ask_tool_parks_the_turn_until_allowed_then_runs_once() {
    let llm = FakeLlm::start(calculate_then_report).await;
    let app = asking_app(&llm, 3600).await;

    let (status, session, body) = app.chat(None, "what is 6*7?").await;
    assert_eq!(status, 200, "{body}");
    let session = session.expect("session header");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let content = body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(content.contains("Approval needed"), "{content}");
    assert!(
        content.contains("6*7"),
        "complete arguments shown: {content}"
    );
    let approval = &body["approval"];
    assert_eq!(approval["tool"], "calculator");
    assert_eq!(approval["arguments"], json!({"expression": "6*7"}));
    assert!(approval["expires_at"].as_i64().is_some());
    let id = approval["id"].as_str().expect("id").to_owned();
    assert_eq!(
        runs_of_calculator(&app).await,
        0,
        "not run before the decision"
    );

    let listed: Value = app
        .http
        .get(app.url("/v1/approvals"))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    assert_eq!(listed["data"].as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed["data"][0]["session"], session.as_str());

    let (status, decided) = decide(&app, &id, json!({"decision": "allow"})).await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["status"], "allowed");
    let reply = final_reply(&app, &session).await;
    assert!(
        reply.contains("42"),
        "the tool ran and its result reached the model: {reply}"
    );
    assert_eq!(runs_of_calculator(&app).await, 1);

    let (again, _) = decide(&app, &id, json!({"decision": "deny"})).await;
    assert_eq!(again, 409, "a decided approval is a conflict");
    assert_eq!(runs_of_calculator(&app).await, 1, "run once");
    // The resumed turn's request extends the parked one's, byte for byte.
    assert_prefix_holds(&llm.requests());
    app.stop().await;
}

#[tokio::test]
async fn a_denied_call_is_not_run_and_the_model_is_told() {
    let llm = FakeLlm::start(calculate_then_report).await;
    let app = asking_app(&llm, 3600).await;
    let (session, approval) = parked(&app, "what is 6*7?").await;
    let id = approval["id"].as_str().expect("id").to_owned();

    let (status, _) = decide(&app, &id, json!({"decision": "maybe"})).await;
    assert_eq!(status, 400, "an unknown decision is refused");
    let (status, _) = decide(&app, "999999", json!({"decision": "allow"})).await;
    assert_eq!(status, 404);
    let (status, _) = decide(&app, &id, json!({"decision": "deny"})).await;
    assert_eq!(status, 200);
    let reply = final_reply(&app, &session).await;
    assert!(reply.contains("denied"), "{reply}");
    assert_eq!(runs_of_calculator(&app).await, 0);
    app.stop().await;
}

#[tokio::test]
async fn allowed_for_the_conversation_the_tool_runs_without_asking_again() {
    let llm = FakeLlm::start(calculate_then_report).await;
    let app = asking_app(&llm, 3600).await;
    let (session, approval) = parked(&app, "first").await;
    let id = approval["id"].as_str().expect("id").to_owned();
    let (status, _) = decide(&app, &id, json!({"decision": "allow_session"})).await;
    assert_eq!(status, 200);
    final_reply(&app, &session).await;

    let (status, _, body) = app.chat(Some(&session), "second").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.get("approval").is_none(), "not asked again: {body}");
    let text = body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("42"), "{text}");
    assert_eq!(runs_of_calculator(&app).await, 2);

    // Another conversation is asked again.
    let (_, _, other) = app.chat(None, "elsewhere").await;
    assert!(other.get("approval").is_some(), "{other}");
    app.stop().await;
}

#[tokio::test]
async fn an_unanswered_request_expires_and_the_turn_finishes_without_the_call() {
    let llm = FakeLlm::start(calculate_then_report).await;
    let app = asking_app(&llm, 1).await;
    let (session, approval) = parked(&app, "what is 6*7?").await;
    let id = approval["id"].as_str().expect("id").to_owned();
    let reply = final_reply(&app, &session).await;
    assert!(reply.contains("nobody approved"), "{reply}");
    assert_eq!(runs_of_calculator(&app).await, 0);
    let (status, _) = decide(&app, &id, json!({"decision": "allow"})).await;
    assert_eq!(status, 409, "an expired approval is a conflict");
    assert_eq!(runs_of_calculator(&app).await, 0);
    app.stop().await;
}

#[tokio::test]
async fn stop_ends_a_parked_turn_and_a_later_message_waits_its_turn() {
    let llm = FakeLlm::start(calculate_then_report).await;
    let app = asking_app(&llm, 3600).await;
    let (session, _) = parked(&app, "what is 6*7?").await;
    let status_of = |text: &'static str| {
        let store = app.gateway.store.clone();
        let session = session.clone();
        async move {
            sqlx::query_scalar::<_, String>(
                "SELECT status FROM inbound WHERE session_id = $1 AND text = $2",
            )
            .bind(session)
            .bind(text)
            .fetch_optional(&mut *store.conn().await.expect("conn"))
            .await
            .expect("status")
        }
    };
    // A message while the turn waits is queued behind it, not run.
    let later = {
        let request = app
            .http
            .post(app.url("/v1/chat/completions"))
            .header("X-Session-Id", session.as_str())
            .json(&json!({"messages": [{"role": "user", "content": "later"}]}));
        tokio::spawn(async move {
            let response = request.send().await.expect("sent");
            response.json::<Value>().await.expect("json")
        })
    };
    eventually("the later message to be recorded", || async {
        status_of("later").await.is_some()
    })
    .await;
    assert_eq!(status_of("later").await.as_deref(), Some("pending"));
    assert_eq!(status_of("what is 6*7?").await.as_deref(), Some("waiting"));

    let (status, _, stopped) = app.chat(Some(&session), "/stop").await;
    assert_eq!(status, 200, "{stopped}");
    let later = later.await.expect("the later request");
    assert!(
        later.get("approval").is_some(),
        "the later message ran after the stopped turn (and asks in turn): {later}"
    );
    let outcome: String = sqlx::query_scalar(
        "SELECT outcome FROM inbound WHERE session_id = $1 AND text = 'what is 6*7?'",
    )
    .bind(&session)
    .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
    .await
    .expect("outcome");
    assert_eq!(outcome, "cancelled");
    assert_eq!(
        runs_of_calculator(&app).await,
        0,
        "a stopped call never runs"
    );
    app.stop().await;
}

#[tokio::test]
async fn ask_user_parks_until_the_person_answers() {
    let llm = FakeLlm::start(|body| {
        ask_then_report(
            body,
            r#"{"question":"Which colour?","choices":["red","blue"]}"#,
            "you chose:",
        )
    })
    .await;
    let app = asking_app(&llm, 3600).await;
    let (status, session, body) = app.chat(None, "paint it").await;
    assert_eq!(status, 200, "{body}");
    let session = session.expect("session");
    assert_eq!(body["approval"]["kind"], "question");
    assert_eq!(body["approval"]["choices"], json!(["red", "blue"]));
    let id = body["approval"]["id"].as_str().expect("id").to_owned();
    let (status, decided) = decide(&app, &id, json!({"answer": "blue, please"})).await;
    assert_eq!(status, 200, "{decided}");
    let reply = final_reply(&app, &session).await;
    assert!(reply.contains("blue, please"), "{reply}");
    app.stop().await;
}

#[tokio::test]
async fn on_telegram_the_question_has_buttons_a_tap_decides_and_forged_taps_change_nothing() {
    use switchboard_test_support::telegram::{FakeTelegram, TgUser};
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::start(calculate_then_report).await;
    let app = TestApp::spawn_with(&llm, |settings| {
        settings.telegram = Some(crate::helpers::telegram_settings(&telegram));
        settings.tools.approval.ask = vec!["calculator".to_owned()];
    })
    .await;
    let alice = TgUser {
        id: 501,
        first_name: "Alice",
    };
    let mallory = TgUser {
        id: 666,
        first_name: "Mallory",
    };
    let question = telegram.ask(alice, "what is 6*7?").await;
    assert!(question.contains("Approval needed"), "{question}");
    let message_id = (1..100)
        .map(|n| switchboard_test_support::telegram::FIRST_SENT_ID + n - 1)
        .find(|id| !telegram.buttons(alice.id, *id).is_empty())
        .unwrap_or_else(|| {
            panic!(
                "a message with buttons: {:?}",
                telegram.calls("sendMessage")
            )
        });
    let buttons = telegram.buttons(alice.id, message_id);
    let labels: Vec<&str> = buttons.iter().map(|(label, _)| label.as_str()).collect();
    assert_eq!(
        labels,
        ["Allow once", "Allow for this conversation", "Deny"]
    );
    let allow = buttons[0].1.clone();

    // A forged nonce, and the right data tapped from another chat: refused.
    let forged = allow.rsplit_once(':').map_or(String::new(), |(head, _)| {
        let (front, _nonce) = head.rsplit_once(':').expect("nonce");
        format!("{front}:0000000000:a")
    });
    telegram.tap(alice, alice.id, message_id, &forged);
    telegram.tap(mallory, mallory.id, message_id, &allow);
    telegram
        .wait_for("both taps answered", || telegram.answers().len() >= 2)
        .await;
    assert_eq!(runs_of_calculator(&app).await, 0, "nothing ran");
    let pending: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM approvals WHERE status = 'pending'")
            .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("count");
    assert_eq!(pending, 1, "nothing decided");

    let before = telegram.sent().len();
    telegram.tap(alice, alice.id, message_id, &allow);
    let reply = telegram
        .reply_after(before, alice.id, "the resumed turn's reply")
        .await;
    assert!(reply.contains("42"), "{reply}");
    assert_eq!(runs_of_calculator(&app).await, 1);
    telegram
        .wait_for("the question edited to its decision", || {
            telegram
                .chat_view(alice.id)
                .iter()
                .any(|text| text.contains("allowed once"))
        })
        .await;
    assert!(
        telegram.buttons(alice.id, message_id).is_empty(),
        "buttons gone"
    );
    // The same tap again (a redelivery, a double tap): nothing more runs.
    telegram.tap(alice, alice.id, message_id, &allow);
    telegram
        .wait_for("the repeated tap answered", || {
            telegram.answers().len() >= 4
        })
        .await;
    assert_eq!(runs_of_calculator(&app).await, 1);
    app.stop().await;
}

#[tokio::test]
async fn a_question_is_answered_by_the_persons_next_message() {
    let llm = FakeLlm::start(|body| {
        ask_then_report(body, r#"{"question":"What is your budget?"}"#, "noted:")
    })
    .await;
    let app = asking_app(&llm, 3600).await;
    let (session, approval) = parked(&app, "plan my trip").await;
    assert_eq!(approval["kind"], "question");
    let (status, _, ack) = app.chat(Some(&session), "about 500 euros").await;
    assert_eq!(status, 200, "{ack}");
    let reply = final_reply(&app, &session).await;
    assert!(reply.contains("about 500 euros"), "{reply}");
    // The answer is the tool's result, not a turn of its own.
    assert_eq!(llm.requests().len(), 2);
    app.stop().await;
}

/// A model that calculates (as [`calculate_then_report`]) when asked for
/// `6*7`, and answers anything else with `otherwise`.
fn calculate_on_6x7(body: &Value, otherwise: &str) -> Reply {
    let asks = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .is_some_and(|text| text.contains("6*7"));
    if asks || last_is_tool_result(body) {
        calculate_then_report(body)
    } else {
        Reply::Text(otherwise.to_owned())
    }
}

/// The requester and the admin of the admins' tests.
const ALICE: switchboard_test_support::telegram::TgUser =
    switchboard_test_support::telegram::TgUser {
        id: 501,
        first_name: "Alice",
    };
const BOB: switchboard_test_support::telegram::TgUser =
    switchboard_test_support::telegram::TgUser {
        id: 777,
        first_name: "Bob",
    };

/// The calculator asks first, and the admins decide.
fn admins_decide(settings: &mut switchboard::config::Settings) {
    settings.tools.approval.ask = vec!["calculator".to_owned()];
    settings.tools.approval.approver = switchboard::tools::approval::Approver::Admins;
}

/// Whether none of the bot's messages in `chat` shows buttons now.
fn no_buttons(telegram: &switchboard_test_support::telegram::FakeTelegram, chat: i64) -> bool {
    (0..100).all(|n| {
        telegram
            .buttons(chat, switchboard_test_support::telegram::FIRST_SENT_ID + n)
            .is_empty()
    })
}

/// The id of the bot's first message in `chat` that shows buttons.
fn message_with_buttons(
    telegram: &switchboard_test_support::telegram::FakeTelegram,
    chat: i64,
) -> i64 {
    (0..100)
        .map(|n| switchboard_test_support::telegram::FIRST_SENT_ID + n)
        .find(|id| !telegram.buttons(chat, *id).is_empty())
        .unwrap_or_else(|| {
            panic!(
                "a message with buttons in {chat}: {:?}",
                telegram.chat_view(chat)
            )
        })
}

/// With `approver = "admins"`, the request goes to the admins' direct
/// chats, not the requester's: the requester is told it waits, cannot
/// decide it (nor tap the admin's buttons from their own chat), and every
/// copy shows the admin's decision.
#[tokio::test]
async fn approvals_for_admins_go_to_their_direct_chats_and_only_they_decide() {
    use switchboard_test_support::telegram::FakeTelegram;
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::start(|body: &Value| calculate_on_6x7(body, "hello")).await;
    let app = TestApp::spawn_with(&llm, |settings| {
        settings.telegram = Some(crate::helpers::telegram_settings(&telegram));
        admins_decide(settings);
        settings.access.admins = vec!["telegram:777".to_owned()];
    })
    .await;
    let (alice, bob) = (ALICE, BOB);
    // The admin has a direct chat with the bot.
    assert_eq!(telegram.ask(bob, "hi").await, "hello");

    telegram.dm(alice, "what is 6*7?");
    telegram
        .wait_for("the requester told, the admin asked", || {
            let told = telegram.chat_view(alice.id);
            let asked = telegram.chat_view(bob.id);
            told.iter().any(|t| t.contains("needs an admin's approval"))
                && asked.iter().any(|t| t.contains("Approval needed"))
        })
        .await;
    assert!(
        no_buttons(&telegram, alice.id),
        "no buttons for the requester"
    );
    let question = telegram
        .chat_view(bob.id)
        .into_iter()
        .find(|t| t.contains("Approval needed"))
        .expect("question");
    assert!(question.contains("telegram user 501"), "{question}");
    let at_bob = message_with_buttons(&telegram, bob.id);
    let allow = telegram.buttons(bob.id, at_bob)[0].1.clone();
    let id: i64 = allow
        .split(':')
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("id");

    // The requester may not decide: neither by command nor with the
    // admin's button data tapped in their own chat.
    let refused = telegram.ask(alice, &format!("/allow {id}")).await;
    assert!(refused.contains("Only an admin"), "{refused}");
    telegram.tap(alice, alice.id, at_bob, &allow);
    telegram
        .wait_for("the requester's tap answered", || {
            !telegram.answers().is_empty()
        })
        .await;
    assert_eq!(runs_of_calculator(&app).await, 0, "nothing ran");

    let before = telegram.sent().len();
    telegram.tap(bob, bob.id, at_bob, &allow);
    let reply = telegram
        .reply_after(before, alice.id, "the resumed turn's reply")
        .await;
    assert!(reply.contains("42"), "{reply}");
    assert_eq!(runs_of_calculator(&app).await, 1);
    for chat in [alice.id, bob.id] {
        telegram
            .wait_for("every copy shows who decided", || {
                telegram
                    .chat_view(chat)
                    .iter()
                    .any(|t| t.contains("allowed once by") && t.contains("777"))
            })
            .await;
    }
    app.stop().await;
}

/// Admins on two platforms both get the request; the first to decide wins
/// (once), and the other copies show who decided — a later tap changes
/// nothing.
#[tokio::test]
async fn the_first_admin_to_decide_wins_and_the_other_copies_show_it() {
    use switchboard_test_support::discord::{FakeDiscord, USER_ID};
    use switchboard_test_support::telegram::FakeTelegram;
    const DM: u64 = 500_000_000_000_000_777;
    let telegram = FakeTelegram::start().await;
    let discord = FakeDiscord::start().await;
    let llm = FakeLlm::start(|body: &Value| calculate_on_6x7(body, "hello")).await;
    let app = TestApp::spawn_with(&llm, |settings| {
        settings.telegram = Some(crate::helpers::telegram_settings(&telegram));
        settings.discord = Some(crate::media_content::discord_settings(&discord));
        admins_decide(settings);
        settings.access.admins = vec!["telegram:777".to_owned(), format!("discord:{USER_ID}")];
    })
    .await;
    eventually("the Discord adapter identifies", || async {
        discord.connected()
    })
    .await;
    let (alice, bob) = (ALICE, BOB);
    assert_eq!(telegram.ask(bob, "hi").await, "hello");
    discord.user_sends_dm(DM, "hi");
    eventually("the Discord admin's chat answered", || {
        std::future::ready(discord.created().iter().any(|m| m.content == "hello"))
    })
    .await;

    telegram.dm(alice, "what is 6*7?");
    let on_discord = eventually_some("the question on Discord", || {
        std::future::ready(
            discord
                .created()
                .into_iter()
                .find(|m| m.content.contains("Approval needed"))
                .map(|m| m.id),
        )
    })
    .await;
    telegram
        .wait_for("the question on Telegram", || {
            telegram
                .chat_view(bob.id)
                .iter()
                .any(|t| t.contains("Approval needed"))
        })
        .await;
    let allow = discord.buttons(on_discord)[0].1.clone();
    discord.user_presses(DM, None, on_discord, &allow);
    telegram
        .wait_for("the reply, and the copies showing who decided", || {
            let decided = |chat| {
                telegram
                    .chat_view(chat)
                    .iter()
                    .any(|t| t.contains(&format!("allowed once by discord:{USER_ID}")))
            };
            decided(bob.id)
                && decided(alice.id)
                && telegram
                    .chat_view(alice.id)
                    .iter()
                    .any(|t| t.starts_with("tool said") && t.contains("42"))
        })
        .await;
    assert!(
        no_buttons(&telegram, bob.id),
        "the other admin's buttons are gone"
    );
    // The other admin's tap, come late: settled already, nothing more runs.
    telegram.tap(
        bob,
        bob.id,
        switchboard_test_support::telegram::FIRST_SENT_ID,
        &allow,
    );
    telegram
        .wait_for("the late tap answered", || !telegram.answers().is_empty())
        .await;
    assert_eq!(runs_of_calculator(&app).await, 1);
    app.stop().await;
}

/// A message that arrives while the turn before it waits is held back, and
/// its sender reminded (once per request) of what the turn waits for; it
/// is answered after the decision.
#[tokio::test]
async fn a_message_while_a_turn_waits_is_held_back_with_a_reminder() {
    use switchboard_test_support::telegram::{FakeTelegram, TgUser};
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::start(|body: &Value| calculate_on_6x7(body, "later answered")).await;
    let app = TestApp::spawn_with(&llm, |settings| {
        settings.telegram = Some(crate::helpers::telegram_settings(&telegram));
        settings.tools.approval.ask = vec!["calculator".to_owned()];
    })
    .await;
    let alice = TgUser {
        id: 501,
        first_name: "Alice",
    };
    let question = telegram.ask(alice, "what is 6*7?").await;
    assert!(question.contains("Approval needed"), "{question}");
    let reminded = telegram.ask(alice, "are you there?").await;
    assert!(
        reminded.contains("will be answered after") && reminded.contains("/allow 1"),
        "{reminded}"
    );
    telegram.dm(alice, "and now?");
    eventually("the second message held back too", || async {
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM inbound WHERE status = 'pending'")
            .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("count")
            == 2
    })
    .await;

    let asked = message_with_buttons(&telegram, alice.id);
    let allow = telegram.buttons(alice.id, asked)[0].1.clone();
    telegram.tap(alice, alice.id, asked, &allow);
    telegram
        .wait_for("the turn's reply, then the held-back messages'", || {
            let view = telegram.chat_view(alice.id);
            view.iter().any(|t| t.contains("42")) && view.iter().any(|t| t == "later answered")
        })
        .await;
    let reminders = telegram
        .chat_view(alice.id)
        .iter()
        .filter(|t| t.contains("will be answered after"))
        .count();
    assert_eq!(reminders, 1, "{:?}", telegram.chat_view(alice.id));
    app.stop().await;
}

/// A copy of a question still on its way (here: held back by the
/// platform's rate limit) when the decision is made shows the decision
/// once it is sent, not buttons nobody can use any more.
#[tokio::test]
async fn a_copy_sent_after_the_decision_shows_the_decision() {
    use switchboard_test_support::telegram::{FakeTelegram, too_many_requests};
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::start(|body: &Value| calculate_on_6x7(body, "hello")).await;
    let app = TestApp::spawn_with(&llm, |settings| {
        settings.telegram = Some(crate::helpers::telegram_settings(&telegram));
        admins_decide(settings);
        settings.access.admins = vec!["telegram:777".to_owned()];
    })
    .await;
    let (alice, bob) = (ALICE, BOB);
    assert_eq!(telegram.ask(bob, "hi").await, "hello");
    // The next message out (the admin's copy of the question) is refused
    // for a while.
    telegram.script("sendMessage", 429, too_many_requests(2));
    telegram.dm(alice, "what is 6*7?");
    let status = || async {
        sqlx::query_scalar::<_, String>("SELECT status FROM approvals WHERE id = 1")
            .fetch_optional(&mut *app.gateway.store.conn().await.expect("conn"))
            .await
            .expect("status")
    };
    eventually("the question asked", || async { status().await.is_some() }).await;
    telegram.dm(bob, "/allow 1");
    eventually("the decision", || async {
        status().await.as_deref() == Some("allowed")
    })
    .await;
    telegram
        .wait_for("the late copies showing the decision", || {
            let view = telegram.chat_view(bob.id);
            telegram
                .chat_view(alice.id)
                .iter()
                .any(|t| t.starts_with("tool said") && t.contains("42"))
                && !view.is_empty()
                && view.iter().all(|t| !t.contains("Approval needed"))
                && view.iter().any(|t| t.contains("allowed once by"))
        })
        .await;
    assert!(
        no_buttons(&telegram, bob.id),
        "{:?}",
        telegram.chat_view(bob.id)
    );
    assert!(no_buttons(&telegram, alice.id));
    app.stop().await;
}
