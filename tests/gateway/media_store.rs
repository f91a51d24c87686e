//! Where media is kept and how much of it is taken: a photo sent to the fake
//! Telegram lands in a fake S3 bucket (the real S3 client, signed requests
//! over HTTP on 127.0.0.1) and reaches the model from there; a message over
//! `media.max_message_bytes` and a person over `media.principal_daily_bytes`
//! (counted in the database, across a restart) get a reply naming the limit,
//! with nothing stored and no model call; a redelivery of an event whose
//! files are still being fetched waits for the first delivery and is a
//! duplicate (one download, counted once); housekeeping removes old blobs no
//! message refers to, and keeps referenced and recent ones, in a local
//! folder and in S3; and the Telegram file URL, which holds the bot token,
//! is in no log line and nowhere in the database.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;
use switchboard::config::Settings;
use switchboard::media::blobs::hash_of;
use switchboard::media::settings::{BlobStoreKind, S3Settings};
use switchboard_contract::{
    AccountId, Attachment, AttachmentKind, ChatKind, EventId, FetchError, FetchMedia,
    InboundMessage, InboundSink, MediaFetcher, PlatformName, Submitted,
};
use switchboard_test_support::s3::{ACCESS_KEY_ID, FakeS3, SECRET_ACCESS_KEY};
use switchboard_test_support::telegram::{self, FakeTelegram, TgUser};
use switchboard_test_support::{eventually, inbound};
use tokio_util::sync::CancellationToken;

use crate::helpers::{FakeLlm, ServeProcess, TestApp, telegram_settings, test_settings};
use crate::helpers::{TINY_PNG as PNG, files_under, last_user_content};

const ADA: TgUser = TgUser {
    id: 777,
    first_name: "Ada",
};
const BOB: TgUser = TgUser {
    id: 778,
    first_name: "Bob",
};

const DAY: Duration = Duration::from_secs(86_400);

/// Where `fake` keeps the blob of `hash` under the prefix `media`.
fn s3_key(hash: &str) -> String {
    format!("media/{}/{hash}", &hash[..2])
}

/// `[media.s3]` for `fake`, with the credentials in variables named for
/// the test `test`.
fn s3_settings(fake: &FakeS3, test: &str) -> S3Settings {
    let id_env = format!("SB_TEST_S3_KEY_ID_{test}");
    let secret_env = format!("SB_TEST_S3_SECRET_{test}");
    // SAFETY (test): variables of this test's own names, set before the
    // gateway that reads them starts.
    unsafe {
        std::env::set_var(&id_env, ACCESS_KEY_ID);
        std::env::set_var(&secret_env, SECRET_ACCESS_KEY);
    }
    S3Settings {
        bucket: fake.bucket(),
        endpoint: fake.endpoint(),
        region: "us-east-1".to_owned(),
        prefix: "media".to_owned(),
        allow_http: true,
        access_key_id_env: id_env,
        secret_access_key_env: secret_env,
    }
}

#[tokio::test]
async fn a_photo_is_kept_in_the_s3_bucket_and_reaches_the_model_from_there() {
    let telegram = FakeTelegram::start().await;
    telegram.add_file("photo-s3", PNG);
    let s3 = FakeS3::start("switchboard").await;
    let llm = FakeLlm::echo().await;
    let gateway = TestApp::spawn_with(&llm, |s| {
        s.telegram = Some(telegram_settings(&telegram));
        s.media.vision_models = vec!["fake-model".to_owned()];
        s.media.store = BlobStoreKind::S3;
        s.media.s3 = s3_settings(&s3, "PHOTO");
    })
    .await;

    telegram.ask_with_photo(ADA, "photo-s3", Some("look")).await;
    telegram.ask_with_photo(ADA, "photo-s3", Some("look")).await;

    let hash = hash_of(PNG);
    assert_eq!(s3.keys(), vec![s3_key(&hash)], "one object for the photo");
    assert_eq!(s3.object(&s3_key(&hash)).as_deref(), Some(PNG));
    assert_eq!(s3.unauthorized(), 0, "every request was signed");
    let requests = s3.requests();
    let puts: Vec<_> = requests.iter().filter(|r| r.starts_with("PUT ")).collect();
    assert_eq!(puts.len(), 1, "stored once: {requests:?}");
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with(&format!("GET /switchboard/{}", s3_key(&hash)))),
        "the model request was built from the bucket: {requests:?}"
    );
    let data_url = format!("data:image/png;base64,{}", BASE64.encode(PNG));
    for request in llm.requests() {
        assert_eq!(
            last_user_content(&request.json()),
            serde_json::json!([
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": data_url}},
            ])
        );
    }
    assert_eq!(llm.requests().len(), 2);
    assert!(
        files_under(&gateway.gateway.settings.media.folder).is_empty(),
        "nothing in the local folder"
    );
    gateway.stop().await;
}

#[tokio::test]
async fn a_message_over_the_message_cap_gets_the_limit_reply_and_nothing_is_kept() {
    let telegram = FakeTelegram::start().await;
    telegram.add_file("photo-big", PNG);
    let llm = FakeLlm::echo().await;
    let gateway = TestApp::spawn_with(&llm, |s| {
        s.telegram = Some(telegram_settings(&telegram));
        s.media.max_message_bytes = std::num::NonZero::new(50).unwrap();
    })
    .await;

    let reply = telegram
        .ask_with_photo(ADA, "photo-big", Some("look"))
        .await;

    assert!(
        reply.contains("add up to at most 50 bytes"),
        "the reply names the limit: {reply}"
    );
    assert!(llm.requests().is_empty(), "no model call");
    assert_eq!(telegram.downloads("photo-big"), 0, "not even downloaded");
    assert!(files_under(&gateway.gateway.settings.media.folder).is_empty());
    gateway.stop().await;
}

/// The bytes the database counts, one number per person and day.
async fn counted_today(app: &TestApp) -> Vec<i64> {
    sqlx::query_scalar::<_, i64>("SELECT bytes FROM media_usage")
        .fetch_all(&mut *app.gateway.store.conn().await.expect("conn"))
        .await
        .expect("rows")
}

#[tokio::test]
async fn the_daily_budget_is_counted_in_the_database_and_holds_across_a_restart() {
    let telegram = FakeTelegram::start().await;
    let other: Vec<u8> = [PNG, b"2"].concat();
    let third: Vec<u8> = [PNG, b"3"].concat();
    telegram.add_file("photo-1", PNG);
    telegram.add_file("photo-2", &other);
    telegram.add_file("photo-3", &third);
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(&llm, &dir).await;
    settings.telegram = Some(telegram_settings(&telegram));
    // Two photos fit, a third does not.
    settings.media.principal_daily_bytes = (PNG.len() * 2 + 2) as u64;
    let _database = crate::helpers::hold_database(&settings);
    let folder = settings.media.folder.clone();

    let first = TestApp::start(settings.clone(), tempfile::tempdir().expect("tempdir")).await;
    telegram.ask_with_photo(ADA, "photo-1", Some("look")).await;
    telegram.ask_with_photo(ADA, "photo-2", Some("look")).await;
    assert_eq!(llm.requests().len(), 2);
    assert_eq!(
        counted_today(&first).await,
        vec![(PNG.len() * 2 + 1) as i64]
    );
    let reply = telegram.ask_with_photo(ADA, "photo-3", Some("look")).await;
    let limit = format!("at most {} bytes a day", PNG.len() * 2 + 2);
    assert!(reply.contains(&limit), "the reply names the limit: {reply}");
    assert_eq!(llm.requests().len(), 2, "no model call");
    first.stop().await;

    // Another instance (a restart) reads the same count.
    let second = TestApp::start(settings, tempfile::tempdir().expect("tempdir")).await;
    let reply = ask_in_own_chat(&telegram, ADA, "photo-3").await;
    assert!(
        reply.contains(&limit),
        "still over after a restart: {reply}"
    );
    assert_eq!(llm.requests().len(), 2, "no model call");
    assert!(
        !files_under(&folder)
            .iter()
            .any(|file| file.ends_with(hash_of(&third))),
        "the photo over the budget is not kept"
    );
    // Bob has a budget of his own.
    ask_in_own_chat(&telegram, BOB, "photo-3").await;
    assert_eq!(llm.requests().len(), 3);
    // Each refusal was sent once: one per photo over the budget.
    let refusals = telegram
        .sent()
        .iter()
        .filter(|sent| sent.chat_id == ADA.id && sent.text.contains(&limit))
        .count();
    assert_eq!(refusals, 2, "sent: {:?}", telegram.sent());
    let mut counts = counted_today(&second).await;
    counts.sort_unstable();
    assert_eq!(counts, vec![third.len() as i64, (PNG.len() * 2 + 1) as i64]);
    second.stop().await;
}

/// Sends `user` the photo `file_id` and waits for the next message in
/// their own chat, whatever else is sent meanwhile.
async fn ask_in_own_chat(telegram: &FakeTelegram, user: TgUser, file_id: &str) -> String {
    let in_chat = || {
        telegram
            .sent()
            .into_iter()
            .filter(|sent| sent.chat_id == user.id)
            .collect::<Vec<_>>()
    };
    let before = in_chat().len();
    telegram.dm_photo(user, file_id, (1, 1), Some("look"));
    telegram
        .wait_for("a reply in the sender's chat", || in_chat().len() > before)
        .await;
    in_chat().swap_remove(before).text
}

/// Where housekeeping is tested: the local folder or the fake bucket.
enum Kept {
    Local(PathBuf),
    S3(FakeS3),
}

impl Kept {
    fn configure(&self, settings: &mut Settings, test: &str) {
        match self {
            Self::Local(folder) => settings.media.folder.clone_from(folder),
            Self::S3(fake) => {
                settings.media.store = BlobStoreKind::S3;
                settings.media.s3 = s3_settings(fake, test);
            }
        }
    }

    /// Stores `bytes` as a blob, as an instance would have.
    fn put(&self, bytes: &[u8]) {
        let hash = hash_of(bytes);
        match self {
            Self::Local(folder) => {
                let path = folder.join(&hash[..2]).join(&hash);
                std::fs::create_dir_all(path.parent().expect("folder")).expect("mkdir");
                std::fs::write(path, bytes).expect("write");
            }
            Self::S3(fake) => fake.put(&s3_key(&hash), bytes),
        }
    }

    /// Moves the blob of `bytes` `by` into the past.
    fn age(&self, bytes: &[u8], by: Duration) {
        self.age_blob(&hash_of(bytes), by);
    }

    /// Moves the blob named `hash` `by` into the past.
    fn age_blob(&self, hash: &str, by: Duration) {
        match self {
            Self::Local(folder) => {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(folder.join(&hash[..2]).join(hash))
                    .expect("open");
                let modified = file.metadata().expect("meta").modified().expect("mtime");
                file.set_modified(modified - by).expect("set mtime");
            }
            Self::S3(fake) => fake.age(&s3_key(hash), by),
        }
    }

    fn has(&self, bytes: &[u8]) -> bool {
        self.has_blob(&hash_of(bytes))
    }

    fn has_blob(&self, hash: &str) -> bool {
        match self {
            Self::Local(folder) => folder.join(&hash[..2]).join(hash).exists(),
            Self::S3(fake) => fake.object(&s3_key(hash)).is_some(),
        }
    }
}

/// A photo is sent (referenced), and a larger one that is kept scaled down
/// too (its derived version is referenced as well); an old blob no message
/// refers to and a fresh one are put beside them; all but the fresh one are
/// made 40 days old. The next instance's housekeeping (retention 30 days)
/// removes the old unreferenced blob only.
async fn housekeeping_removes_old_unreferenced_blobs_only(kept: Kept, test: &str) {
    let telegram = FakeTelegram::start().await;
    telegram.add_file("photo-kept", PNG);
    let large = switchboard_test_support::media::gradient_png(64, 32, false);
    telegram.add_file("photo-large", &large);
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = test_settings(&llm, &dir).await;
    settings.telegram = Some(telegram_settings(&telegram));
    kept.configure(&mut settings, test);
    settings.media.retention_days = 30;
    settings.media.max_image_side = 16;
    settings.runner.maintenance_interval = std::time::Duration::from_secs(1);
    let _database = crate::helpers::hold_database(&settings);

    // Each instance runs the maintenance task, as `switchboard serve` does.
    let first = TestApp::start(settings.clone(), tempfile::tempdir().expect("tempdir")).await;
    let first_stop = CancellationToken::new();
    let first_tasks = first.gateway.spawn_background(&first_stop);
    // It ran housekeeping at start (nothing to remove) and holds the
    // hourly lease.
    eventually("the first housekeeping run", || async {
        first
            .count("platform_leases WHERE name = 'housekeeping:media'")
            .await
            == 1
    })
    .await;
    telegram
        .ask_with_photo(ADA, "photo-kept", Some("look"))
        .await;
    telegram
        .ask_with_photo(ADA, "photo-large", Some("look"))
        .await;
    let media: String =
        sqlx::query_scalar("SELECT media FROM inbound WHERE media LIKE '%derived%'")
            .fetch_one(&mut *first.gateway.store.conn().await.expect("conn"))
            .await
            .expect("the large photo's files");
    let media: Value = serde_json::from_str(&media).expect("json");
    let derived = media[0]["derived"]["hash"]
        .as_str()
        .expect("a scaled-down version")
        .to_owned();
    let (old, fresh) = (
        b"forgotten file".as_slice(),
        b"file being recorded".as_slice(),
    );
    kept.put(old);
    kept.put(fresh);
    kept.age(PNG, 40 * DAY);
    kept.age(&large, 40 * DAY);
    kept.age_blob(&derived, 40 * DAY);
    kept.age(old, 40 * DAY);
    first_stop.cancel();
    first.stop().await;
    drop(first_tasks);
    // The hour is over: the next instance may run it.
    let second = TestApp::start(settings, tempfile::tempdir().expect("tempdir")).await;
    sqlx::query("UPDATE platform_leases SET expires_at = 0 WHERE name = 'housekeeping:media'")
        .execute(&mut *second.gateway.store.conn().await.expect("conn"))
        .await
        .expect("lease ended");
    let second_stop = CancellationToken::new();
    let second_tasks = second.gateway.spawn_background(&second_stop);
    eventually("the old unreferenced blob to be removed", || {
        std::future::ready(!kept.has(old))
    })
    .await;
    second_stop.cancel();
    drop(second_tasks);
    assert!(kept.has(PNG), "a blob a message refers to stays");
    assert!(kept.has(&large), "so does a scaled-down photo's original");
    assert!(kept.has_blob(&derived), "and its scaled-down version");
    assert!(kept.has(fresh), "a recent blob stays");
    // The photo still reaches the model from the store.
    telegram
        .ask_with_photo(ADA, "photo-kept", Some("look"))
        .await;
    assert_eq!(llm.requests().len(), 3);
    second.stop().await;
}

#[tokio::test]
async fn housekeeping_removes_old_unreferenced_blobs_from_a_local_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    housekeeping_removes_old_unreferenced_blobs_only(
        Kept::Local(dir.path().join("blobs")),
        "LOCAL",
    )
    .await;
}

#[tokio::test]
async fn housekeeping_removes_old_unreferenced_blobs_from_s3() {
    let fake = FakeS3::start("switchboard").await;
    housekeeping_removes_old_unreferenced_blobs_only(Kept::S3(fake.clone()), "CLEAN").await;
    assert_eq!(fake.unauthorized(), 0);
    assert!(
        fake.requests()
            .iter()
            .any(|r| r.starts_with("DELETE /switchboard/media/")),
        "removed with a DELETE"
    );
}

/// The text of every row of every table, for PostgreSQL; the database
/// file's bytes (and its write-ahead log's) for SQLite.
async fn everything_stored(database_url: &str, dir: &Path) -> String {
    if database_url.starts_with("postgres") {
        let pool = sqlx::PgPool::connect(database_url).await.expect("connect");
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT table_name::text FROM information_schema.tables \
             WHERE table_schema = 'public'",
        )
        .fetch_all(&pool)
        .await
        .expect("tables");
        let mut all = String::new();
        for table in tables {
            let rows: Vec<String> = sqlx::query_scalar(&format!(
                "SELECT CAST(row_to_json(t) AS TEXT) FROM \"{table}\" t"
            ))
            .fetch_all(&pool)
            .await
            .expect("rows");
            all.push_str(&rows.join("\n"));
        }
        pool.close().await;
        all
    } else {
        let mut all = Vec::new();
        for entry in std::fs::read_dir(dir).expect("dir").flatten() {
            if entry
                .file_name()
                .to_string_lossy()
                .starts_with("switchboard.db")
            {
                all.extend(std::fs::read(entry.path()).expect("read"));
            }
        }
        String::from_utf8_lossy(&all).into_owned()
    }
}

#[tokio::test]
async fn the_telegram_file_url_with_the_token_is_never_logged_or_stored() {
    let telegram = FakeTelegram::start().await;
    telegram.add_file("photo-ok", PNG);
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let database = crate::helpers::fresh_database(dir.path()).await;
    let database_url = database.to_string();
    let api_url = telegram.url().to_string();
    let base_url = llm.openai_base();
    let env = [
        ("SWITCHBOARD__DATABASE__URL", database_url.as_str()),
        ("SWITCHBOARD__LLM__BASE_URL", base_url.as_str()),
        ("SWITCHBOARD__TELEGRAM__TOKEN_ENV", "SB_MEDIA_TG_TOKEN"),
        ("SB_MEDIA_TG_TOKEN", telegram::TOKEN),
        ("SWITCHBOARD__TELEGRAM__API_URL", api_url.as_str()),
        ("SWITCHBOARD__TELEGRAM__POLL_TIMEOUT_SECS", "1"),
        // Everything the gateway and its adapters log.
        ("RUST_LOG", "debug,hyper=info,h2=info,sqlx=info"),
    ];
    let serve = ServeProcess::start(dir.path(), &env, true).await;

    // One photo that downloads, and one whose download fails (the file is
    // not there): the failure is logged and answered.
    let ok = telegram.ask_with_photo(ADA, "photo-ok", Some("look")).await;
    assert!(ok.contains("look"), "{ok}");
    let failed = telegram
        .ask_with_photo(ADA, "photo-gone", Some("look"))
        .await;
    assert!(failed.contains("could not download"), "{failed}");
    let logs = serve.stop().await;

    assert!(logs.contains("attachment"), "the media path logged: {logs}");
    let token_part = telegram::TOKEN.split(':').nth(1).expect("the secret half");
    for (what, text) in [
        ("the logs", logs),
        (
            "the database",
            everything_stored(&database_url, dir.path()).await,
        ),
    ] {
        assert!(!text.contains(token_part), "the bot token is in {what}");
        assert!(!text.contains("/file/bot"), "a file URL is in {what}");
    }
    assert_eq!(telegram.downloads("photo-ok"), 1);
    drop(database);
}

#[tokio::test]
async fn switchboard_check_reaches_the_bucket_and_shows_no_secret() {
    let s3 = FakeS3::start("switchboard").await;
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let database = format!("sqlite://{}/check.db", dir.path().display());
    let base_url = llm.openai_base();
    let endpoint = s3.endpoint();
    let check = |key_id: &'static str, secret_env: &'static str| {
        let env = vec![
            ("SWITCHBOARD__DATABASE__URL", database.clone()),
            ("SWITCHBOARD__LLM__BASE_URL", base_url.clone()),
            ("SWITCHBOARD__MEDIA__STORE", "s3".to_owned()),
            ("SWITCHBOARD__MEDIA__S3__BUCKET", "switchboard".to_owned()),
            ("SWITCHBOARD__MEDIA__S3__ENDPOINT", endpoint.clone()),
            ("SWITCHBOARD__MEDIA__S3__ALLOW_HTTP", "true".to_owned()),
            (
                "SWITCHBOARD__MEDIA__S3__ACCESS_KEY_ID_ENV",
                "SB_CHECK_S3_ID".to_owned(),
            ),
            (
                "SWITCHBOARD__MEDIA__S3__SECRET_ACCESS_KEY_ENV",
                secret_env.to_owned(),
            ),
            ("SB_CHECK_S3_ID", key_id.to_owned()),
            ("SB_CHECK_S3_SECRET", SECRET_ACCESS_KEY.to_owned()),
        ];
        let dir = dir.path().to_path_buf();
        async move {
            let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
                .arg("check")
                .current_dir(&dir)
                .env_remove("RUST_LOG")
                .envs(env)
                .kill_on_drop(true)
                .output()
                .await
                .expect("the binary runs");
            let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
            assert!(!stdout.contains(SECRET_ACCESS_KEY), "{stdout}");
            stdout
        }
    };

    let stdout = check(ACCESS_KEY_ID, "SB_CHECK_S3_SECRET").await;
    assert!(
        stdout.contains(&format!(
            "ok      media store: bucket switchboard at {endpoint}/ answered"
        )),
        "{stdout}"
    );
    assert!(
        s3.requests()
            .iter()
            .all(|request| request.starts_with("HEAD ")),
        "nothing written: {:?}",
        s3.requests()
    );

    let stdout = check("SOMEONEELSEKEY", "SB_CHECK_S3_SECRET").await;
    assert!(
        stdout.contains("PROBLEM media store: bucket switchboard at "),
        "a refused key: {stdout}"
    );
    let stdout = check(ACCESS_KEY_ID, "SB_CHECK_S3_UNSET").await;
    assert!(
        stdout.contains(
            "PROBLEM media store: blob storage failed: media.s3: the environment variable \
             SB_CHECK_S3_UNSET is unset or empty"
        ),
        "{stdout}"
    );
    assert!(s3.keys().is_empty());
}

/// A download that takes a while and counts itself.
struct SlowFile {
    bytes: &'static [u8],
    fetches: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl FetchMedia for SlowFile {
    async fn fetch(&self, _max_bytes: u64) -> Result<Vec<u8>, FetchError> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(self.bytes.to_vec())
    }
}

#[tokio::test]
async fn a_redelivery_while_the_files_are_fetched_waits_and_is_a_duplicate() {
    let llm = FakeLlm::echo().await;
    let app = TestApp::spawn_with(&llm, |s| s.media.principal_daily_bytes = 1_000_000).await;
    let fetches = Arc::new(AtomicUsize::new(0));
    // The same event twice, as a platform retrying a slow answer sends it.
    let delivery = || InboundMessage {
        platform: PlatformName::parse("api").expect("id"),
        account: AccountId::parse("default").expect("id"),
        event_id: EventId::parse("photo-event-1").expect("id"),
        attachments: vec![Attachment {
            fetch: Some(MediaFetcher::new(SlowFile {
                bytes: PNG,
                fetches: Arc::clone(&fetches),
            })),
            ..Attachment::new(AttachmentKind::Image, Some("dot.png".to_owned()))
        }],
        ..inbound::message("u1", "photo-chat", ChatKind::Direct, "what is this?")
    };
    let sink: &dyn InboundSink = app.gateway.service.as_ref();
    let (first, second) = tokio::join!(sink.submit(delivery()), sink.submit(delivery()));
    let mut outcomes = [first.expect("submitted"), second.expect("submitted")];
    outcomes.sort_by_key(|outcome| matches!(outcome, Submitted::Duplicate));
    assert!(
        matches!(outcomes, [Submitted::Accepted, Submitted::Duplicate]),
        "{outcomes:?}"
    );
    assert_eq!(fetches.load(Ordering::SeqCst), 1, "downloaded once");
    assert_eq!(
        counted_today(&app).await,
        vec![PNG.len() as i64],
        "counted once"
    );
    eventually("the turn", || async { llm.requests().len() == 1 }).await;
    app.stop().await;
}
