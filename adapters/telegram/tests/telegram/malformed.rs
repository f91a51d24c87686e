//! Malformed updates and panics never stop the adapter: an update whose
//! entities point outside its text or into a surrogate pair is handled
//! without them, one whose handling panics is logged and confirmed, and the
//! next good update is handled, in polling and in webhook mode. A 409 or a
//! stop before shutdown ends polling without the confirming `getUpdates`.

use axum::http::StatusCode;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use switchboard_telegram::TelegramError;

use crate::helpers::*;

/// A small deterministic generator (xorshift), so that every run fuzzes
/// the same updates and a failure can be replayed.
struct Fuzz(u64);

impl Fuzz {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Text of ASCII, two-byte, and astral (surrogate pair) characters,
    /// with `@` and `/` common.
    fn text(&mut self) -> String {
        const PIECES: [&str; 8] = ["@", "/", " ", "a", "é", "😀", "𝔘", "@SwitchboardBot"];
        (0..self.below(12))
            .map(|_| PIECES[usize::try_from(self.below(8)).unwrap()])
            .collect()
    }

    /// An offset or length near the text's UTF-16 length, or far off.
    fn position(&mut self, len: u64) -> u64 {
        match self.below(10) {
            0 => u64::MAX,
            1 => u64::from(u32::MAX),
            _ => self.below(len + 4),
        }
    }

    /// A message whose entities are anywhere, in its text or its caption.
    fn update(&mut self, update_id: u32) -> Value {
        const KINDS: [&str; 4] = ["mention", "bot_command", "bold", "text_mention"];
        let text = self.text();
        let len = u64::try_from(text.encode_utf16().count()).unwrap();
        let entities: Vec<Value> = (0..self.below(5))
            .map(|_| {
                let kind = KINDS[usize::try_from(self.below(4)).unwrap()];
                let mut value = json!({"type": kind, "offset": self.position(len),
                                       "length": self.position(len)});
                if kind == "text_mention" {
                    value["user"] = json!({"id": 999, "is_bot": true, "first_name": "Bot"});
                }
                value
            })
            .collect();
        let chat = if self.below(2) == 0 {
            private_chat(7)
        } else {
            group_chat(-100)
        };
        let mut message = text_message(
            i32::try_from(update_id).unwrap(),
            chat,
            user(7, "Ada", false),
            "",
        );
        if self.below(3) == 0 {
            message.as_object_mut().unwrap().remove("text");
            message["photo"] =
                json!([{"file_id": "f", "file_unique_id": "u", "width": 1, "height": 1}]);
            message["caption"] = json!(text);
            message["caption_entities"] = json!(entities);
        } else {
            message["text"] = json!(text);
            message["entities"] = json!(entities);
        }
        update(update_id, message)
    }
}

/// Entities that made teloxide's parser panic: one splitting a surrogate
/// pair, one past the end, one whose end overflows.
fn known_bad(update_id: u32) -> Value {
    let message = with(
        text_message(
            1,
            private_chat(7),
            user(7, "Ada", false),
            "😀 @SwitchboardBot hi",
        ),
        "entities",
        json!([entity("mention", 1, 5), entity("mention", 3, 400),
               {"type": "bot_command", "offset": 2, "length": u64::MAX}]),
    );
    update(update_id, message)
}

fn good(update_id: u32) -> Value {
    update(
        update_id,
        text_message(2, private_chat(7), user(7, "Ada", false), "the good one"),
    )
}

const FUZZED: u32 = 300;

#[tokio::test]
async fn fuzzed_updates_in_polling_mode_never_stop_it_and_the_next_good_one_is_handled() {
    let app = TestApp::spawn().await;
    let mut fuzz = Fuzz(0x5eed_1234_abcd_ef01);
    let mut updates = vec![known_bad(1)];
    updates.extend((2..FUZZED).map(|id| fuzz.update(id)));
    updates.push(good(FUZZED));
    app.fake.push_updates(updates);
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(app.adapter.run_polling(shutdown.clone()));

    app.fake
        .wait_for("the good update to be submitted", || {
            app.sink
                .submitted()
                .iter()
                .any(|message| message.text == "the good one")
        })
        .await;
    app.fake.settled().await;
    shutdown.cancel();
    worker.await.expect("joins").expect("polling ends cleanly");

    let submitted = app.sink.submitted();
    assert_eq!(
        submitted.last().unwrap().event_id.as_str(),
        FUZZED.to_string()
    );
    // The known-bad update is handled without its broken entities.
    assert_eq!(submitted[0].event_id.as_str(), "1");
    assert_eq!(submitted[0].text, "😀 @SwitchboardBot hi");
    let polls = app.fake.calls("getUpdates");
    assert_eq!(polls.last().unwrap()["offset"], FUZZED + 1, "all confirmed");
}

#[tokio::test]
async fn fuzzed_updates_through_the_webhook_get_200_and_the_next_good_one_is_handled() {
    let app = TestApp::spawn().await;
    let mut fuzz = Fuzz(0x0dd_ba11_c0ff_ee00);

    assert_eq!(
        app.post_webhook(Some(SECRET), known_bad(1).to_string())
            .await,
        StatusCode::OK
    );
    for id in 2..FUZZED {
        let status = app
            .post_webhook(Some(SECRET), fuzz.update(id).to_string())
            .await;
        // 400: numbers past what an update holds do not deserialise.
        assert!(
            status == StatusCode::OK || status == StatusCode::BAD_REQUEST,
            "update {id}: {status}"
        );
    }
    let good = app.deliver(good(FUZZED)).await.expect("submitted");

    assert_eq!(good.text, "the good one");
}

#[tokio::test]
async fn a_panic_handling_one_update_is_contained_and_the_update_confirmed() {
    let app = TestApp::spawn().await;
    *app.sink.panic_on.lock().unwrap() = Some("boom".to_owned());
    let boom = |id: u32| {
        update(
            id,
            text_message(3, private_chat(7), user(7, "Ada", false), "boom"),
        )
    };

    // Webhook: answered 200, so that Telegram does not deliver it forever.
    assert_eq!(
        app.post_webhook(Some(SECRET), boom(10).to_string()).await,
        StatusCode::OK
    );
    assert_eq!(
        app.deliver(good(11)).await.expect("submitted").text,
        "the good one"
    );

    // Polling: confirmed, and the next update handled.
    app.fake.push_updates([boom(20), good(21)]);
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(app.adapter.run_polling(shutdown.clone()));
    app.sink.wait_for(2).await;
    app.fake.settled().await;
    shutdown.cancel();
    worker.await.expect("joins").expect("polling ends cleanly");

    let submitted = app.sink.submitted();
    assert_eq!(submitted.len(), 2, "{submitted:?}");
    assert_eq!(submitted[1].event_id.as_str(), "21");
    assert_eq!(
        app.fake.calls("getUpdates").last().unwrap()["offset"],
        22,
        "the update that panicked is confirmed"
    );
}

#[tokio::test]
async fn a_conflict_stops_polling_without_a_confirming_call() {
    let app = TestApp::spawn().await;
    app.fake.push_updates([good(30)]);
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(app.adapter.run_polling(shutdown.clone()));
    app.sink.wait_for(1).await;
    app.fake.settled().await;
    app.fake.script(
        "getUpdates",
        409,
        switchboard_test_support::telegram::conflict(),
    );

    let result = worker.await.expect("joins");

    assert!(
        matches!(result, Err(TelegramError::PollingConflict)),
        "{result:?}"
    );
    let polls = app.fake.calls("getUpdates");
    assert_ne!(
        polls.last().unwrap()["timeout"],
        0,
        "no confirming getUpdates after the 409: {polls:?}"
    );
    assert!(!shutdown.is_cancelled());
}

#[tokio::test]
async fn polling_stopped_before_shutdown_does_not_confirm() {
    let app = TestApp::spawn().await;
    app.fake.push_updates([good(40)]);
    let (stop, shutdown) = (CancellationToken::new(), CancellationToken::new());
    let worker = tokio::spawn(
        app.adapter
            .run_polling_until(stop.clone(), shutdown.clone()),
    );
    app.sink.wait_for(1).await;
    app.fake.settled().await;

    // As when the platform lease is lost: another instance polls now.
    stop.cancel();
    worker.await.expect("joins").expect("polling ends cleanly");
    let stopped = app.fake.calls("getUpdates").len();

    assert!(
        app.fake
            .calls("getUpdates")
            .iter()
            .all(|poll| poll["timeout"] != 0),
        "no confirming getUpdates"
    );
    // At shutdown, by contrast, the offset is confirmed.
    app.fake.push_updates([good(41)]);
    let worker = tokio::spawn(app.adapter.run_polling(shutdown.clone()));
    app.sink.wait_for(2).await;
    app.fake.settled().await;
    assert!(app.fake.calls("getUpdates").len() > stopped);
    shutdown.cancel();
    worker.await.expect("joins").expect("polling ends cleanly");
    let polls = app.fake.calls("getUpdates");
    let last = polls.last().unwrap();
    assert_eq!(
        (last["timeout"].as_u64(), last["offset"].as_u64()),
        (Some(0), Some(42))
    );
}
