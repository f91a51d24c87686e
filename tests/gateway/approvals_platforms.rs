//! A person in the loop on the chat platforms other than Telegram, through
//! the real gateway against the fake Discord, Feishu, Slack and WhatsApp:
//! the question arrives with its three buttons; a press by someone other
//! than the requester, the right button pressed from another chat and a
//! forged nonce are refused, run nothing and leave the approval pending;
//! the requester's press decides it, the resumed turn's reply arrives, the
//! tool runs once and the question shows the decision (Discord: the
//! interaction answered with an update; Feishu: the callback's new card;
//! Slack: `chat.update`; WhatsApp, which cannot edit: a message replying
//! to the question); a repeated press runs nothing more. Along the way:
//! "Allow for this conversation" (Slack), Deny (Feishu) and `ask_user`'s
//! choices answered by a button (Discord, WhatsApp).

use std::future::ready;

use serde_json::{Value, json};
use switchboard::config::Settings;
use switchboard_test_support::{eventually, eventually_some};

use crate::helpers::{FakeLlm, Reply, TestApp, last_is_tool_result, last_user_text};

/// A model that, given a tool result, reports it (`tool said: …`); asked
/// to "paint", asks the user which colour (`ask_user` with two choices);
/// otherwise asks for the calculator (`6*7`, or for a "long" message a
/// sum of 1,500 ones).
fn script(body: &Value) -> Reply {
    if last_is_tool_result(body) {
        let result = body["messages"]
            .as_array()
            .and_then(|messages| messages.last())
            .and_then(|message| message["content"].as_str())
            .unwrap_or_default();
        return Reply::Text(format!("tool said: {result}"));
    }
    if last_user_text(body).contains("paint") {
        return Reply::Tools(vec![(
            "q1".to_owned(),
            "ask_user".to_owned(),
            r#"{"question":"Which colour?","choices":["red","blue"]}"#.to_owned(),
        )]);
    }
    let n = body["messages"].as_array().map_or(0, Vec::len);
    // Arguments too long for one chat message: the question is split.
    let arguments = if last_user_text(body).contains("long") {
        json!({"expression": vec!["1"; 1500].join("+")}).to_string()
    } else {
        r#"{"expression":"6*7"}"#.to_owned()
    };
    Reply::Tools(vec![(format!("c{n}"), "calculator".to_owned(), arguments)])
}

/// The calculator asks first; `ask_user` is offered.
fn asking(settings: &mut Settings) {
    settings.tools.approval.ask = vec!["calculator".to_owned()];
    settings.agent.tools.push("ask_user".to_owned());
}

/// The labels the core gives a tool's question, in order.
const LABELS: [&str; 3] = ["Allow once", "Allow for this conversation", "Deny"];

async fn scalar(app: &TestApp, sql: &str) -> i64 {
    sqlx::query_scalar::<_, i64>(sql)
        .fetch_one(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("count")
}

/// How often the calculator has run to the end.
async fn runs_of_calculator(app: &TestApp) -> i64 {
    scalar(
        app,
        "SELECT COUNT(*) FROM tool_calls WHERE name = 'calculator' AND status = 'done'",
    )
    .await
}

async fn pending_approvals(app: &TestApp) -> i64 {
    scalar(
        app,
        "SELECT COUNT(*) FROM approvals WHERE status = 'pending'",
    )
    .await
}

/// `action` (`ap:<id>:<nonce>:<answer>`) with another nonce.
fn forged(action: &str) -> String {
    let parts: Vec<&str> = action.split(':').collect();
    assert_eq!(parts.len(), 4, "an approval's action id: {action}");
    assert_ne!(parts[2], "0000000000", "a nonce of its own");
    format!("{}:{}:0000000000:{}", parts[0], parts[1], parts[3])
}

fn labels(buttons: &[(String, String)]) -> Vec<&str> {
    buttons.iter().map(|(label, _)| label.as_str()).collect()
}

mod discord {
    use switchboard_test_support::discord::{FakeDiscord, Recorded};

    use super::*;

    const DM: u64 = 500_000_000_000_000_901;
    const OTHER_DM: u64 = 500_000_000_000_000_902;
    const MALLORY: u64 = 800_000_000_000_000_666;

    /// The requests answering the interaction `id` (token `itoken-<id>`).
    fn answers(discord: &FakeDiscord, id: u64) -> Vec<Recorded> {
        let token = format!("/itoken-{id}");
        discord
            .interaction_requests()
            .into_iter()
            .filter(|r| r.path.contains(&token))
            .collect()
    }

    /// What the presser of interaction `id` was told (an ephemeral
    /// callback or follow-up), once told.
    fn notice(discord: &FakeDiscord, id: u64) -> Option<String> {
        answers(discord, id).iter().find_map(|r| {
            let content = if r.path.ends_with("/callback") && r.body["type"] == 4 {
                &r.body["data"]["content"]
            } else if r.path.ends_with(&format!("itoken-{id}")) {
                &r.body["content"]
            } else {
                return None;
            };
            content.as_str().map(str::to_owned)
        })
    }

    /// Waits for what the presser of interaction `id` is told.
    async fn told(discord: &FakeDiscord, id: u64) -> String {
        eventually_some("the press answered with a notice", || {
            ready(notice(discord, id))
        })
        .await
    }

    /// The bot's newest message in `channel` showing buttons, once there
    /// is one after the first `after` messages created.
    async fn question(discord: &FakeDiscord, channel: u64, after: usize) -> u64 {
        eventually_some("a question with buttons", || {
            ready(
                discord
                    .created()
                    .iter()
                    .skip(after)
                    .filter(|m| m.channel_id == channel.to_string())
                    .map(|m| m.id)
                    .find(|id| !discord.buttons(*id).is_empty()),
            )
        })
        .await
    }

    /// The content of the bot's message `id`.
    fn content(discord: &FakeDiscord, id: u64) -> String {
        discord
            .created()
            .into_iter()
            .find(|m| m.id == id)
            .map(|m| m.content)
            .unwrap_or_default()
    }

    /// Waits for a bot message in `channel` containing `text`.
    async fn reply_with(discord: &FakeDiscord, channel: u64, text: &str) -> String {
        eventually_some("the resumed turn's reply", || {
            ready(
                discord
                    .created()
                    .into_iter()
                    .filter(|m| m.channel_id == channel.to_string())
                    .map(|m| m.content)
                    .find(|content| content.contains(text)),
            )
        })
        .await
    }

    /// Whether interaction `id` was answered by updating the pressed
    /// message: an UPDATE_MESSAGE callback, or (a slow core) an edit of
    /// `@original`.
    fn answered_with_update(discord: &FakeDiscord, id: u64) -> bool {
        answers(discord, id).iter().any(|r| {
            (r.path.ends_with("/callback") && r.body["type"] == 7)
                || r.path.ends_with("/messages/@original")
        })
    }

    #[tokio::test]
    async fn on_discord_a_press_decides_once_and_others_presses_change_nothing() {
        let discord = FakeDiscord::start().await;
        let llm = FakeLlm::start(script).await;
        let app = TestApp::spawn_with(&llm, |s| {
            s.discord = Some(crate::media_content::discord_settings(&discord));
            asking(s);
        })
        .await;
        eventually("the adapter identifies", || async { discord.connected() }).await;

        discord.user_sends_dm(DM, "what is 6*7?");
        let q = question(&discord, DM, 0).await;
        assert!(content(&discord, q).contains("Approval needed"), "{q}");
        let buttons = discord.buttons(q);
        assert_eq!(labels(&buttons), LABELS);
        let allow = buttons[0].1.clone();

        // A forged nonce, another person in the chat, the right button
        // from another chat: each refused with a notice, nothing decided.
        let fake = discord.user_presses(DM, None, q, &forged(&allow));
        let other = discord.presses_as(MALLORY, "mallory", DM, None, q, &allow);
        let elsewhere = discord.user_presses(OTHER_DM, None, q, &allow);
        assert!(told(&discord, fake).await.contains("no longer valid"));
        assert!(
            told(&discord, other)
                .await
                .contains("Only the person who asked")
        );
        assert!(told(&discord, elsewhere).await.contains("no longer valid"));
        assert_eq!(runs_of_calculator(&app).await, 0, "nothing ran");
        assert_eq!(pending_approvals(&app).await, 1, "nothing decided");
        assert_eq!(discord.buttons(q).len(), 3, "the question stands");

        let press = discord.user_presses(DM, None, q, &allow);
        let reply = reply_with(&discord, DM, "tool said:").await;
        assert!(reply.contains("42"), "{reply}");
        assert_eq!(runs_of_calculator(&app).await, 1);
        eventually("the question updated to its decision", || {
            ready(content(&discord, q).contains("allowed once"))
        })
        .await;
        assert!(discord.buttons(q).is_empty(), "buttons gone");
        assert!(
            answered_with_update(&discord, press),
            "{:?}",
            answers(&discord, press)
        );
        assert_eq!(rest_edits(&discord, q), 0, "updated by the answer alone");

        // The same press again: told it is decided, nothing more runs.
        let again = discord.user_presses(DM, None, q, &allow);
        assert!(told(&discord, again).await.contains("already decided"));
        assert_eq!(runs_of_calculator(&app).await, 1);
        assert_eq!(pending_approvals(&app).await, 0);
        app.stop().await;
    }

    /// The edits of the bot's message `id` through the channel's REST
    /// route (not an interaction's answer).
    fn rest_edits(discord: &FakeDiscord, id: u64) -> usize {
        let path = format!("/messages/{id}");
        discord
            .requests()
            .iter()
            .filter(|r| r.path.ends_with(&path))
            .count()
    }

    #[tokio::test]
    async fn on_discord_a_split_question_is_settled_in_the_part_with_its_buttons() {
        let discord = FakeDiscord::start().await;
        let llm = FakeLlm::start(script).await;
        let app = TestApp::spawn_with(&llm, |s| {
            s.discord = Some(crate::media_content::discord_settings(&discord));
            asking(s);
        })
        .await;
        eventually("the adapter identifies", || async { discord.connected() }).await;

        // Decided by a press: the pressed part is updated, once, and the
        // part before it keeps the arguments.
        discord.user_sends_dm(DM, "a long sum");
        let q = question(&discord, DM, 0).await;
        let parts: Vec<u64> = discord
            .created()
            .iter()
            .filter(|m| m.channel_id == DM.to_string() && m.id <= q)
            .map(|m| m.id)
            .collect();
        // Two full parts: the long value is cut inside, not left in short
        // parts of a line each.
        assert_eq!(parts.len(), 2, "split: {:?}", discord.created());
        let first = parts[0];
        assert!(content(&discord, first).contains("Approval needed"));
        let allow = discord.buttons(q)[0].1.clone();
        discord.user_presses(DM, None, q, &allow);
        reply_with(&discord, DM, "tool said:").await;
        eventually("the pressed part updated", || {
            ready(content(&discord, q).contains("allowed once"))
        })
        .await;
        assert!(discord.buttons(q).is_empty(), "buttons gone");
        assert_eq!(rest_edits(&discord, q), 0, "updated by the answer alone");
        for part in &parts[..parts.len() - 1] {
            assert_eq!(rest_edits(&discord, *part), 0, "the parts before stand");
        }
        assert!(content(&discord, first).contains("Approval needed"));

        // Decided by `/allow`: the part with the buttons is edited.
        let before = discord.created().len();
        discord.user_sends_dm(DM, "another long sum");
        let q = question(&discord, DM, before).await;
        discord.user_sends_dm(DM, "/allow 2");
        eventually("the question's buttons gone", || {
            ready(discord.buttons(q).is_empty())
        })
        .await;
        assert!(content(&discord, q).contains("allowed once"), "{q}");
        eventually("the second turn resumed", || {
            ready(
                discord
                    .created()
                    .iter()
                    .filter(|m| m.content.contains("tool said:"))
                    .count()
                    == 2,
            )
        })
        .await;
        assert_eq!(pending_approvals(&app).await, 0);
        app.stop().await;
    }

    #[tokio::test]
    async fn on_discord_ask_user_is_answered_by_a_choice_button() {
        let discord = FakeDiscord::start().await;
        let llm = FakeLlm::start(script).await;
        let app = TestApp::spawn_with(&llm, |s| {
            s.discord = Some(crate::media_content::discord_settings(&discord));
            asking(s);
        })
        .await;
        eventually("the adapter identifies", || async { discord.connected() }).await;

        discord.user_sends_dm(DM, "paint it");
        let q = question(&discord, DM, 0).await;
        assert!(content(&discord, q).contains("Which colour?"), "{q}");
        let buttons = discord.buttons(q);
        assert_eq!(labels(&buttons), ["red", "blue"]);
        let other = discord.presses_as(MALLORY, "mallory", DM, None, q, &buttons[1].1);
        assert!(
            told(&discord, other)
                .await
                .contains("Only the person who asked")
        );
        assert_eq!(pending_approvals(&app).await, 1);

        discord.user_presses(DM, None, q, &buttons[1].1);
        let reply = reply_with(&discord, DM, "tool said:").await;
        assert!(reply.contains("blue"), "{reply}");
        eventually("the question shows the answer", || {
            ready(content(&discord, q).contains("answered"))
        })
        .await;
        assert!(content(&discord, q).contains("blue"));
        assert!(discord.buttons(q).is_empty(), "buttons gone");
        assert_eq!(runs_of_calculator(&app).await, 0);
        app.stop().await;
    }
}

mod feishu {
    use switchboard_feishu::{Domain, FeishuSettings};
    use switchboard_test_support::feishu::{
        APP_ID, APP_SECRET, FakeFeishu, VERIFICATION_TOKEN, card_action, card_buttons,
        message_event,
    };

    use super::*;

    const CHAT: &str = "oc_chat";

    /// `[feishu]` pointing at `fake`, without an Encrypt Key (events go
    /// in the clear), and an ack timeout long enough that a press's
    /// answer is always the callback's own response.
    fn settings(fake: &FakeFeishu) -> FeishuSettings {
        // SAFETY (test): variable names unique to this module, always set
        // to the same values.
        unsafe {
            std::env::set_var("SB_TEST_FSAP_SECRET", APP_SECRET);
            std::env::set_var("SB_TEST_FSAP_TOKEN", VERIFICATION_TOKEN);
        }
        let mut settings = FeishuSettings::new(APP_ID);
        settings.app_secret_env = "SB_TEST_FSAP_SECRET".to_owned();
        settings.verification_token_env = "SB_TEST_FSAP_TOKEN".to_owned();
        settings.domain = Domain::Custom(fake.url());
        settings.ack_timeout_ms = 15_000;
        settings
    }

    /// Posts `event` to the webhook; its status and JSON answer.
    async fn post(app: &TestApp, event: &Value) -> (u16, Value) {
        let response = app
            .http
            .post(app.url("/feishu/events"))
            .json(event)
            .send()
            .await
            .expect("sent");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// A direct message `text` in [`CHAT`] from `ou_alice`.
    fn says(event_id: &str, message_id: &str, text: &str) -> Value {
        let mut event = message_event(event_id, "p2p", text, json!([]));
        event["event"]["message"]["message_id"] = json!(message_id);
        event
    }

    /// The id and buttons of the bot's newest card with buttons, once
    /// there is one after the first `after` messages delivered.
    async fn question(feishu: &FakeFeishu, after: usize) -> (String, Vec<(String, String)>) {
        eventually_some("a card with buttons", || {
            let found = feishu
                .delivered()
                .iter()
                .enumerate()
                .skip(after)
                .filter(|(_, m)| m.body["msg_type"] == "interactive")
                .map(|(index, m)| (format!("om_sent_{}", index + 1), card_buttons(&m.content())))
                .find(|(_, buttons)| !buttons.is_empty());
            ready(found)
        })
        .await
    }

    /// A press of the button `action` on card `message` in `chat` by
    /// `open_id`; the webhook's answer.
    async fn press(
        app: &TestApp,
        event_id: &str,
        open_id: &str,
        chat: &str,
        message: &str,
        action: &str,
    ) -> Value {
        let event = card_action(event_id, open_id, chat, message, json!({"action": action}));
        let (status, body) = post(app, &event).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Waits for a delivered message containing `text` (after the first
    /// `after`); its body.
    async fn reply_with(feishu: &FakeFeishu, after: usize, text: &str) -> String {
        eventually_some("the resumed turn's reply", || {
            ready(
                feishu
                    .delivered()
                    .iter()
                    .skip(after)
                    .map(|m| m.body.to_string())
                    .find(|body| body.contains(text)),
            )
        })
        .await
    }

    fn toast(answer: &Value) -> &str {
        answer["toast"]["content"].as_str().unwrap_or_default()
    }

    #[tokio::test]
    async fn on_feishu_a_press_decides_once_the_card_shows_it_and_a_denial_runs_nothing() {
        let feishu = FakeFeishu::start().await;
        let llm = FakeLlm::start(script).await;
        let app = TestApp::spawn_with(&llm, |s| {
            s.feishu = Some(settings(&feishu));
            asking(s);
        })
        .await;

        let (status, _) = post(&app, &says("ev-1", "om_1", "what is 6*7?")).await;
        assert_eq!(status, 200);
        let (card, buttons) = question(&feishu, 0).await;
        assert_eq!(labels(&buttons), LABELS);
        let allow = buttons[0].1.clone();

        let fake = press(&app, "ev-p1", "ou_alice", CHAT, &card, &forged(&allow)).await;
        let other = press(&app, "ev-p2", "ou_mallory", CHAT, &card, &allow).await;
        let elsewhere = press(&app, "ev-p3", "ou_alice", "oc_other", &card, &allow).await;
        assert!(toast(&fake).contains("no longer valid"), "{fake}");
        assert!(
            toast(&other).contains("Only the person who asked"),
            "{other}"
        );
        assert!(toast(&elsewhere).contains("no longer valid"), "{elsewhere}");
        for refused in [&fake, &other, &elsewhere] {
            assert!(refused.get("card").is_none(), "the card stays: {refused}");
        }
        assert_eq!(runs_of_calculator(&app).await, 0, "nothing ran");
        assert_eq!(pending_approvals(&app).await, 1, "nothing decided");

        let before = feishu.delivered().len();
        let allowed = press(&app, "ev-p4", "ou_alice", CHAT, &card, &allow).await;
        assert_eq!(allowed["card"]["type"], "raw", "{allowed}");
        let shown = &allowed["card"]["data"];
        assert!(shown.to_string().contains("allowed once"), "{shown}");
        assert!(card_buttons(shown).is_empty(), "buttons gone: {shown}");
        let reply = reply_with(&feishu, before, "tool said:").await;
        assert!(reply.contains("42"), "{reply}");
        assert_eq!(runs_of_calculator(&app).await, 1);
        // The pressed card was updated by the callback's answer, not
        // edited a second time through the API.
        assert!(
            feishu.updates().iter().all(|(id, _)| id != &card),
            "{:?}",
            feishu.updates()
        );

        let again = press(&app, "ev-p5", "ou_alice", CHAT, &card, &allow).await;
        assert!(toast(&again).contains("already decided"), "{again}");
        assert_eq!(runs_of_calculator(&app).await, 1);

        // Allowed once, not for the conversation: the next call asks again.
        let delivered = feishu.delivered().len();
        let (status, _) = post(&app, &says("ev-2", "om_2", "and again")).await;
        assert_eq!(status, 200);
        let (second, buttons) = question(&feishu, delivered).await;
        assert_ne!(second, card);
        let before = feishu.delivered().len();
        let denied = press(&app, "ev-p6", "ou_alice", CHAT, &second, &buttons[2].1).await;
        assert!(
            denied["card"]["data"].to_string().contains("denied"),
            "{denied}"
        );
        let reply = reply_with(&feishu, before, "tool said:").await;
        assert!(reply.contains("denied"), "the model is told: {reply}");
        assert_eq!(
            runs_of_calculator(&app).await,
            1,
            "a denied call never runs"
        );
        assert_eq!(pending_approvals(&app).await, 0);
        app.stop().await;
    }
}

mod slack {
    use switchboard_test_support::slack::{
        Delivery, FakeSlack, Posted, SIGNING_SECRET, TEAM_ID, USER_ID, block_actions,
        event_callback, message_event,
    };

    use super::*;

    const DM: &str = "D0DMAPPR1";
    const MALLORY: &str = "UMALLORY1";

    async fn deliver(app: &TestApp, event: &Value) {
        let delivered = Delivery::new(SIGNING_SECRET)
            .event(&app.url("/slack/events"), event)
            .await;
        assert_eq!(delivered.statuses, [200]);
    }

    /// Delivers the press `payload`, with a trigger id of its own (each
    /// press is a new interaction).
    async fn press(app: &TestApp, payload: &Value) {
        static PRESSES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = PRESSES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut payload = payload.clone();
        payload["trigger_id"] = json!(format!("trig.approvals.{n}"));
        let payload = &payload;
        let delivered = Delivery::new(SIGNING_SECRET)
            .interaction(&app.url("/slack/interactivity"), payload)
            .await;
        assert_eq!(delivered.statuses, [200], "{}", delivered.body);
    }

    /// The buttons under a posted message: (label, value).
    fn buttons(posted: &Posted) -> Vec<(String, String)> {
        posted
            .blocks
            .as_array()
            .into_iter()
            .flatten()
            .filter(|block| block["type"] == "actions")
            .filter_map(|block| block["elements"].as_array())
            .flatten()
            .map(|button| {
                let label = button["text"]["text"].as_str().unwrap_or_default();
                let value = button["value"].as_str().unwrap_or_default();
                (label.to_owned(), value.to_owned())
            })
            .collect()
    }

    /// The bot's message `ts` in the DM as it stands now.
    fn message(slack: &FakeSlack, ts: &str) -> Posted {
        slack
            .posted_in(DM)
            .into_iter()
            .find(|m| m.ts == ts)
            .expect("the question")
    }

    /// The notices shown to one person so far: (user, text).
    fn ephemerals(slack: &FakeSlack) -> Vec<(String, String)> {
        slack
            .calls_to("chat.postEphemeral")
            .iter()
            .map(|call| {
                let field = |name: &str| call.args[name].as_str().unwrap_or_default().to_owned();
                (field("user"), field("text"))
            })
            .collect()
    }

    async fn ephemerals_at_least(slack: &FakeSlack, count: usize) -> Vec<(String, String)> {
        eventually("the presses' notices", || {
            ready(ephemerals(slack).len() >= count)
        })
        .await;
        ephemerals(slack)
    }

    /// The bot's replies in the DM containing `text`.
    fn replies_with(slack: &FakeSlack, text: &str) -> usize {
        slack
            .posted_in(DM)
            .iter()
            .filter(|m| m.text.contains(text))
            .count()
    }

    #[tokio::test]
    async fn on_slack_allowed_for_the_conversation_the_next_call_runs_without_asking() {
        let slack = FakeSlack::start().await;
        let llm = FakeLlm::start(script).await;
        let app = TestApp::spawn_with(&llm, |s| {
            s.slack = Some(crate::slack::slack_settings(&slack));
            asking(s);
        })
        .await;

        let first = message_event(DM, "im", "what is 6*7?", "1700000001.000100");
        deliver(&app, &event_callback(TEAM_ID, first)).await;
        let question = eventually_some("a question with buttons", || {
            ready(
                slack
                    .posted_in(DM)
                    .into_iter()
                    .find(|m| !buttons(m).is_empty()),
            )
        })
        .await;
        assert!(question.text.contains("Approval needed"), "{question:?}");
        let ts = question.ts.clone();
        let shown = buttons(&question);
        assert_eq!(labels(&shown), LABELS);
        let for_the_conversation = shown[1].1.clone();

        let fake = block_actions(TEAM_ID, DM, &ts, None, &forged(&for_the_conversation));
        let mut other = block_actions(TEAM_ID, DM, &ts, None, &for_the_conversation);
        other["user"] = json!({"id": MALLORY, "username": "mallory", "name": "mallory",
                               "team_id": TEAM_ID});
        let elsewhere = block_actions(TEAM_ID, "D0ELSEWH1", &ts, None, &for_the_conversation);
        press(&app, &fake).await;
        press(&app, &other).await;
        press(&app, &elsewhere).await;
        let notices = ephemerals_at_least(&slack, 3).await;
        let told = |user: &str, text: &str| {
            notices
                .iter()
                .filter(|(to, said)| to == user && said.contains(text))
                .count()
        };
        assert_eq!(told(USER_ID, "no longer valid"), 2, "{notices:?}");
        assert_eq!(told(MALLORY, "Only the person who asked"), 1, "{notices:?}");
        assert_eq!(runs_of_calculator(&app).await, 0, "nothing ran");
        assert_eq!(pending_approvals(&app).await, 1, "nothing decided");
        assert_eq!(message(&slack, &ts).updates, 0, "the question stands");

        press(
            &app,
            &block_actions(TEAM_ID, DM, &ts, None, &for_the_conversation),
        )
        .await;
        eventually("the resumed turn's reply", || {
            ready(replies_with(&slack, "tool said:") == 1)
        })
        .await;
        assert_eq!(replies_with(&slack, "42"), 1, "{:?}", slack.posted_in(DM));
        assert_eq!(runs_of_calculator(&app).await, 1);
        eventually("the question updated to its decision", || {
            ready(
                message(&slack, &ts)
                    .text
                    .contains("allowed for this conversation"),
            )
        })
        .await;
        let updated = message(&slack, &ts);
        assert!(buttons(&updated).is_empty(), "buttons gone: {updated:?}");
        assert_eq!(updated.updates, 1, "updated once");
        let notices = ephemerals_at_least(&slack, 4).await;
        assert!(notices[3].1.contains("Done"), "{notices:?}");

        // The same press again: nothing more runs.
        press(
            &app,
            &block_actions(TEAM_ID, DM, &ts, None, &for_the_conversation),
        )
        .await;
        let notices = ephemerals_at_least(&slack, 5).await;
        assert!(notices[4].1.contains("already decided"), "{notices:?}");
        assert_eq!(runs_of_calculator(&app).await, 1);

        // Later calls in this conversation run without asking.
        let second = message_event(DM, "im", "and again", "1700000002.000100");
        deliver(&app, &event_callback(TEAM_ID, second)).await;
        eventually("the second reply", || {
            ready(replies_with(&slack, "tool said:") == 2)
        })
        .await;
        assert_eq!(replies_with(&slack, "42"), 2, "{:?}", slack.posted_in(DM));
        assert_eq!(runs_of_calculator(&app).await, 2);
        assert_eq!(scalar(&app, "SELECT COUNT(*) FROM approvals").await, 1);
        let posts = slack.posted_in(DM);
        assert!(
            posts
                .iter()
                .all(|m| buttons(m).is_empty() && !m.text.contains("Approval needed")),
            "not asked again: {posts:?}"
        );
        app.stop().await;
    }
}

mod whatsapp {
    use switchboard_test_support::whatsapp::{
        CUSTOMER, FakeWhatsApp, PHONE_NUMBER_ID, Recorded, Webhook, button_reply, messages,
        notification, text,
    };

    use switchboard_test_support::wait::{PATIENCE, within};

    use super::*;

    const MALLORY: &str = "15559876543";

    fn webhook(app: &TestApp) -> Webhook {
        Webhook::new(app.url("/whatsapp/webhook"))
    }

    /// Delivers `payload`, which must be acknowledged (so the core has
    /// taken everything in it).
    async fn deliver(app: &TestApp, payload: &Value) {
        assert_eq!(webhook(app).deliver(payload).await, 200);
    }

    /// The customer presses the reply button `id` under `question`.
    fn pressed(wamid: &str, question: &str, id: &str, title: &str) -> Value {
        messages(
            PHONE_NUMBER_ID,
            vec![button_reply(wamid, question, id, title)],
        )
    }

    /// [`MALLORY`] presses the reply button `id` under `question`.
    fn pressed_by_mallory(wamid: &str, question: &str, id: &str) -> Value {
        let mut press = button_reply(wamid, question, id, "Allow once");
        press["from"] = json!(MALLORY);
        notification(
            PHONE_NUMBER_ID,
            json!({
                "contacts": [{"profile": {"name": "Mallory"}, "wa_id": MALLORY}],
                "messages": [press],
            }),
        )
    }

    /// The reply buttons of a sent message: (title, id).
    fn buttons(sent: &Recorded) -> Vec<(String, String)> {
        sent.body["interactive"]["action"]["buttons"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|button| {
                let title = button["reply"]["title"].as_str().unwrap_or_default();
                let id = button["reply"]["id"].as_str().unwrap_or_default();
                (title.to_owned(), id.to_owned())
            })
            .collect()
    }

    /// The newest message with buttons sent after the first `after`: its
    /// wamid and buttons.
    async fn question(fake: &FakeWhatsApp, after: usize) -> (String, Vec<(String, String)>) {
        eventually_some("a question with buttons", || {
            ready(
                fake.sent()
                    .iter()
                    .skip(after)
                    .filter(|m| !buttons(m).is_empty())
                    .find_map(|m| Some((m.message_id.clone()?, buttons(m)))),
            )
        })
        .await
    }

    /// The texts sent to `to` so far, with the message each replies to.
    fn sent_to(fake: &FakeWhatsApp, to: &str) -> Vec<(String, Option<String>)> {
        fake.sent()
            .iter()
            .filter(|m| m.body["to"] == to)
            .map(|m| {
                let text = m.text().unwrap_or_default().to_owned();
                (text, m.reply_to().map(str::to_owned))
            })
            .collect()
    }

    /// How many messages sent to `to` contain `text` (replying to
    /// `question`, when given).
    fn count(fake: &FakeWhatsApp, to: &str, text: &str, question: Option<&str>) -> usize {
        sent_to(fake, to)
            .iter()
            .filter(|(said, reply_to)| {
                said.contains(text) && question.is_none_or(|q| reply_to.as_deref() == Some(q))
            })
            .count()
    }

    /// The model's replies to the customer (`tool said: …`), oldest first.
    fn replies(fake: &FakeWhatsApp) -> Vec<String> {
        sent_to(fake, CUSTOMER)
            .into_iter()
            .map(|(said, _)| said)
            .filter(|said| said.contains("tool said:"))
            .collect()
    }

    #[tokio::test]
    async fn on_whatsapp_a_press_decides_once_and_the_decision_follows_as_a_reply() {
        let fake = FakeWhatsApp::start().await;
        let llm = FakeLlm::start(script).await;
        let app = TestApp::spawn_with(&llm, |s| {
            s.whatsapp = Some(crate::whatsapp::whatsapp_settings(&fake));
            asking(s);
        })
        .await;

        deliver(
            &app,
            &messages(PHONE_NUMBER_ID, vec![text("wamid.IN1", "what is 6*7?")]),
        )
        .await;
        let (q, shown) = question(&fake, 0).await;
        // Reply button titles hold 20 characters: the adapter cuts longer
        // labels with an ellipsis.
        assert_eq!(
            labels(&shown),
            ["Allow once", "Allow for this conv…", "Deny"]
        );
        let allow = shown[0].1.clone();

        // A forged nonce from the requester, the right button from another
        // person (on WhatsApp, another chat too).
        deliver(
            &app,
            &pressed("wamid.P1", &q, &forged(&allow), "Allow once"),
        )
        .await;
        deliver(&app, &pressed_by_mallory("wamid.P2", &q, &allow)).await;
        // Both refused as presses that fit no question of theirs: the
        // chat is checked before the person.
        let refused = within(PATIENCE, || {
            ready(
                (count(&fake, CUSTOMER, "no longer valid", Some(&q)) == 1
                    && count(&fake, MALLORY, "no longer valid", Some(&q)) == 1)
                    .then_some(()),
            )
        })
        .await;
        assert!(refused.is_some(), "the refusals: {:?}", fake.sent());
        assert_eq!(runs_of_calculator(&app).await, 0, "nothing ran");
        assert_eq!(pending_approvals(&app).await, 1, "nothing decided");

        deliver(&app, &pressed("wamid.P3", &q, &allow, "Allow once")).await;
        eventually("the resumed turn's reply", || {
            ready(count(&fake, CUSTOMER, "tool said:", None) == 1)
        })
        .await;
        let reply = replies(&fake).join("\n");
        assert!(reply.contains("42"), "{reply}");
        assert_eq!(runs_of_calculator(&app).await, 1);
        // WhatsApp cannot edit a message: the decision goes as a message
        // replying to the question, once, with the presser's notice.
        eventually("the decision shown", || {
            ready(
                count(&fake, CUSTOMER, "allowed once", Some(&q)) == 1
                    && count(&fake, CUSTOMER, "Done.", Some(&q)) == 1,
            )
        })
        .await;

        deliver(&app, &pressed("wamid.P4", &q, &allow, "Allow once")).await;
        eventually("the repeated press answered", || {
            ready(count(&fake, CUSTOMER, "already decided", Some(&q)) == 1)
        })
        .await;
        // Told again how it was decided, before the notice; no other copy.
        assert_eq!(count(&fake, CUSTOMER, "allowed once", Some(&q)), 2);
        assert_eq!(runs_of_calculator(&app).await, 1);
        assert_eq!(count(&fake, CUSTOMER, "tool said:", None), 1);

        // A question of the agent's own, answered by a button.
        let after = fake.sent().len();
        deliver(
            &app,
            &messages(PHONE_NUMBER_ID, vec![text("wamid.IN2", "paint it")]),
        )
        .await;
        let (asked, choices) = question(&fake, after).await;
        assert_eq!(labels(&choices), ["red", "blue"]);
        deliver(&app, &pressed("wamid.P5", &asked, &choices[0].1, "red")).await;
        eventually("the answer's reply", || {
            ready(count(&fake, CUSTOMER, "tool said:", None) == 2)
        })
        .await;
        let reply = replies(&fake).pop().unwrap_or_default();
        assert!(reply.contains("red"), "{reply}");
        assert_eq!(count(&fake, CUSTOMER, "answered", Some(&asked)), 1);
        assert_eq!(pending_approvals(&app).await, 0);
        app.stop().await;
    }
}
