//! `switchboard chat`: an interactive terminal chat through the same session
//! service as every other platform.
//!
//! The terminal is a direct chat of platform `terminal`, account `local`, with
//! the operating-system user as the chat. `--session ID` continues an
//! existing session (from any platform) by pointing this chat at it.

use std::time::Duration;

use switchboard_contract::{
    AccountId, ChatId, ChatKind, EventId, IdError, InboundMessage, PlatformName, Sender, UserId,
};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

use crate::session::key::Origin;
use crate::session::local::LocalPlatform;
use crate::session::service::{Admission, SessionService, SubmitOptions};
use crate::store::SessionId;

/// Why the chat stopped.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("no session with id {0}")]
    UnknownSession(String),
    #[error("terminal i/o failed: {0}")]
    Io(std::io::Error),
    #[error("{0}")]
    Service(String),
}

// Not `#[from]`: the message already carries the cause (see `StoreError`).
impl From<std::io::Error> for ChatError {
    fn from(err: std::io::Error) -> Self {
        Self::Io(err)
    }
}

/// Runs the chat until end of input.
///
/// # Errors
/// An unknown `--session`, a database failure, or terminal i/o failing.
pub async fn run_chat<R, W>(
    service: &SessionService,
    session: Option<String>,
    input: R,
    mut output: W,
    reply_timeout: Duration,
) -> Result<(), ChatError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let user = std::env::var("USER")
        .ok()
        .filter(|user| !user.is_empty())
        .unwrap_or_else(|| "local".to_owned());
    let origin = origin(&user).map_err(|err| ChatError::Service(err.to_string()))?;
    let mut pending_session = None;
    if let Some(text) = session {
        // Text that cannot be an id names no session, like an unknown id.
        let Ok(id) = SessionId::parse(&text) else {
            return Err(ChatError::UnknownSession(text));
        };
        if service
            .store()
            .session(&id)
            .await
            .map_err(|err| ChatError::Service(err.to_string()))?
            .is_none()
        {
            return Err(ChatError::UnknownSession(text));
        }
        output
            .write_all(format!("Continuing session {id}.\n").as_bytes())
            .await?;
        pending_session = Some(id);
    }
    output
        .write_all(b"Type a message and press Enter; /help lists commands; Ctrl-D quits.\n> ")
        .await?;
    output.flush().await?;

    let mut lines = input.lines();
    while let Some(line) = lines.next_line().await? {
        let text = line.trim();
        if text.is_empty() {
            output.write_all(b"> ").await?;
            output.flush().await?;
            continue;
        }
        let message =
            inbound(&origin, &user, text).map_err(|err| ChatError::Service(err.to_string()))?;
        let submission = service
            .submit(
                message,
                SubmitOptions {
                    session: pending_session.take().map(|id| id.to_string()),
                    wait: true,
                    own_chat: false,
                    model: None,
                    live: false,
                },
            )
            .await
            .map_err(|err| ChatError::Service(err.to_string()))?;
        let reply = match (submission.admission, submission.reply) {
            (Admission::Accepted { .. } | Admission::Handled { .. }, Some(receiver)) => {
                match tokio::time::timeout(reply_timeout, receiver).await {
                    Ok(Ok(reply)) => reply.text,
                    _ => "(no reply in time; it will appear in the session's history)".to_owned(),
                }
            }
            _ => "(message not taken)".to_owned(),
        };
        output.write_all(reply.trim_end().as_bytes()).await?;
        output.write_all(b"\n> ").await?;
        output.flush().await?;
    }
    output.write_all(b"\n").await?;
    output.flush().await?;
    Ok(())
}

fn origin(user: &str) -> Result<Origin, IdError> {
    Ok(Origin {
        platform: PlatformName::parse(LocalPlatform::Terminal.name())?,
        account: AccountId::parse("local")?,
        chat: ChatId::parse(user)?,
        thread: None,
        sender: None,
    })
}

fn inbound(origin: &Origin, user: &str, text: &str) -> Result<InboundMessage, IdError> {
    Ok(InboundMessage {
        platform: origin.platform.clone(),
        account: origin.account.clone(),
        event_id: EventId::parse(uuid::Uuid::new_v4().to_string())?,
        chat: origin.chat.clone(),
        chat_kind: ChatKind::Direct,
        thread: None,
        sender: Sender {
            id: UserId::parse(user)?,
            display_name: Some(user.to_owned()),
            is_bot: false,
        },
        text: text.to_owned(),
        mentions_bot: true,
        reply_to: None,
        message_id: None,
        attachments: Vec::new(),
    })
}
