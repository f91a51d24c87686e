//! `switchboard chat`: the terminal chat, through the same session service
//! as every platform, with its log in a file beside the database.

use anyhow::Context;

use super::warn_if_no_llm_key;
use crate::config::Settings;
use crate::gateway::Gateway;
use crate::{telemetry, terminal};

/// Runs the chat (or, with `list`, prints the sessions this terminal user
/// may continue).
///
/// # Errors
/// The gateway cannot start, or the chat fails.
pub async fn run(settings: Settings, session: Option<String>, list: bool) -> anyhow::Result<()> {
    // The log goes to a file: lines printed into the chat would break it
    // up.
    let files = terminal::ChatFiles::for_database(&settings.database.url);
    let logged = files
        .create_folder()
        .and_then(|()| terminal::log_to_file(&settings.log, &files.log()));
    if let Err(err) = logged {
        telemetry::init(&settings.log, Some("error"));
        eprintln!(
            "switchboard: cannot write the chat log {}: {err}",
            files.log().display()
        );
    }
    warn_if_no_llm_key(&settings);
    chat(settings, session, list, files).await
}

async fn chat(
    settings: Settings,
    session: Option<String>,
    list: bool,
    files: terminal::ChatFiles,
) -> anyhow::Result<()> {
    let reply_timeout = settings.api.reply_timeout;
    let database = crate::check::shown_url(&settings.database.url);
    let gateway = Gateway::build(settings)
        .await
        .with_context(|| format!("starting the gateway (database {database})"))?;
    gateway
        .recover()
        .await
        .context("recovering unfinished work")?;
    let result = if list {
        terminal::list_sessions(&gateway.service)
            .await
            .map(|text| print!("{text}"))
    } else {
        let options = terminal::ChatOptions {
            session,
            reply_timeout,
            files,
        };
        terminal::run_chat(&gateway.service, options).await
    };
    gateway.shutdown().await;
    result.context("chat")
}
