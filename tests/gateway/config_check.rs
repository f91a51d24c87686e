//! The configuration as an operator meets it, through the real binary:
//! mistakes in the file or the environment refused with one message each
//! (the file or variable, the key, what is valid), lists from the
//! environment, relative database paths, `switchboard check` against the
//! fake model and platforms, and the logs (no colour off a terminal, JSON
//! lines carrying a turn's trace id, session id and platform).

use std::path::Path;
use std::process::Output;

use serde_json::Value;
use switchboard_test_support::{feishu, telegram};

use crate::helpers::{FakeLlm, ServeProcess};

/// Runs the binary in `dir` with `args` and `env` (no inherited
/// `SWITCHBOARD__…` variables apply: the test process sets none).
async fn switchboard(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_switchboard"))
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .kill_on_drop(true)
        .output()
        .await
        .expect("the binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A configuration mistake: the file's contents, the environment, and the
/// whole of stderr after `switchboard: `.
type Mistake<'a> = (&'a str, Vec<(&'a str, &'a str)>, String);

#[tokio::test]
async fn config_mistakes_are_refused_once_with_file_key_and_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("gw.toml");
    let shown = file.display().to_string();
    let cases: Vec<Mistake> = vec![
        (
            "[llm]\nmodle = \"gpt-4o\"\n",
            vec![],
            format!("{shown}: unknown key `modle` in [llm]; did you mean `model`?"),
        ),
        (
            "[sessions]\nbusy = \"queued\"\n",
            vec![],
            format!(
                "{shown}: `sessions.busy` cannot be \"queued\" (did you mean \"queue\"?); \
                 valid values: \"queue\", \"interrupt\""
            ),
        ),
        (
            "[agent]\ntools = [\"calculater\"]\n",
            vec![],
            format!(
                "{shown}: invalid setting `agent.tools`: unknown tool `calculater` (did you mean \
                 `calculator`?); known tools: calculator, current_time, delegate, http_get, memory, schedule_task, list_tasks, cancel_task, ask_user"
            ),
        ),
        (
            "[access.platforms]\ntelegarm = [\"1\"]\n",
            vec![],
            format!(
                "{shown}: unknown platform `telegarm` in [access.platforms]; did you mean \
                 `telegram`? platforms: discord, feishu, slack, telegram, whatsapp"
            ),
        ),
        (
            "[telegram]\ntokn_env = \"BOT\"\n",
            vec![],
            format!("{shown}: unknown key `tokn_env` in [telegram]; did you mean `token_env`?"),
        ),
        (
            "[llm]\ntimeout_secs = \"soon\"\n",
            vec![],
            format!("{shown}: `llm.timeout_secs` must be a whole number, not the string \"soon\""),
        ),
        (
            "[server]\nbind = \"localhost\"\n",
            vec![],
            format!(
                "{shown}: invalid setting `server.bind`: \"localhost\" has no valid port; \
                 expected HOST:PORT, like 127.0.0.1:8080, [::1]:8080 or localhost:8080"
            ),
        ),
        (
            "[feishu]\nwebhook_path = \"/fs\"\n",
            vec![],
            format!("{shown}: `feishu`: missing field `app_id`"),
        ),
        (
            "[llm\nmodel = 1\n",
            vec![],
            format!(
                "cannot read the configuration file {shown}: not valid TOML: unclosed table, \
                 expected `]` (line 1, column 5)"
            ),
        ),
        (
            "",
            vec![("SWITCHBOARD__SESSIONS__BUSSY", "queue")],
            "environment variable SWITCHBOARD__SESSIONS__BUSSY: unknown key `bussy` in \
             [sessions]; did you mean `busy`?"
                .to_owned(),
        ),
        (
            "",
            vec![("SWITCHBOARD__RUNNER__MAX_CONCURRENT_TURNS", "many")],
            "environment variable SWITCHBOARD__RUNNER__MAX_CONCURRENT_TURNS: \
             `runner.max_concurrent_turns` must be a whole number, not \"many\""
                .to_owned(),
        ),
        (
            "[sessions]\nbusy = \"queue\"\n",
            vec![("SWITCHBOARD__SESSIONS__BUSY", "interupt")],
            "environment variable SWITCHBOARD__SESSIONS__BUSY: `sessions.busy` cannot be \
             \"interupt\" (did you mean \"interrupt\"?); valid values: \"queue\", \"interrupt\""
                .to_owned(),
        ),
    ];
    for (contents, env, expected) in cases {
        std::fs::write(&file, contents).expect("write");
        for command in ["check", "serve"] {
            let output = switchboard(dir.path(), &["--config", &shown, command], &env).await;
            let stderr = text(&output.stderr);
            assert!(
                !output.status.success(),
                "{command} with {contents:?}: {stderr}"
            );
            assert_eq!(
                stderr,
                format!("switchboard: {expected}\n"),
                "{command} with {contents:?} {env:?}"
            );
        }
    }
}

#[tokio::test]
async fn a_database_that_cannot_be_opened_is_named_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A folder where the database file should be.
    let folder = dir.path().join("db-is-a-folder.db");
    std::fs::create_dir(&folder).expect("mkdir");
    let url = format!("sqlite://{}", folder.display());
    let output = switchboard(
        dir.path(),
        &["serve"],
        &[
            ("SWITCHBOARD__DATABASE__URL", url.as_str()),
            ("SWITCHBOARD__SERVER__BIND", "127.0.0.1:0"),
            ("RUST_LOG", "error"),
        ],
    )
    .await;
    let stderr = text(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    let shown = folder.display().to_string();
    assert_eq!(stderr.matches(&shown).count(), 1, "{stderr}");
    assert_eq!(
        stderr.matches("unable to open database file").count(),
        1,
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[tokio::test]
async fn a_relative_database_path_is_the_config_files_and_usage_never_creates_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("conf");
    std::fs::create_dir(&config).expect("mkdir");
    std::fs::write(
        config.join("gw.toml"),
        "[database]\nurl = \"sqlite://state/gw.db\"\n",
    )
    .expect("write");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).expect("mkdir");
    let config_arg = config.join("gw.toml").display().to_string();

    // `usage` reads what is there: no database yet, so it says where it
    // looked and creates nothing.
    let output = switchboard(&elsewhere, &["--config", &config_arg, "usage"], &[]).await;
    let stderr = text(&output.stderr);
    assert!(!output.status.success());
    let expected_path = config.join("state/gw.db").display().to_string();
    assert!(
        stderr.contains(&format!("no database at {expected_path}")),
        "{stderr}"
    );
    assert!(!config.join("state").exists());
    assert!(!elsewhere.join("state").exists());

    // `migrate` creates it next to the file, wherever it runs from.
    let output = switchboard(&elsewhere, &["--config", &config_arg, "migrate"], &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(config.join("state/gw.db").exists());
    assert!(!elsewhere.join("state").exists());
    let output = switchboard(&elsewhere, &["--config", &config_arg, "usage"], &[]).await;
    assert!(output.status.success(), "{}", text(&output.stderr));

    // Without a file, the default path is the working directory's.
    let output = switchboard(&elsewhere, &["usage"], &[]).await;
    let stderr = text(&output.stderr);
    let default_path = elsewhere.join("data/switchboard.db").display().to_string();
    assert!(
        stderr.contains(&format!("no database at {default_path}")),
        "{stderr}"
    );
    assert!(!elsewhere.join("data").exists());
}

#[tokio::test]
async fn check_reaches_the_database_the_model_and_the_platforms() {
    let llm = FakeLlm::echo().await;
    let bot = telegram::FakeTelegram::start().await;
    let lark = feishu::FakeFeishu::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("gw.toml");
    std::fs::write(
        &file,
        format!(
            "[database]\nurl = \"sqlite://gw.db\"\n\
             [llm]\nbase_url = \"{}\"\nmodel = \"fake-model\"\napi_key_env = \"SB_CHECK_LLM_KEY\"\n\
             [telegram]\ntoken_env = \"SB_CHECK_TG_TOKEN\"\napi_url = \"{}\"\n\
             [feishu]\napp_id = \"{}\"\napp_secret_env = \"SB_CHECK_FS_SECRET\"\n\
             verification_token_env = \"SB_CHECK_FS_TOKEN\"\ndomain = \"{}\"\n",
            llm.openai_base(),
            bot.url(),
            feishu::APP_ID,
            lark.url(),
        ),
    )
    .expect("write");
    let config = file.display().to_string();
    let secrets = [
        ("SB_CHECK_LLM_KEY", "sk-check-secret"),
        ("SB_CHECK_TG_TOKEN", telegram::TOKEN),
        ("SB_CHECK_FS_SECRET", feishu::APP_SECRET),
        ("SB_CHECK_FS_TOKEN", feishu::VERIFICATION_TOKEN),
    ];
    let migrated = switchboard(dir.path(), &["--config", &config, "migrate"], &secrets).await;
    assert!(migrated.status.success(), "{}", text(&migrated.stderr));

    let output = switchboard(dir.path(), &["--config", &config, "check"], &secrets).await;
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    assert_eq!(
        lines[0],
        format!("ok      configuration: {config} is valid")
    );
    assert!(
        lines[1].starts_with("ok      database: reached "),
        "{stdout}"
    );
    assert!(
        lines[2].starts_with("ok      model endpoint: GET ")
            && lines[2].ends_with("(1 models listed)"),
        "{stdout}"
    );
    assert_eq!(
        lines[3],
        format!(
            "ok      telegram: getMe answered: bot @{}",
            telegram::BOT_USERNAME
        )
    );
    assert_eq!(
        lines[4],
        format!(
            "ok      feishu: tenant token and bot info fetched: bot {}",
            feishu::BOT_OPEN_ID
        )
    );
    assert!(!stdout.contains("sk-check-secret") && !stdout.contains(telegram::TOKEN));

    // No model key, a token Telegram refuses: two problems, exit 1.
    bot.script(
        "getMe",
        401,
        serde_json::json!({"ok": false, "error_code": 401, "description": "Unauthorized"}),
    );
    let without_key: Vec<(&str, &str)> = secrets[1..].to_vec();
    let output = switchboard(dir.path(), &["--config", &config, "check"], &without_key).await;
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains(
            "warning model endpoint: the environment variable SB_CHECK_LLM_KEY \
             (llm.api_key_env) is unset: calls go without a key"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "PROBLEM model endpoint: GET {}/models answered HTTP 401: check the key in \
             SB_CHECK_LLM_KEY",
            llm.openai_base()
        )),
        "{stdout}"
    );
    assert!(stdout.contains("PROBLEM telegram: "), "{stdout}");
    assert_eq!(text(&output.stderr), "switchboard: 2 problems found\n");
    assert!(!stdout.contains(telegram::TOKEN));
}

#[tokio::test]
async fn text_logs_have_no_colour_off_a_terminal_and_warn_of_a_missing_key() {
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let base_url = llm.openai_base();
    let server = ServeProcess::start(
        dir.path(),
        &[
            ("SWITCHBOARD__LLM__BASE_URL", base_url.as_str()),
            ("SWITCHBOARD__LLM__API_KEY_ENV", "SB_LOGS_UNSET_KEY"),
        ],
        true,
    )
    .await;
    let logs = server.stop().await;
    assert!(logs.contains("listening"), "{logs}");
    assert!(!logs.contains('\u{1b}'), "no ANSI escapes: {logs:?}");
    assert_eq!(
        logs.matches("the model's key variable SB_LOGS_UNSET_KEY (llm.api_key_env) is unset")
            .count(),
        1,
        "{logs}"
    );
}

#[tokio::test]
async fn json_logs_carry_the_turns_trace_session_and_platform_on_every_line() {
    let llm = FakeLlm::echo().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let base_url = llm.openai_base();
    let server = ServeProcess::start(
        dir.path(),
        &[
            ("SWITCHBOARD__LLM__BASE_URL", base_url.as_str()),
            ("OPENAI_API_KEY", "sk-json-log-secret"),
            ("SWITCHBOARD__LOG__JSON", "true"),
            ("RUST_LOG", "debug"),
        ],
        true,
    )
    .await;
    assert_eq!(server.say("ping").await, "echo: ping");
    let logs = server.stop().await;

    let lines: Vec<Value> = logs
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|_| panic!("JSON line: {line}")))
        .collect();
    assert!(lines.iter().any(|line| line["message"] == "listening"));
    let turn_lines: Vec<&Value> = lines
        .iter()
        .filter(|line| {
            line["spans"]
                .as_str()
                .is_some_and(|spans| spans.split(':').any(|span| span == "turn"))
        })
        .collect();
    assert!(!turn_lines.is_empty(), "{logs}");
    let trace_id = turn_lines[0]["trace_id"].as_str().expect("trace id");
    let session_id = turn_lines[0]["session_id"].as_str().expect("session id");
    for line in &turn_lines {
        assert_eq!(line["trace_id"], trace_id, "{line}");
        assert_eq!(line["session_id"], session_id, "{line}");
        assert_eq!(line["platform"], "api", "{line}");
        assert!(line["level"].is_string() && line["timestamp"].is_string());
    }
    assert!(!logs.contains("sk-json-log-secret"));
    assert!(!logs.contains('\u{1b}'));
}

#[tokio::test]
async fn check_calls_slacks_auth_test_and_reads_the_whatsapp_number() {
    use switchboard_test_support::{slack, whatsapp};
    let llm = FakeLlm::echo().await;
    let workspace = slack::FakeSlack::start().await;
    let cloud = whatsapp::FakeWhatsApp::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("gw.toml");
    std::fs::write(
        &file,
        format!(
            "[database]\nurl = \"sqlite://gw.db\"\n\
             [llm]\nbase_url = \"{}\"\nmodel = \"fake-model\"\napi_key_env = \"SB_CHECK_LLM_KEY\"\n\
             [slack]\nbot_token_env = \"SB_CHECK_SLACK_BOT\"\n\
             signing_secret_env = \"SB_CHECK_SLACK_SECRET\"\napi_url = \"{}\"\n\
             [whatsapp]\nphone_number_id = \"{}\"\naccess_token_env = \"SB_CHECK_WA_TOKEN\"\n\
             app_secret_env = \"SB_CHECK_WA_SECRET\"\nverify_token_env = \"SB_CHECK_WA_VERIFY\"\n\
             api_url = \"{}\"\n",
            llm.openai_base(),
            workspace.api_url(),
            whatsapp::PHONE_NUMBER_ID,
            cloud.url(),
        ),
    )
    .expect("write");
    let config = file.display().to_string();
    let mut secrets = vec![
        ("SB_CHECK_LLM_KEY", "sk-check-secret"),
        ("SB_CHECK_SLACK_BOT", slack::BOT_TOKEN),
        ("SB_CHECK_SLACK_SECRET", slack::SIGNING_SECRET),
        ("SB_CHECK_WA_TOKEN", whatsapp::ACCESS_TOKEN),
        ("SB_CHECK_WA_SECRET", whatsapp::APP_SECRET),
        ("SB_CHECK_WA_VERIFY", whatsapp::VERIFY_TOKEN),
    ];
    let migrated = switchboard(dir.path(), &["--config", &config, "migrate"], &secrets).await;
    assert!(migrated.status.success(), "{}", text(&migrated.stderr));

    let output = switchboard(dir.path(), &["--config", &config, "check"], &secrets).await;
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    let line = |platform: &str| {
        stdout
            .lines()
            .find(|line| line.contains(&format!(" {platform}: ")))
            .unwrap_or_else(|| panic!("no {platform} line: {stdout}"))
            .to_owned()
    };
    let slack_line = line("slack");
    assert!(slack_line.starts_with("ok      slack: "), "{stdout}");
    assert!(
        slack_line.contains("auth.test answered: team")
            && slack_line.contains(slack::TEAM_ID)
            && slack_line.contains(slack::BOT_USER_ID),
        "{slack_line}"
    );
    let whatsapp_line = line("whatsapp");
    assert!(whatsapp_line.starts_with("ok      whatsapp: "), "{stdout}");
    assert!(
        whatsapp_line.contains(whatsapp::VERIFIED_NAME),
        "{whatsapp_line}"
    );
    assert!(
        !whatsapp_line.contains(whatsapp::DISPLAY_PHONE_NUMBER),
        "the number is masked: {whatsapp_line}"
    );

    // A bot token Slack refuses: a problem, exit 1, no token shown.
    secrets[1] = ("SB_CHECK_SLACK_BOT", "xoxb-refused-by-the-fake");
    let output = switchboard(dir.path(), &["--config", &config, "check"], &secrets).await;
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("PROBLEM slack: "), "{stdout}");
    assert!(stdout.contains("invalid_auth"), "{stdout}");
    for secret in [
        "xoxb-refused-by-the-fake",
        slack::BOT_TOKEN,
        whatsapp::ACCESS_TOKEN,
        whatsapp::APP_SECRET,
    ] {
        assert!(!stdout.contains(secret) && !text(&output.stderr).contains(secret));
    }
}
