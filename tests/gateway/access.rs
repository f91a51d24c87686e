//! Access control: with `access.allowlist` set, unknown senders in direct
//! chats get a pairing code and no turn until `switchboard pairing approve`
//! (or an admin's `/approve`); unknown senders in groups are ignored.

use switchboard_contract::{ChatKind, InboundSink, Submitted};
use switchboard_test_support::inbound::message;
use tokio::process::Command;

use crate::helpers::{FakeLlm, TestApp};
use crate::identity::{Fake, code_in, user_texts};

async fn spawn(llm: &FakeLlm) -> TestApp {
    TestApp::spawn_with(llm, |s| {
        s.access.allowlist = vec!["fake:alice".to_owned()];
        s.access.admins = vec!["fake:root".to_owned()];
    })
    .await
}

/// Runs `switchboard pairing ARGS` against the app's database.
pub async fn pairing_cli(app: &TestApp, args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .arg("pairing")
        .args(args)
        .env(
            "SWITCHBOARD__DATABASE__URL",
            &app.gateway.settings.database.url,
        )
        .kill_on_drop(true)
        .output()
        .await
        .expect("binary runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

#[tokio::test]
async fn an_unknown_sender_gets_a_pairing_code_and_no_turn_until_approved() {
    let llm = FakeLlm::echo().await;
    let app = spawn(&llm).await;
    let fake = Fake::register(&app);

    let alice = fake.dm(&app, "alice", "hi").await;
    let first = fake.dm(&app, "bob", "hello").await;
    let again = fake.dm(&app, "bob", "/help").await;
    let sink: &dyn InboundSink = app.gateway.service.as_ref();
    let in_group = sink
        .submit(message("bob", "group-1", ChatKind::Group, "hey bot"))
        .await
        .expect("ok");
    let code = code_in(&first);
    let (_, listed) = pairing_cli(&app, &["list"]).await;
    let (approved, said) = pairing_cli(&app, &["approve", &code.to_lowercase()]).await;
    let (twice, _) = pairing_cli(&app, &["approve", &code]).await;
    let after = fake.dm(&app, "bob", "hello again").await;

    assert_eq!(alice, "echo: hi");
    assert!(first.contains("pairing code"), "{first}");
    assert_eq!(code_in(&again), code, "one request per sender");
    assert_eq!(in_group, Submitted::Ignored);
    assert!(
        listed.contains(&code) && listed.contains("fake:bob"),
        "{listed}"
    );
    assert!(approved, "{said}");
    assert!(!twice, "a decided request cannot be approved again");
    assert_eq!(after, "echo: hello again");
    assert_eq!(
        llm.requests().len(),
        2,
        "bob's first messages started no turn"
    );
    let (_, api) = app.say_as("someone", "the API has its own keys").await;
    assert_eq!(api, "echo: the API has its own keys");
    app.stop().await;
}

#[tokio::test]
async fn admins_approve_and_deny_in_chat_and_denied_senders_are_ignored() {
    let llm = FakeLlm::echo().await;
    let app = spawn(&llm).await;
    let fake = Fake::register(&app);
    let carol = code_in(&fake.dm(&app, "carol", "hi").await);
    let dave = code_in(&fake.dm(&app, "dave", "hi").await);

    let not_admin = fake.dm(&app, "alice", &format!("/approve {carol}")).await;
    let denied = fake.dm(&app, "root", &format!("/deny {dave}")).await;
    let approved = fake.dm(&app, "root", &format!("/approve {carol}")).await;
    let sink: &dyn InboundSink = app.gateway.service.as_ref();
    let from_dave = sink
        .submit(message("dave", "dm-dave", ChatKind::Direct, "please"))
        .await
        .expect("ok");
    let from_carol = fake.dm(&app, "carol", "thanks").await;

    assert!(not_admin.contains("Only an admin"), "{not_admin}");
    assert_eq!(denied, "Denied fake:dave.");
    assert_eq!(approved, "Approved fake:carol.");
    assert_eq!(from_dave, Submitted::Ignored);
    assert_eq!(from_carol, "echo: thanks");
    let (_, listed) = pairing_cli(&app, &["list"]).await;
    assert!(listed.contains("No pairing requests"), "{listed}");
    app.stop().await;
}

#[tokio::test]
async fn an_allowed_person_links_a_new_account_without_pairing() {
    let llm = FakeLlm::echo().await;
    let app = spawn(&llm).await;
    let fake = Fake::register(&app);
    fake.dm(&app, "alice", "remember the milk").await;
    let code = code_in(&fake.dm(&app, "alice", "/link").await);

    let linked = fake.dm(&app, "alice-phone", &format!("/link {code}")).await;
    let reply = fake.dm(&app, "alice-phone", "what to remember?").await;

    assert!(linked.starts_with("Linked"), "{linked}");
    assert_eq!(reply, "echo: what to remember?");
    assert_eq!(user_texts(&llm), ["remember the milk", "what to remember?"]);
    app.stop().await;
}

#[tokio::test]
async fn pairing_requests_expire_after_an_hour_and_renew_with_a_new_code() {
    let llm = FakeLlm::echo().await;
    let app = spawn(&llm).await;
    let fake = Fake::register(&app);
    let first = fake.dm(&app, "carol", "hello").await;
    let old = code_in(&first);
    sqlx::query("UPDATE pairing_requests SET created_at = created_at - 3600001")
        .execute(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("backdate");

    let (_, listed) = pairing_cli(&app, &["list"]).await;
    let (approved_old, _) = pairing_cli(&app, &["approve", &old]).await;
    let again = fake.dm(&app, "carol", "hello?").await;
    let new = code_in(&again);
    let (approved_new, said) = pairing_cli(&app, &["approve", &new]).await;

    assert!(
        !listed.contains(&old),
        "expired requests are not listed: {listed}"
    );
    assert!(!approved_old, "an expired code cannot be approved");
    assert_ne!(new, old);
    assert!(approved_new, "{said}");
    assert_eq!(fake.dm(&app, "carol", "finally").await, "echo: finally");
    app.stop().await;
}

#[tokio::test]
async fn a_platform_allowlist_gates_only_its_platform() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| {
        s.access.platforms = [("fake".to_owned(), vec!["alice".to_owned()])].into();
    })
    .await;
    let fake = Fake::register(&app);

    let alice = fake.dm(&app, "alice", "hi").await;
    let bob = fake.dm(&app, "bob", "hello").await;
    let mut elsewhere = message("zed", "dm-zed", ChatKind::Direct, "hey");
    elsewhere.platform = switchboard_contract::PlatformName::parse("other").expect("name");
    let sink: &dyn InboundSink = app.gateway.service.as_ref();
    let other = sink.submit(elsewhere).await.expect("submitted");

    assert_eq!(alice, "echo: hi");
    assert!(bob.contains("pairing code"), "{bob}");
    assert_eq!(
        other,
        Submitted::Accepted,
        "a platform without a list is open"
    );
    assert_eq!(app.count("pairing_requests").await, 1);
    app.stop().await;
}
