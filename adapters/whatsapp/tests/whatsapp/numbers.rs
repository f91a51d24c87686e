//! Several numbers behind one webhook, start-up checks, and the
//! operator's `check`.

use std::sync::Arc;

use secrecy::SecretString;
use switchboard_contract::{AccountId, StartError};
use switchboard_test_support::whatsapp::{
    DISPLAY_PHONE_NUMBER, FakeWhatsApp, PHONE_NUMBER_ID, VERIFIED_NAME, messages, text,
};
use switchboard_whatsapp::{NumberSettings, check_with};

use crate::helpers::{
    ManualClock, Observer, RecordingSink, outbound, secrets, settings, spawn_on, start,
};

const SALES_ID: &str = "204060801";
const SALES_TOKEN: &str = "EAAGsalesToken-9876543210zyxw";

fn with_sales(fake: &FakeWhatsApp) -> switchboard_whatsapp::WhatsAppSettings {
    fake.add_number(SALES_ID, SALES_TOKEN, "+44 20 7946 0958", "Sales");
    let mut settings = settings(fake);
    settings.numbers.insert(
        "sales".to_owned(),
        NumberSettings {
            phone_number_id: SALES_ID.to_owned(),
            access_token_env: Some("SALES_TOKEN".to_owned()),
            template: None,
        },
    );
    settings
}

fn sales_secrets() -> switchboard_whatsapp::Secrets {
    secrets().with_token("sales", SecretString::from(SALES_TOKEN.to_owned()))
}

/// Why the adapter did not start with `settings` and `secrets`.
async fn failed_start(
    settings: switchboard_whatsapp::WhatsAppSettings,
    secrets: switchboard_whatsapp::Secrets,
) -> StartError {
    let started = start(
        settings,
        secrets,
        &Arc::new(ManualClock::default()),
        &Arc::new(RecordingSink::default()),
        &Arc::new(Observer::default()),
    )
    .await;
    started.err().expect("the start fails")
}

#[tokio::test]
async fn one_webhook_serves_every_number_and_replies_use_each_numbers_token() {
    let fake = FakeWhatsApp::start().await;
    let settings = with_sales(&fake);
    let app = spawn_on(fake, settings, sales_secrets()).await;

    let to_sales = messages(SALES_ID, vec![text("wamid.S1", "prices?")]);
    let to_default = messages(PHONE_NUMBER_ID, vec![text("wamid.D1", "support?")]);
    assert_eq!(app.webhook.deliver(&to_sales).await, 200);
    assert_eq!(app.webhook.deliver(&to_default).await, 200);

    let accounts: Vec<_> = app
        .sink
        .submissions()
        .iter()
        .map(|message| message.account.to_string())
        .collect();
    assert_eq!(accounts, [SALES_ID, PHONE_NUMBER_ID]);
    let mut reply = outbound("sb-1", "Our prices…", Some("wamid.S1"));
    reply.account = AccountId::parse(SALES_ID).unwrap();
    app.sender.send(&reply).await.unwrap();
    let sent = &app.fake.sent()[0];
    assert_eq!(sent.phone_number_id, SALES_ID);
    assert_eq!(
        sent.authorization.as_deref(),
        Some(format!("Bearer {SALES_TOKEN}").as_str())
    );
}

#[tokio::test]
async fn a_refused_token_at_start_is_a_configuration_error() {
    let fake = FakeWhatsApp::start().await;
    let settings = settings(&fake);
    let wrong = secrets().with_token("default", SecretString::from("EAAGwrong".to_owned()));

    let err = failed_start(settings, wrong).await;

    let StartError::Configuration(reason) = &err else {
        panic!("not a configuration error: {err}");
    };
    assert!(reason.starts_with("whatsapp.access_token_env"), "{reason}");
    assert!(!reason.contains("EAAGwrong"), "{reason}");
}

#[tokio::test]
async fn an_unreachable_graph_api_at_start_is_tried_again() {
    let fake = FakeWhatsApp::start().await;
    let mut settings = settings(&fake);
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    settings.api_url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);

    let err = failed_start(settings, secrets()).await;

    assert!(matches!(err, StartError::Unavailable(_)), "{err}");
}

#[tokio::test]
async fn check_reports_every_number_masked() {
    let fake = FakeWhatsApp::start().await;
    let settings = with_sales(&fake);
    let wrong_sales = secrets().with_token("sales", SecretString::from("EAAGwrong".to_owned()));

    let checks = check_with(&settings, &wrong_sales).await.unwrap();

    assert_eq!(checks.len(), 2);
    let default = &checks[0];
    assert_eq!(default.name, "default");
    assert_eq!(default.phone_number_id, PHONE_NUMBER_ID);
    let report = default.result.as_ref().unwrap();
    assert_eq!(report.display_phone_number, "…4242");
    assert_eq!(report.verified_name.as_deref(), Some(VERIFIED_NAME));
    assert_eq!(report.quality_rating.as_deref(), Some("GREEN"));
    let shown = default.to_string();
    assert!(!shown.contains(DISPLAY_PHONE_NUMBER), "{shown}");
    assert!(shown.contains("quality rating GREEN"), "{shown}");
    let sales = &checks[1];
    assert_eq!(sales.name, "sales");
    assert!(sales.result.is_err());
    assert!(!sales.to_string().contains("EAAGwrong"), "{sales}");
}
