//! `switchboard chat`: an interactive terminal chat through the same session
//! service as every other platform.
//!
//! The terminal is a direct chat of platform `terminal`, account `local`, with
//! the operating-system user as the chat and the sender. `--session ID`
//! continues a session this user may reach (their own principal's, from any
//! platform once linked, or one with no owner) by pointing this chat at it;
//! any other id is answered with a message and the chat goes on with the
//! user's own conversation. `--list` prints the sessions this user may reach.
//!
//! The prompt is a line editor ([`editor`]), each turn is followed live
//! ([`follow`]), and the chat's own files (history, log, turns not yet
//! shown) are described in [`files`]. A turn that parks on a question with
//! buttons (an approval) shows them as numbered choices; the number or the
//! label typed next is the press ([`press`]), and the resumed turn is
//! followed as before.

mod editor;
mod files;
mod follow;
mod press;

use crate::domain::{InboundId, InboundStatus, LocalPlatform, PrincipalId, SessionId};
use std::io::IsTerminal;
use std::time::Duration;

use switchboard_contract::{
    AccountId, ChatId, ChatKind, EventId, IdError, InboundMessage, InboundSink, PlatformName,
    Sender, UserId,
};

use crate::session::key::Origin;
use crate::session::service::{Admission, ServiceError, SessionService, SubmitOptions};
use crate::store::StoreError;
pub use files::{ChatFiles, log_to_file};
use follow::Followed;

/// The most sessions `--list` prints.
const LISTED_SESSIONS: i64 = 50;

/// Why the chat stopped.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("terminal i/o failed: {0}")]
    Io(std::io::Error),
    #[error("the line editor failed: {0}")]
    Editor(String),
    #[error("{0}")]
    Service(String),
}

// Not `#[from]`: the message already carries the cause (see `StoreError`).
impl From<std::io::Error> for ChatError {
    fn from(err: std::io::Error) -> Self {
        Self::Io(err)
    }
}

impl From<StoreError> for ChatError {
    fn from(err: StoreError) -> Self {
        Self::Service(err.to_string())
    }
}

impl From<IdError> for ChatError {
    fn from(err: IdError) -> Self {
        Self::Service(err.to_string())
    }
}

/// How the chat runs.
#[derive(Debug, Clone)]
pub struct ChatOptions {
    /// `--session`: the session to continue.
    pub session: Option<String>,
    /// How long a turn is followed before the chat gives the prompt back.
    pub reply_timeout: Duration,
    /// Where the history and the turns not yet shown are kept.
    pub files: ChatFiles,
}

/// The terminal's user: `$USER`, or `local`.
fn terminal_user() -> String {
    std::env::var("USER")
        .ok()
        .filter(|user| !user.is_empty())
        .unwrap_or_else(|| "local".to_owned())
}

/// The principal of the terminal's user.
async fn terminal_principal(
    service: &SessionService,
    user: &str,
) -> Result<PrincipalId, ChatError> {
    let identity = service
        .store()
        .principals()
        .resolve_identity(LocalPlatform::Terminal.name(), "local", user)
        .await?;
    Ok(identity.principal)
}

/// The sessions the terminal's user may reach, most recent first, one a
/// line: id, last activity (UTC), platform, title (or first words).
///
/// # Errors
/// A database failure.
pub async fn list_sessions(service: &SessionService) -> Result<String, ChatError> {
    let user = terminal_user();
    let principal = terminal_principal(service, &user).await?;
    let sessions = service
        .store()
        .principals()
        .sessions(principal, LISTED_SESSIONS)
        .await?;
    if sessions.is_empty() {
        return Ok(format!(
            "No sessions yet for {user}; `switchboard chat` starts one.\n"
        ));
    }
    let mut text = String::new();
    for session in sessions {
        let label = session
            .title
            .or_else(|| session.first_text.map(|text| shortened(&text, 60)))
            .unwrap_or_else(|| "(empty)".to_owned());
        let when = jiff::Timestamp::from_millisecond(session.updated_at)
            .map(|at| at.strftime("%Y-%m-%d %H:%M UTC").to_string())
            .unwrap_or_else(|_| "?".to_owned());
        text.push_str(&format!(
            "{}  {when}  {:<9} {label}\n",
            session.id, session.platform
        ));
    }
    Ok(text)
}

/// `text` on one line, at most `chars` characters.
fn shortened(text: &str, chars: usize) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= chars {
        return line;
    }
    let mut short: String = line.chars().take(chars.saturating_sub(1)).collect();
    short.push('…');
    short
}

/// Whether the terminal's principal may continue session `text`: it exists
/// and is theirs or no one's.
async fn reachable(
    service: &SessionService,
    principal: PrincipalId,
    text: &str,
) -> Result<Option<SessionId>, ChatError> {
    // Text that cannot be an id names no session, like an unknown id.
    let Ok(id) = SessionId::parse(text) else {
        return Ok(None);
    };
    let row = service.store().sessions().get(&id).await?;
    Ok(row
        .filter(|row| row.principal.is_none_or(|owner| owner == principal))
        .map(|_| id))
}

fn say(text: &str) {
    println!("{text}");
}

/// Runs the chat until Ctrl-D (or the end of input) or Ctrl-C twice.
///
/// # Errors
/// A database failure at the start, or the terminal failing.
pub async fn run_chat(service: &SessionService, options: ChatOptions) -> Result<(), ChatError> {
    let ChatOptions {
        session,
        reply_timeout,
        files,
    } = options;
    let user = terminal_user();
    let origin = origin(&user)?;
    let principal = terminal_principal(service, &user).await?;
    let tty = std::io::stdout().is_terminal();
    let mut pending_session = None;
    if let Some(text) = session {
        match reachable(service, principal, &text).await? {
            Some(id) => {
                say(&format!("Continuing session {id}."));
                pending_session = Some(id);
            }
            None => say(&format!(
                "No session {text} that {user} may reach from this terminal \
                 (`switchboard chat --list` shows yours); continuing your own conversation."
            )),
        }
    }
    if let Err(err) = files.create_folder() {
        tracing::warn!(error = %err, "could not create the folder of the chat's files");
    }
    let mut unshown = files.unshown_turns();
    if !unshown.is_empty() {
        show_unshown(service, &mut unshown, reply_timeout, tty).await?;
        save_unshown(&files, &unshown);
    }
    let editor = editor::LineEditor::start(Some(files.history()))
        .map_err(|err| ChatError::Editor(err.to_string()))?;
    say(
        "Type a message and press Enter (Alt-Enter adds a line; a paste is one message); \
         /help lists commands; Ctrl-C stops a reply; Ctrl-D quits.",
    );

    let mut interrupts = 0;
    // A line typed at a question's choices that is none of them: the next
    // message.
    let mut carried: Option<String> = None;
    loop {
        let read = match carried.take() {
            Some(line) => editor::Read::Line(line),
            None => editor.read("> ").await,
        };
        let line = match read {
            editor::Read::Line(line) => line,
            editor::Read::Interrupted => {
                interrupts += 1;
                if interrupts > 1 {
                    break;
                }
                say("(Ctrl-C again or Ctrl-D quits)");
                continue;
            }
            editor::Read::Eof => break,
            editor::Read::Failed(err) => return Err(ChatError::Editor(err)),
        };
        interrupts = 0;
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        let message = inbound(&origin, &user, text)?;
        let options = SubmitOptions {
            session: pending_session.take().map(|id: SessionId| id.to_string()),
            wait: true,
            own_chat: false,
            model: None,
            live: true,
            turn: Default::default(),
        };
        let submission = match service.submit(message, options).await {
            Ok(submission) => submission,
            Err(ServiceError::UnknownSession(id)) => {
                say(&format!(
                    "(no session {id} that {user} may reach; the message was not sent)"
                ));
                continue;
            }
            Err(err) => {
                say(&format!("(the message was not taken: {err})"));
                continue;
            }
        };
        let (turn, session_id) = match submission.admission {
            Admission::Accepted {
                inbound_id,
                session_id,
            }
            | Admission::Handled {
                inbound_id,
                session_id,
                ..
            } => (inbound_id, session_id),
            Admission::Duplicate | Admission::Ignored => {
                say("(message not taken)");
                continue;
            }
        };
        let Some(reply) = submission.reply else {
            continue;
        };
        unshown.push((session_id.clone(), turn));
        save_unshown(&files, &unshown);
        let mut followed = follow::follow(
            service.runner(),
            &session_id,
            submission.live,
            reply,
            reply_timeout,
            tty,
        )
        .await;
        let mut announce = false;
        while followed == Followed::Parked {
            let chat = Chat {
                service,
                editor: &editor,
                origin: &origin,
                user: &user,
                patience: reply_timeout,
                tty,
            };
            match chat.answer(&session_id, turn, announce).await? {
                Inline::Followed(next) => {
                    followed = next;
                    announce = false;
                }
                Inline::Again => announce = true,
                Inline::Line(line) => {
                    carried = Some(line);
                    break;
                }
                Inline::Waiting => break,
                Inline::Eof => return Ok(()),
            }
        }
        if followed == Followed::Shown {
            unshown.retain(|(_, id)| *id != turn);
            save_unshown(&files, &unshown);
        }
        if followed == Followed::Quit {
            return Ok(());
        }
    }
    Ok(())
}

/// What answering a parked turn's question at the prompt came to.
enum Inline {
    /// Pressed: the turn was followed again, to this.
    Followed(Followed),
    /// Pressed, and the turn still waits (the press was refused, or
    /// another question of it is open): ask again.
    Again,
    /// A line that is none of the choices: the next message.
    Line(String),
    /// Nothing to press (a question answered in words), or Ctrl-C: the
    /// turn goes on waiting.
    Waiting,
    /// The end of input.
    Eof,
}

/// What answering at the prompt uses.
struct Chat<'a> {
    service: &'a SessionService,
    editor: &'a editor::LineEditor,
    origin: &'a Origin,
    user: &'a str,
    patience: Duration,
    tty: bool,
}

impl Chat<'_> {
    /// Shows the choices of the question `turn` waits for (its text too,
    /// when `announce`: the follow did not show it) and reads the press;
    /// a press goes through the core's press path, as a button's on any
    /// platform, and the resumed turn is followed.
    async fn answer(
        &self,
        session: &SessionId,
        turn: InboundId,
        announce: bool,
    ) -> Result<Inline, ChatError> {
        let store = self.service.store();
        let questions = press::pending(store, turn, self.origin).await?;
        let Some(question) = questions.into_iter().next() else {
            return Ok(Inline::Waiting);
        };
        if announce {
            say(question.text.trim_end());
        }
        say(&press::menu(&question.buttons));
        let button = loop {
            let line = match self.editor.read("choice> ").await {
                editor::Read::Line(line) => line,
                editor::Read::Interrupted => return Ok(Inline::Waiting),
                editor::Read::Eof => return Ok(Inline::Eof),
                editor::Read::Failed(err) => return Err(ChatError::Editor(err)),
            };
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            match press::chosen(&question.buttons, text) {
                Some(button) => break button,
                None => return Ok(Inline::Line(text.to_owned())),
            }
        };
        // Waited for before the press, so that a turn resuming at once is
        // not missed.
        let runner = self.service.runner();
        let waiting = runner.wait_for(turn);
        let live = runner.live().subscribe(turn);
        let action = press::press(self.origin, self.user, button)?;
        let answer = InboundSink::act(self.service, action)
            .await
            .map_err(|err| ChatError::Service(err.to_string()))?;
        if let Some(shown) = answer.update.or(answer.notice) {
            say(&shown);
        }
        let record = store.api().turn(session, turn).await?;
        Ok(match record {
            Some(record)
                if matches!(
                    record.status,
                    InboundStatus::Pending | InboundStatus::Running
                ) =>
            {
                Inline::Followed(
                    follow::follow(
                        runner,
                        session,
                        Some(live),
                        waiting,
                        self.patience,
                        self.tty,
                    )
                    .await,
                )
            }
            Some(record) if record.status == InboundStatus::Waiting => Inline::Again,
            Some(record) => {
                if let Some(reply) = record.reply {
                    say(reply.trim_end());
                }
                Inline::Followed(Followed::Shown)
            }
            None => Inline::Followed(Followed::Shown),
        })
    }
}

fn save_unshown(files: &ChatFiles, unshown: &[(SessionId, InboundId)]) {
    if let Err(err) = files.set_unshown_turns(unshown) {
        tracing::warn!(error = %err, "could not save the turns not yet shown");
    }
}

/// Shows the replies of turns sent before but never shown (the chat quit,
/// crashed or gave up waiting): those stored since, and those still running
/// (recovered at start) as they finish. Keeps in `unshown` the ones still
/// not shown.
async fn show_unshown(
    service: &SessionService,
    unshown: &mut Vec<(SessionId, InboundId)>,
    patience: Duration,
    tty: bool,
) -> Result<(), ChatError> {
    let mut left = Vec::new();
    for (session, turn) in std::mem::take(unshown) {
        let Some(mut record) = service.store().api().turn(&session, turn).await? else {
            continue;
        };
        let mut following = None;
        if record.reply.is_none()
            && matches!(
                record.status,
                InboundStatus::Pending | InboundStatus::Running
            )
        {
            // Waited for, then read again, so that a turn ending in
            // between is not missed.
            let waiting = service.runner().wait_for(turn);
            let live = service.runner().live().subscribe(turn);
            following = Some((waiting, live));
            record = match service.store().api().turn(&session, turn).await? {
                Some(record) => record,
                None => continue,
            };
            if !matches!(
                record.status,
                InboundStatus::Pending | InboundStatus::Running
            ) {
                following = None;
            }
        }
        let asked = shortened(&record.text, 60);
        match (record.reply, following) {
            (Some(reply), _) => {
                say(&format!(
                    "Reply to “{asked}” (written while this chat was away):"
                ));
                say(reply.trim_end());
            }
            (None, Some((waiting, live))) => {
                say(&format!("Finishing “{asked}” (started before this chat):"));
                let followed = follow::follow(
                    service.runner(),
                    &session,
                    Some(live),
                    waiting,
                    patience,
                    tty,
                )
                .await;
                if followed != Followed::Shown {
                    left.push((session, turn));
                }
            }
            // Ended without a reply: nothing to show.
            (None, None) => {}
        }
    }
    *unshown = left;
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
