//! Starting, checking, several workspaces, and secrets: no token, signing
//! secret or Socket Mode ticket ever shows in an error, a check's report
//! or a log line.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use secrecy::SecretString;
use switchboard_contract::{Adapter, Hookup, PlatformSender, StartError};
use switchboard_slack::{
    Mode, Secrets, SlackAdapter, SlackSettings, WorkspaceSecrets, WorkspaceSettings,
};
use switchboard_test_support::slack::{
    APP_TOKEN, BOT_TOKEN, BOT_USER_ID, Delivery, Failure, FakeSlack, OTHER_BOT_TOKEN,
    OTHER_BOT_USER_ID, OTHER_TEAM_ID, SIGNING_SECRET, TEAM_ID, event_callback, message_event,
};

use crate::helpers::{
    RecordingObserver, RecordingSink, eventually, outbound, secrets, settings, socket_settings,
    spawn_with, spawn_with_secrets,
};

const REVOKED: &str = "xoxb-9999-revoked-secret-token";

fn hookup() -> Hookup {
    Hookup {
        sink: Arc::new(RecordingSink::default()),
        observer: Arc::new(RecordingObserver::default()),
        shutdown: tokio_util::sync::CancellationToken::new(),
    }
}

fn one_workspace(bot_token: &str) -> Secrets {
    Secrets {
        workspaces: vec![WorkspaceSecrets {
            bot_token: SecretString::from(bot_token),
            ..secrets().workspaces.remove(0)
        }],
    }
}

#[tokio::test]
async fn check_reports_the_team_and_the_bot_user() {
    let fake = FakeSlack::start().await;
    let adapter = SlackAdapter::new(socket_settings(&fake), secrets()).unwrap();

    let checks = adapter.check().await;

    let [check] = checks.as_slice() else {
        panic!("{checks:?}");
    };
    assert!(check.is_ok(), "{check}");
    let shown = check.to_string();
    assert!(
        shown.contains(TEAM_ID) && shown.contains(BOT_USER_ID),
        "{shown}"
    );
    assert!(shown.contains("app-level token"), "{shown}");
    assert!(
        !shown.contains(BOT_TOKEN) && !shown.contains(APP_TOKEN),
        "{shown}"
    );
    assert_eq!(fake.calls_to("auth.test").len(), 1);
}

#[tokio::test]
async fn a_refused_bot_token_is_a_configuration_error() {
    let fake = FakeSlack::start().await;
    let adapter = SlackAdapter::new(settings(&fake), one_workspace(REVOKED)).unwrap();

    let started = adapter.start(hookup()).await;
    let checks = adapter.check().await;

    let Err(StartError::Configuration(reason)) = started else {
        panic!("a configuration error");
    };
    assert!(
        reason.contains("invalid_auth") && reason.contains("default"),
        "{reason}"
    );
    assert!(!checks[0].is_ok());
    assert!(!reason.contains(REVOKED) && !checks[0].to_string().contains(REVOKED));
}

#[tokio::test]
async fn an_unreachable_slack_is_unavailable_and_names_no_token() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/api", listener.local_addr().unwrap());
    drop(listener);
    let settings = SlackSettings {
        api_url: url,
        ..SlackSettings::default()
    };
    let adapter = SlackAdapter::new(settings, secrets()).unwrap();

    let started = adapter.start(hookup()).await;

    let Err(StartError::Unavailable(reason)) = started else {
        panic!("unavailable");
    };
    assert!(reason.contains("auth.test"), "{reason}");
    assert!(!reason.contains(BOT_TOKEN), "{reason}");
}

#[test]
fn building_the_adapter_needs_no_network_and_shows_no_secret() {
    let settings = SlackSettings {
        api_url: "http://127.0.0.1:9/api".to_owned(),
        ..SlackSettings::default()
    };
    let adapter = SlackAdapter::new(settings.clone(), secrets()).unwrap();
    assert_eq!(adapter.platform().as_str(), "slack");
    assert_eq!(
        adapter.webhook_paths(),
        ["/slack/events", "/slack/interactivity"]
    );
    let shown = format!("{adapter:?}");
    for secret in [BOT_TOKEN, SIGNING_SECRET, APP_TOKEN] {
        assert!(!shown.contains(secret), "{shown}");
    }
    let socket = SlackSettings {
        mode: Mode::Socket,
        ..settings.clone()
    };
    let mut without_app_token = secrets();
    without_app_token.workspaces[0].app_token = None;
    let err = SlackAdapter::new(socket, without_app_token).unwrap_err();
    assert!(err.to_string().contains("app-level token"), "{err}");
}

fn two_workspaces(fake: &FakeSlack) -> (SlackSettings, Secrets) {
    let workspace = |env: &str| WorkspaceSettings {
        bot_token_env: env.to_owned(),
        signing_secret_env: None,
        app_token_env: None,
    };
    let settings = SlackSettings {
        workspaces: BTreeMap::from([
            ("main".to_owned(), workspace("MAIN_BOT_TOKEN")),
            ("other".to_owned(), workspace("OTHER_BOT_TOKEN")),
        ]),
        ..settings(fake)
    };
    let secrets = Secrets {
        workspaces: vec![
            WorkspaceSecrets {
                name: "main".to_owned(),
                ..secrets().workspaces.remove(0)
            },
            WorkspaceSecrets {
                name: "other".to_owned(),
                bot_token: SecretString::from(OTHER_BOT_TOKEN),
                ..secrets().workspaces.remove(0)
            },
        ],
    };
    (settings, secrets)
}

#[tokio::test]
async fn one_adapter_serves_several_workspaces_by_team_id() {
    let fake = FakeSlack::start().await;
    let (settings, secrets) = two_workspaces(&fake);
    let app = spawn_with_secrets(fake, settings, secrets, RecordingSink::default()).await;
    let text = format!("<@{OTHER_BOT_USER_ID}> hi from the other side");

    for (team, event) in [
        (TEAM_ID, message_event("D0DM", "im", "hi", "1.1")),
        (
            OTHER_TEAM_ID,
            message_event("C0OTHER", "channel", &text, "1.2"),
        ),
    ] {
        let delivered = app
            .delivery
            .event(&app.events_url(), &event_callback(team, event))
            .await;
        assert_eq!(delivered.statuses, [200]);
    }

    eventually("both messages", || async {
        app.sink.submissions().len() == 2
    })
    .await;
    let submissions = app.sink.submissions();
    assert_eq!(submissions[0].account.as_str(), TEAM_ID);
    assert_eq!(submissions[1].account.as_str(), OTHER_TEAM_ID);
    assert_eq!(
        submissions[1].text, "hi from the other side",
        "the other bot's mention"
    );
    let mut reply = outbound("C0OTHER", None, "hello", "sb-4-1");
    reply.account = submissions[1].account.clone();
    app.sender.send(&reply).await.unwrap();
    let posts = app.fake.calls_to("chat.postMessage");
    assert_eq!(
        posts[0].authorization.as_deref(),
        Some(format!("Bearer {OTHER_BOT_TOKEN}").as_str())
    );
}

#[tokio::test]
async fn several_workspaces_share_one_socket_lease() {
    let fake = FakeSlack::start().await;
    let (settings, secrets) = two_workspaces(&fake);
    let settings = SlackSettings {
        mode: Mode::Socket,
        ..settings
    };
    let app = spawn_with_secrets(fake, settings, secrets, RecordingSink::default()).await;

    let lease = app.connection.as_ref().unwrap().lease_name();

    assert_eq!(lease, format!("slack:{OTHER_TEAM_ID}+{TEAM_ID}"));
    eventually("one connection for the one app", || async {
        app.fake.socket_connected()
    })
    .await;
    assert_eq!(app.fake.socket_connections(), 1);
}

/// Everything written to the log while it is held.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Self;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn no_secret_reaches_an_error_or_a_log_line() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .finish();
    let _log = tracing::subscriber::set_default(subscriber);
    let mut shown = Vec::new();

    // The Events API: a forged request, a message, failed sends.
    let fake = FakeSlack::start().await;
    let events_settings = settings(&fake);
    let events = spawn_with(fake, events_settings, RecordingSink::default()).await;
    let forged = Delivery::new("forged")
        .event(
            &events.events_url(),
            &event_callback(TEAM_ID, message_event("D0DM", "im", "x", "1.1")),
        )
        .await;
    shown.push(forged.body);
    events
        .deliver(message_event("D0DM", "im", "hello", "1.2"))
        .await;
    for failure in [
        Failure::Error("invalid_auth"),
        Failure::RateLimited(3),
        Failure::Status(502),
    ] {
        events.fake.fail_next("chat.postMessage", 1, failure);
        let sent = events
            .sender
            .send(&outbound("D0DM", None, "hi", "sb-5-1"))
            .await;
        shown.push(format!("{sent:?}"));
    }

    // Socket Mode: a connection that drops and comes back.
    let fake = FakeSlack::start().await;
    let socket_settings = socket_settings(&fake);
    let socket = spawn_with(fake, socket_settings, RecordingSink::default()).await;
    eventually("connected", || async { socket.observer.ups() == 1 }).await;
    socket.fake.drop_connection();
    eventually("reconnected", || async { socket.observer.ups() == 2 }).await;
    shown.extend(socket.observer.downs());

    // A refused token at start and in a check.
    let fake = FakeSlack::start().await;
    let refused = SlackAdapter::new(settings(&fake), one_workspace(REVOKED)).unwrap();
    shown.push(format!("{:?}", refused.start(hookup()).await.err()));
    shown.extend(
        refused
            .check()
            .await
            .iter()
            .map(|check| format!("{check} {check:?}")),
    );
    shown.push(format!("{refused:?}"));

    let logged = captured.text();
    assert!(
        logged.contains("Slack request refused"),
        "the log was captured"
    );
    assert!(logged.contains("Socket Mode connection failed"), "{logged}");
    let all = format!("{logged}\n{}", shown.join("\n"));
    for secret in [
        BOT_TOKEN,
        SIGNING_SECRET,
        APP_TOKEN,
        REVOKED,
        "secret-ticket",
    ] {
        assert!(!all.contains(secret), "{secret} shown in:\n{all}");
    }
    let _: &dyn PlatformSender = events.sender.as_ref();
}
