//! Buttons: components under a question, presses over the gateway answered
//! through the interaction callback (in time, or acknowledged first when
//! the core is slow), bad presses refused without harm.

use std::sync::Arc;

use serde_json::{Value, json};
use switchboard_contract::{
    AccountId, ActionId, ActionReply, Button, ButtonStyle, ChatId, ChatKind, OutboundMessage,
    PlatformName, PlatformSender,
};
use switchboard_discord::{DiscordError, DiscordSender, DiscordSettings};
use switchboard_test_support::eventually;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::fake_discord::{FakeDiscord, USER_ID};
use crate::support::{RecordingSink, TOKEN, adapter_with};

/// The DM channel the question is asked in.
const DM: u64 = 500_000_000_000_000_088;
/// A server the bot is in.
const GUILD: u64 = 700_000_000_000_000_001;

/// The adapter's gateway worker and sender against a fake Discord.
struct Running {
    fake: FakeDiscord,
    sink: Arc<RecordingSink>,
    sender: Arc<DiscordSender>,
    shutdown: CancellationToken,
    worker: JoinHandle<Result<(), DiscordError>>,
}

impl Running {
    async fn start() -> Self {
        let fake = FakeDiscord::start().await;
        let sink = Arc::new(RecordingSink::default());
        let adapter = adapter_with(
            &fake,
            TOKEN,
            DiscordSettings::default(),
            Arc::clone(&sink) as _,
        );
        let shutdown = CancellationToken::new();
        let worker = tokio::spawn(adapter.gateway.run(shutdown.clone()));
        eventually("the adapter identifies", || async { fake.connected() }).await;
        Self {
            fake,
            sink,
            sender: adapter.sender,
            shutdown,
            worker,
        }
    }

    /// Sends `question` with Allow/Deny buttons to `channel`; returns the
    /// id of its (last) message.
    async fn ask(&self, channel: u64, text: &str) -> u64 {
        let receipt = self.sender.send(&question(channel, text)).await.unwrap();
        receipt.message_ids.last().unwrap().parse().unwrap()
    }

    fn answers(&self) -> Vec<Value> {
        self.fake
            .interaction_requests()
            .into_iter()
            .map(|r| json!({"path": r.path, "body": r.body}))
            .collect()
    }

    async fn wait_for_answers(&self, count: usize, what: &str) -> Vec<Value> {
        eventually(what, || async { self.answers().len() >= count }).await;
        self.answers()
    }

    async fn stop(self) {
        self.shutdown.cancel();
        let ended = self.worker.await.expect("the worker does not panic");
        assert!(ended.is_ok(), "{ended:?}");
    }
}

fn question(channel: u64, text: &str) -> OutboundMessage {
    OutboundMessage {
        platform: PlatformName::parse("discord").unwrap(),
        account: AccountId::parse("900000000000000001").unwrap(),
        chat: ChatId::parse(channel.to_string()).unwrap(),
        thread: None,
        reply_to: None,
        text: text.to_owned(),
        idempotency_key: format!("sb-q{}", text.len()),
        replaces: None,
        buttons: vec![
            Button::new(ActionId::parse("ap:9:once").unwrap(), "Allow once")
                .styled(ButtonStyle::Primary),
            Button::new(ActionId::parse("ap:9:deny").unwrap(), "Deny").styled(ButtonStyle::Danger),
        ],
        redelivery: false,
    }
}

fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(label, id)| ((*label).to_owned(), (*id).to_owned()))
        .collect()
}

#[tokio::test]
async fn a_question_carries_its_buttons_on_its_last_part_only() {
    let app = Running::start().await;
    let long = "A long question. ".repeat(200);

    let receipt = app.sender.send(&question(DM, &long)).await.unwrap();

    assert!(receipt.message_ids.len() >= 2);
    let ids: Vec<u64> = receipt
        .message_ids
        .iter()
        .map(|id| id.parse().unwrap())
        .collect();
    let (last, earlier) = ids.split_last().unwrap();
    for id in earlier {
        assert!(app.fake.buttons(*id).is_empty());
    }
    assert_eq!(
        app.fake.buttons(*last),
        pairs(&[("Allow once", "ap:9:once"), ("Deny", "ap:9:deny")])
    );
    let sent = app.fake.message_requests();
    let row = &sent.last().unwrap().body["components"][0];
    assert_eq!(row["type"], 1);
    assert_eq!(row["components"][0]["style"], 1);
    assert_eq!(row["components"][1]["style"], 4);
    app.stop().await;
}

#[tokio::test]
async fn a_press_reaches_the_core_and_its_callback_updates_the_message() {
    let app = Running::start().await;
    let message = app.ask(GUILD + 5, "May I deploy?").await;
    *app.sink.reply.lock().unwrap() = ActionReply {
        notice: Some("Deploying.".to_owned()),
        update: Some("May I deploy? **Allowed** by Alice.".to_owned()),
    };

    let interaction = app
        .fake
        .user_presses(GUILD + 5, Some(GUILD), message, "ap:9:once");

    let answers = app.wait_for_answers(2, "the callback and the notice").await;
    let action = &app.sink.actions()[0];
    assert_eq!(action.action.as_str(), "ap:9:once");
    assert_eq!(action.event_id.as_str(), interaction.to_string());
    assert_eq!(action.chat.as_str(), (GUILD + 5).to_string());
    assert_eq!(action.chat_kind, ChatKind::Group);
    assert_eq!(action.sender.id.as_str(), USER_ID.to_string());
    assert_eq!(action.message_id, Some(message.to_string()));
    let token = format!("itoken-{interaction}");
    assert_eq!(
        answers[0]["path"],
        format!("/api/v10/interactions/{interaction}/{token}/callback")
    );
    assert_eq!(answers[0]["body"]["type"], 7);
    let data = &answers[0]["body"]["data"];
    assert_eq!(data["content"], "May I deploy? **Allowed** by Alice.");
    assert_eq!(data["components"], json!([]));
    assert!(answers[1]["path"].as_str().unwrap().ends_with(&token));
    assert_eq!(answers[1]["body"]["content"], "Deploying.");
    assert_eq!(answers[1]["body"]["flags"], 64);
    assert!(app.fake.buttons(message).is_empty());
    let shown = app.fake.created();
    let shown = shown.iter().find(|m| m.id == message).unwrap();
    assert_eq!(shown.content, "May I deploy? **Allowed** by Alice.");
    app.stop().await;
}

#[tokio::test]
async fn a_notice_alone_is_an_ephemeral_answer_and_keeps_the_buttons() {
    let app = Running::start().await;
    let message = app.ask(DM, "Which one?").await;
    *app.sink.reply.lock().unwrap() = ActionReply::notice("Only Bob may answer this.");

    app.fake.user_presses(DM, None, message, "ap:9:deny");

    let answers = app.wait_for_answers(1, "the callback").await;
    assert_eq!(app.sink.actions()[0].chat_kind, ChatKind::Direct);
    assert_eq!(answers[0]["body"]["type"], 4);
    let data = &answers[0]["body"]["data"];
    assert_eq!(data["content"], "Only Bob may answer this.");
    assert_eq!(data["flags"], 64);
    assert_eq!(app.fake.buttons(message).len(), 2);
    app.stop().await;
}

#[tokio::test]
async fn a_press_the_core_knows_nothing_of_is_acknowledged_and_changes_nothing() {
    let app = Running::start().await;
    let message = app.ask(DM, "Old question").await;

    app.fake.user_presses(DM, None, message, "ap:404:once");

    let answers = app.wait_for_answers(1, "the callback").await;
    assert_eq!(app.sink.actions().len(), 1);
    assert_eq!(answers[0]["body"]["type"], 6);
    assert_eq!(app.fake.buttons(message).len(), 2);
    app.stop().await;
}

#[tokio::test]
async fn a_press_whose_custom_id_is_no_action_id_is_acknowledged_and_never_reaches_the_core() {
    let app = Running::start().await;
    let message = app.ask(DM, "Question").await;

    app.fake.user_presses(DM, None, message, &"x".repeat(100));
    app.fake.user_presses(DM, None, message, "two words");

    let answers = app.wait_for_answers(2, "both callbacks").await;
    assert!(answers.iter().all(|a| a["body"]["type"] == 6));
    assert!(app.sink.actions().is_empty());
    app.stop().await;
}

#[tokio::test]
async fn a_slow_core_gets_the_press_acknowledged_first_and_the_message_updated_later() {
    let app = Running::start().await;
    let message = app.ask(DM, "May I?").await;
    let (release, held) = oneshot::channel();
    *app.sink.held.lock().unwrap() = Some(held);
    *app.sink.reply.lock().unwrap() = ActionReply {
        notice: Some("Done.".to_owned()),
        update: Some("May I? Allowed.".to_owned()),
    };

    let interaction = app.fake.user_presses(DM, None, message, "ap:9:once");
    let answers = app.wait_for_answers(1, "the acknowledgement").await;
    assert_eq!(answers[0]["body"]["type"], 6);
    assert_eq!(app.fake.buttons(message).len(), 2);
    release.send(()).unwrap();

    let answers = app.wait_for_answers(3, "the edit and the notice").await;
    let token = format!("itoken-{interaction}");
    assert!(
        answers[1]["path"]
            .as_str()
            .unwrap()
            .ends_with(&format!("{token}/messages/@original"))
    );
    assert_eq!(answers[1]["body"]["content"], "May I? Allowed.");
    assert_eq!(answers[1]["body"]["components"], json!([]));
    assert_eq!(answers[2]["body"]["flags"], 64);
    assert!(app.fake.buttons(message).is_empty());
    app.stop().await;
}

#[tokio::test]
async fn an_edit_replaces_the_content_and_removes_the_buttons() {
    let app = Running::start().await;
    let message = app.ask(DM, "Pick one").await;
    let chat = question(DM, "").chat_ref();

    app.sender
        .edit(&chat, &message.to_string(), "Picked: one")
        .await
        .unwrap();

    assert!(app.fake.buttons(message).is_empty());
    let shown = app.fake.created();
    assert_eq!(
        shown.iter().find(|m| m.id == message).unwrap().content,
        "Picked: one"
    );
    assert!(app.sender.edit(&chat, "not-an-id", "x").await.is_err());
    app.stop().await;
}
