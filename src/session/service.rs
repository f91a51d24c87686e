//! The session service: where every platform's messages enter the core.
//!
//! It drops what is not for the agent (bots, group messages that do not
//! address the bot), records each message once (a redelivered event is a
//! duplicate), resolves the sender to a principal (created on first contact),
//! answers commands, resolves the chat to its session (creating the session,
//! with its system prompt built once, on first contact), and queues the
//! message for the session's runner.
//!
//! Direct chats are routed by the sender's principal when
//! `sessions.dm_sessions = "shared"`, so every linked identity continues one
//! conversation; the reply still goes to the chat the message came from.
//! Group chats are routed by the chat and never reach a principal's own
//! sessions: the commands that list, resume or link them answer in direct
//! chats only.

use std::sync::Arc;

use async_trait::async_trait;
use switchboard_contract::{ChatKind, InboundMessage, InboundSink, SubmitError, Submitted};
use tokio::sync::oneshot;

use super::commands::{Command, HELP};
use super::key::{Origin, RouteKey};
use super::link::{CODE_TTL, FAILURE_WINDOW, LinkCode, MAX_FAILURES};
use super::runner::{LOCAL_PLATFORMS, Runner, TurnReply};
use super::turn::StopCause;
use crate::agent::prompt::build_system_prompt;
use crate::config::{
    AccessSettings, AgentSettings, BusyMode, DmSessions, GroupSessions, SessionSettings, Settings,
};
use crate::store::{
    Applicant, Identity, InboundStatus, NewInbound, NewSession, PairingStatus, PrincipalId,
    Redemption, SessionSummary, Store, StoreError, TurnEnd, now_ms, start_of_today_ms,
};
use crate::tools::ToolRegistry;

/// What became of a submitted message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Queued for its session's runner.
    Accepted { inbound_id: i64, session_id: String },
    /// The same platform event was recorded before.
    Duplicate,
    /// Not for the agent.
    Ignored,
    /// A command, answered through the outbox.
    Handled {
        inbound_id: i64,
        session_id: String,
        reply: String,
    },
}

/// Options for [`SessionService::submit`].
#[derive(Debug, Clone, Default)]
pub struct SubmitOptions {
    /// Continue this session (it must exist): the chat is pointed at it first.
    pub session: Option<String>,
    /// Return a receiver for the turn's reply.
    pub wait: bool,
    /// Route by this chat alone, even a direct chat whose principal's
    /// conversation is shared (the HTTP API's anonymous one-off requests, and
    /// requests naming their session).
    pub own_chat: bool,
}

/// A submitted message and, when asked for, its reply to come.
#[derive(Debug)]
pub struct Submission {
    pub admission: Admission,
    pub reply: Option<oneshot::Receiver<TurnReply>>,
}

/// Why a message could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("no session with id {0}")]
    UnknownSession(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The platform-neutral core of message handling.
pub struct SessionService {
    store: Store,
    runner: Runner,
    registry: Arc<ToolRegistry>,
    agent: AgentSettings,
    model: String,
    /// Models `/model` may switch to: `llm.model` and `llm.extra_models`.
    models: Vec<String>,
    sessions: SessionSettings,
    access: AccessSettings,
    /// A principal's daily spend cap in dollars (0: none), for `/usage`.
    daily_usd: f64,
}

/// Who sent a command, from where, and the session the chat is on.
struct CommandContext<'a> {
    identity: Identity,
    origin: &'a Origin,
    route: &'a RouteKey,
    session_id: &'a str,
    direct: bool,
    own_chat: bool,
}

/// What access control does with a message from an unknown sender.
enum Gate {
    Allowed,
    /// Answered with this (the pairing code), no turn.
    Reply(String),
    /// Dropped (a denied sender).
    Ignored,
}

/// The answer to identity commands sent in a group chat.
const DIRECT_ONLY: &str = "Please send this command in a direct chat with me.";
/// Sessions `/sessions` lists.
const SESSIONS_LISTED: i64 = 10;
/// Longest title kept, in characters.
const TITLE_MAX_CHARS: usize = 200;

impl SessionService {
    /// Builds the service from the settings it reads: `agent`, `llm.model`
    /// and `llm.extra_models`, `sessions`, `access`.
    pub fn new(
        store: Store,
        runner: Runner,
        registry: Arc<ToolRegistry>,
        settings: &Settings,
    ) -> Self {
        let model = settings.llm.model.clone();
        let mut models = vec![model.clone()];
        models.extend(
            settings
                .llm
                .extra_models
                .iter()
                .filter(|m| **m != model)
                .cloned(),
        );
        Self {
            store,
            runner,
            registry,
            agent: settings.agent.clone(),
            model,
            models,
            sessions: settings.sessions.clone(),
            access: settings.access.clone(),
            daily_usd: settings.limits.principal_daily_usd,
        }
    }

    pub fn runner(&self) -> &Runner {
        &self.runner
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Takes one inbound message.
    ///
    /// # Errors
    /// An unknown session in `options` (or another principal's), or a
    /// database failure.
    pub async fn submit(
        &self,
        message: InboundMessage,
        options: SubmitOptions,
    ) -> Result<Submission, ServiceError> {
        let ignored = Submission {
            admission: Admission::Ignored,
            reply: None,
        };
        if message.sender.is_bot {
            return Ok(ignored);
        }
        if message.chat_kind == ChatKind::Group && !message.mentions_bot {
            return Ok(ignored);
        }
        let identity = self
            .store
            .resolve_identity(
                message.platform.as_str(),
                message.account.as_str(),
                message.sender.id.as_str(),
            )
            .await?;
        let direct = message.chat_kind == ChatKind::Direct;
        // `/compact` needs a model call, so it waits its turn in the queue.
        let command = Command::parse(&message.text, None).filter(|c| *c != Command::Compact);
        // An unknown sender gets a pairing code instead of a turn; `/link
        // CODE` (a code from an allowed account) still gets through.
        let mut pairing_reply = None;
        if !self.is_allowed(&message, &identity).await? {
            if !direct {
                tracing::debug!(principal_id = %identity.principal, "unknown sender in a group ignored");
                return Ok(ignored);
            }
            if !matches!(command, Some(Command::Link(Some(_)))) {
                match self.pairing(&message, &identity).await? {
                    Gate::Allowed => {}
                    Gate::Reply(reply) => pairing_reply = Some(reply),
                    Gate::Ignored => return Ok(ignored),
                }
            }
        }
        let origin = self.origin_of(&message);
        let route = self.route_of(direct, &origin, identity.principal, options.own_chat);
        if let Some(session) = &options.session {
            let row = self
                .store
                .session(session)
                .await?
                .ok_or_else(|| ServiceError::UnknownSession(session.clone()))?;
            if row
                .principal
                .is_some_and(|owner| owner != identity.principal)
            {
                // Answered like a missing session: ids of other people's
                // sessions are not confirmed.
                tracing::warn!(principal_id = %identity.principal, "refused another principal's session");
                return Err(ServiceError::UnknownSession(session.clone()));
            }
            self.store.bind_route(route.as_str(), session).await?;
        }
        let owner = direct.then_some(identity.principal);
        let session_id = self.session_for(&route, &origin, owner).await?;
        let status = if command.is_some() || pairing_reply.is_some() {
            InboundStatus::Command
        } else {
            InboundStatus::Pending
        };
        let Some(inbound_id) = self
            .store
            .record_inbound(&new_inbound(
                &message,
                &session_id,
                status,
                command.as_ref(),
                identity.principal,
            ))
            .await?
        else {
            tracing::debug!(event_id = %message.event_id, "duplicate event dropped");
            return Ok(Submission {
                admission: Admission::Duplicate,
                reply: None,
            });
        };
        let reply = options.wait.then(|| self.runner.wait_for(inbound_id));
        let context = CommandContext {
            identity,
            origin: &origin,
            route: &route,
            session_id: &session_id,
            direct,
            own_chat: options.own_chat,
        };
        let admission = match (pairing_reply, command) {
            (Some(text), _) => self.answer_command(inbound_id, session_id, text).await?,
            (None, Some(Command::Retry)) => match self.retry(&session_id, inbound_id).await? {
                Some(admission) => admission,
                None => {
                    let text = "Nothing to retry yet.".to_owned();
                    self.answer_command(inbound_id, session_id, text).await?
                }
            },
            (None, Some(command)) => {
                let (session_id, answer) = self.run_command(command, &context).await?;
                self.answer_command(inbound_id, session_id, answer).await?
            }
            (None, None) => {
                if self.sessions.busy == BusyMode::Interrupt {
                    self.runner.stop(&session_id, StopCause::Interrupted);
                }
                self.runner.notify(&session_id);
                Admission::Accepted {
                    inbound_id,
                    session_id,
                }
            }
        };
        Ok(Submission { admission, reply })
    }

    /// Creates a fresh session for `origin`, owned by `owner`, and points
    /// `route` at it.
    ///
    /// # Errors
    /// A database failure.
    pub async fn start_new_session(
        &self,
        route: &RouteKey,
        origin: &Origin,
        owner: Option<PrincipalId>,
    ) -> Result<String, StoreError> {
        let session = self.new_session(origin, owner);
        self.store.create_session(&session).await?;
        self.store.bind_route(route.as_str(), &session.id).await?;
        Ok(session.id)
    }

    /// Whether the sender may talk to the agent: no allowlist for its
    /// platform (global or its own), a local platform, the sender listed by
    /// id in its platform's list, the principal or one of its identities
    /// listed (as user or admin), or the principal approved through pairing.
    async fn is_allowed(
        &self,
        message: &InboundMessage,
        identity: &Identity,
    ) -> Result<bool, StoreError> {
        let platform = message.platform.as_str();
        let own_list = self
            .access
            .platforms
            .get(platform)
            .filter(|list| !list.is_empty());
        if (self.access.allowlist.is_empty() && own_list.is_none())
            || LOCAL_PLATFORMS.contains(&platform)
        {
            return Ok(true);
        }
        if own_list.is_some_and(|list| list.iter().any(|entry| entry == message.sender.id.as_str()))
        {
            return Ok(true);
        }
        for list in [
            Some(&self.access.allowlist),
            Some(&self.access.admins),
            own_list,
        ]
        .into_iter()
        .flatten()
        {
            if self.listed(list, identity.principal).await? {
                return Ok(true);
            }
        }
        self.store.principal_approved(identity.principal).await
    }

    /// Whether `entries` name the principal or one of its identities.
    async fn listed(&self, entries: &[String], principal: PrincipalId) -> Result<bool, StoreError> {
        if entries.is_empty() {
            return Ok(false);
        }
        let by_id = format!("principal:{principal}");
        if entries.contains(&by_id) {
            return Ok(true);
        }
        let identities = self.store.principal_identities(principal).await?;
        Ok(identities.iter().any(|(platform, user)| {
            entries
                .iter()
                .any(|entry| entry.split_once(':') == Some((platform.as_str(), user.as_str())))
        }))
    }

    /// What to do with an unknown direct-chat sender: its pairing request
    /// is created on first contact and answered with its code.
    async fn pairing(
        &self,
        message: &InboundMessage,
        identity: &Identity,
    ) -> Result<Gate, StoreError> {
        let code = LinkCode::generate();
        let applicant = Applicant {
            identity,
            platform: message.platform.as_str(),
            account: message.account.as_str(),
            user_id: message.sender.id.as_str(),
            display_name: message.sender.display_name.as_deref(),
        };
        let request = self
            .store
            .pairing_request(&applicant, code.as_str())
            .await?;
        Ok(match request.status {
            PairingStatus::Denied => {
                tracing::info!(principal_id = %identity.principal, "denied sender ignored");
                Gate::Ignored
            }
            // Approved earlier, then unlinked into a principal of its own:
            // the identity itself was approved.
            PairingStatus::Approved => Gate::Allowed,
            PairingStatus::Pending => {
                tracing::info!(principal_id = %identity.principal, "pairing requested");
                Gate::Reply(format!(
                    "Hello! I can only talk with people the owner approved. Your pairing code \
                     is {}: ask the owner to approve it. If you already talk with me on another \
                     account, send /link CODE here with a code from /link there.",
                    request.code
                ))
            }
        })
    }

    fn origin_of(&self, message: &InboundMessage) -> Origin {
        let per_user = message.chat_kind == ChatKind::Group
            && self.sessions.group_sessions == GroupSessions::PerUser;
        Origin {
            platform: message.platform.clone(),
            account: message.account.clone(),
            chat: message.chat.clone(),
            thread: message.thread.clone(),
            sender: per_user.then(|| message.sender.id.clone()),
        }
    }

    /// The route of a message: the principal's direct conversation for a
    /// direct chat when those are shared, the chat itself otherwise.
    fn route_of(
        &self,
        direct: bool,
        origin: &Origin,
        principal: PrincipalId,
        own_chat: bool,
    ) -> RouteKey {
        if direct && !own_chat && self.sessions.dm_sessions == DmSessions::Shared {
            RouteKey::principal_dm(principal)
        } else {
            origin.key()
        }
    }

    async fn session_for(
        &self,
        route: &RouteKey,
        origin: &Origin,
        owner: Option<PrincipalId>,
    ) -> Result<String, StoreError> {
        if let Some(session) = self.store.route(route.as_str()).await? {
            return Ok(session);
        }
        let session = self.new_session(origin, owner);
        let id = self
            .store
            .create_routed_session(route.as_str(), &session)
            .await?;
        if id == session.id {
            tracing::info!(session_id = %id, "session started");
        }
        Ok(id)
    }

    /// A new session's row: the system prompt is built here, once.
    fn new_session(&self, origin: &Origin, owner: Option<PrincipalId>) -> NewSession {
        let toolset = self.registry.toolset(&self.agent.tools);
        NewSession {
            id: uuid::Uuid::new_v4().to_string(),
            origin_key: origin.key().to_string(),
            platform: origin.platform.to_string(),
            account: origin.account.to_string(),
            chat_id: origin.chat.to_string(),
            thread_id: origin.thread.as_ref().map(ToString::to_string),
            system_prompt: build_system_prompt(&self.agent, toolset.specs()),
            model: self.model.clone(),
            toolset: toolset.names(),
            principal: owner,
        }
    }

    /// Writes a command's answer to the outbox and hands it out. A secret
    /// answer reaches the chat while the outbox keeps only its stored form.
    async fn answer_command(
        &self,
        inbound_id: i64,
        session_id: String,
        answer: impl Into<Answer>,
    ) -> Result<Admission, StoreError> {
        let Answer { text, stored } = answer.into();
        let mut row = self
            .store
            .finish_turn(&TurnEnd {
                inbound_id,
                final_message: None,
                reply: stored.as_deref().unwrap_or(&text),
                status: InboundStatus::Command,
                outcome: "command",
            })
            .await?;
        row.text.clone_from(&text);
        self.runner.deliver(&row, InboundStatus::Command).await;
        Ok(Admission::Handled {
            inbound_id,
            session_id,
            reply: text,
        })
    }

    /// `/retry`: hides the last exchange and turns the command message into
    /// a new task asking the same again. `None` when there is nothing to
    /// retry; an answer instead while a turn runs.
    async fn retry(
        &self,
        session_id: &str,
        inbound_id: i64,
    ) -> Result<Option<Admission>, StoreError> {
        if self.runner.is_running(session_id) {
            let text = BUSY.to_owned();
            return self
                .answer_command(inbound_id, session_id.to_owned(), text)
                .await
                .map(Some);
        }
        let Some(hidden) = self.store.hide_last_exchange(session_id).await? else {
            return Ok(None);
        };
        tracing::info!(
            session_id,
            entries = hidden.entries,
            "retrying the last message"
        );
        self.store
            .requeue_inbound(inbound_id, &hidden.user_text)
            .await?;
        self.runner.notify(session_id);
        Ok(Some(Admission::Accepted {
            inbound_id,
            session_id: session_id.to_owned(),
        }))
    }

    /// Runs a command; returns the session the chat is on afterwards and the
    /// answer.
    async fn run_command(
        &self,
        command: Command,
        context: &CommandContext<'_>,
    ) -> Result<(String, Answer), StoreError> {
        let session_id = context.session_id;
        let same = |text: String| (session_id.to_owned(), Answer::from(text));
        let identity_command = matches!(
            command,
            Command::Link(_)
                | Command::Unlink
                | Command::Sessions
                | Command::Resume(_)
                | Command::Usage
        );
        if identity_command && !context.direct {
            return Ok(same(DIRECT_ONLY.to_owned()));
        }
        Ok(match command {
            Command::Help => same(HELP.to_owned()),
            Command::New => {
                let owner = context.direct.then_some(context.identity.principal);
                let id = self
                    .start_new_session(context.route, context.origin, owner)
                    .await?;
                let text = format!("Started a new conversation ({id}).");
                (id, text.into())
            }
            Command::Status => {
                let budget = match self.runner.budget_left(session_id) {
                    Some(left) => format!("a task is running; {left} model calls left"),
                    None => format!(
                        "idle; each message may use {} model calls",
                        self.agent.max_iterations
                    ),
                };
                let text = match self.store.session(session_id).await? {
                    Some(session) => format!(
                        "Conversation {}\nModel: {}\nBudget: {budget}\nTokens: {} in ({} from \
                         cache), {} out",
                        session.id,
                        session.model,
                        session.totals.input_tokens,
                        session.totals.cache_read_tokens,
                        session.totals.output_tokens
                    ),
                    None => "No conversation yet.".to_owned(),
                };
                same(text)
            }
            Command::Compact => same("Compaction is queued.".to_owned()),
            Command::Stop => {
                let text = if self.runner.stop(session_id, StopCause::User) {
                    "Stopping the running task."
                } else {
                    "Nothing is running."
                };
                same(text.to_owned())
            }
            Command::Link(None) => (
                session_id.to_owned(),
                self.new_link_code(&context.identity).await?,
            ),
            Command::Link(Some(code)) => answered(self.redeem(context, &code).await?),
            Command::Unlink => match self.store.unlink_identity(&context.identity).await? {
                None => same("This account is not linked to any other.".to_owned()),
                Some(fresh) => {
                    tracing::info!(
                        from = %context.identity.principal,
                        to = %fresh,
                        "identity unlinked"
                    );
                    let route = self.route_of(true, context.origin, fresh, context.own_chat);
                    let id = self
                        .session_for(&route, context.origin, Some(fresh))
                        .await?;
                    let text = "Unlinked: this account has its own conversations again.";
                    (id, text.to_owned().into())
                }
            },
            Command::Sessions => {
                let sessions = self
                    .store
                    .principal_sessions(context.identity.principal, SESSIONS_LISTED)
                    .await?;
                same(list_sessions(&sessions, session_id, now_ms()))
            }
            Command::Resume(None) => same("Usage: /resume ID (see /sessions).".to_owned()),
            Command::Resume(Some(id)) => answered(self.resume(context, &id).await?),
            Command::Title(None) => {
                let text = match self.store.session(session_id).await?.and_then(|s| s.title) {
                    Some(title) => format!("Title: {title}\nChange it with /title TEXT."),
                    None => "No title yet. Set one with /title TEXT.".to_owned(),
                };
                same(text)
            }
            Command::Title(Some(title)) => {
                let title: String = title.chars().take(TITLE_MAX_CHARS).collect();
                self.store.set_session_title(session_id, &title).await?;
                same(format!("Title set: {title}"))
            }
            Command::Model(None) => {
                let current = self
                    .store
                    .session(session_id)
                    .await?
                    .map_or_else(|| self.model.clone(), |s| s.model);
                same(format!(
                    "Model: {current}\nAvailable: {}\nSwitch with /model NAME.",
                    self.models.join(", ")
                ))
            }
            Command::Model(Some(name)) => {
                if self.models.contains(&name) {
                    self.store.set_session_model(session_id, &name).await?;
                    tracing::info!(session_id, model = %name, "session model switched");
                    same(format!("This conversation now uses {name}."))
                } else {
                    same(format!(
                        "Unknown model. Available: {}",
                        self.models.join(", ")
                    ))
                }
            }
            Command::Usage => {
                let (summary, cost) = self
                    .store
                    .principal_usage_since(context.identity.principal, start_of_today_ms())
                    .await?;
                same(usage_text(summary, cost, self.daily_usd))
            }
            Command::Undo => {
                if self.runner.is_running(session_id) {
                    same(BUSY.to_owned())
                } else {
                    match self.store.hide_last_exchange(session_id).await? {
                        None => same("Nothing to undo.".to_owned()),
                        Some(hidden) => {
                            tracing::info!(
                                session_id,
                                entries = hidden.entries,
                                "last exchange hidden"
                            );
                            same(
                                "Removed your last message and its answer from this \
                                 conversation (they stay in the stored history)."
                                    .to_owned(),
                            )
                        }
                    }
                }
            }
            Command::Approve(_) | Command::Deny(_)
                if !context.direct
                    || !self
                        .listed(&self.access.admins, context.identity.principal)
                        .await? =>
            {
                same("Only an admin can answer pairing requests, in a direct chat.".to_owned())
            }
            Command::Approve(None) | Command::Deny(None) => {
                same("Usage: /approve CODE or /deny CODE.".to_owned())
            }
            Command::Approve(Some(code)) => same(self.decide(&code, true).await?),
            Command::Deny(Some(code)) => same(self.decide(&code, false).await?),
            // Handled in `submit`: it becomes a queued task.
            Command::Retry => same("Nothing to retry yet.".to_owned()),
            Command::Unknown(name) => same(format!("Unknown command /{name}.\n\n{HELP}")),
        })
    }

    /// `/approve CODE`, `/deny CODE`.
    async fn decide(&self, code: &str, approve: bool) -> Result<String, StoreError> {
        let code = code.trim().to_ascii_uppercase();
        Ok(match self.store.decide_pairing(&code, approve).await? {
            Some(request) => {
                tracing::info!(approve, platform = %request.platform, "pairing decided");
                format!(
                    "{} {}:{}.",
                    if approve { "Approved" } else { "Denied" },
                    request.platform,
                    request.user_id
                )
            }
            None => "No pairing request awaits a decision with that code.".to_owned(),
        })
    }

    /// `/link`: a fresh one-time code for the sender's principal. The code
    /// is a credential: the answer's stored form (the outbox row) leaves it
    /// out, and the store keeps only its hash.
    async fn new_link_code(&self, identity: &Identity) -> Result<Answer, StoreError> {
        let code = LinkCode::generate();
        let ttl_ms = i64::try_from(CODE_TTL.as_millis()).unwrap_or(i64::MAX);
        self.store
            .create_link_code(identity, code.as_str(), now_ms().saturating_add(ttl_ms))
            .await?;
        tracing::info!(principal_id = %identity.principal, "link code issued");
        Ok(Answer {
            text: format!(
                "Your link code: {}\nWithin {} minutes, send /link {} from your other account, \
                 in a direct chat with me, to share your conversations there. It works once; \
                 keep it private.",
                code.as_str(),
                CODE_TTL.as_secs() / 60,
                code.as_str()
            ),
            stored: Some(LINK_CODE_STORED.to_owned()),
        })
    }

    /// `/link CODE`: joins the sender's identity to the code owner.
    async fn redeem(
        &self,
        context: &CommandContext<'_>,
        code: &str,
    ) -> Result<(String, String), StoreError> {
        let same = |text: &str| (context.session_id.to_owned(), text.to_owned());
        let window_ms = i64::try_from(FAILURE_WINDOW.as_millis()).unwrap_or(i64::MAX);
        let failures = self
            .store
            .link_failures_since(&context.identity, now_ms().saturating_sub(window_ms))
            .await?;
        if failures >= MAX_FAILURES {
            tracing::warn!(principal_id = %context.identity.principal, "link attempts rate-limited");
            return Ok(same(
                "Too many wrong codes. Please wait a few minutes and try again.",
            ));
        }
        let Ok(code) = LinkCode::parse(code) else {
            return Ok(same(
                "That is not a link code: it has 8 letters and digits. Get one with /link.",
            ));
        };
        match self
            .store
            .redeem_link_code(&context.identity, code.as_str())
            .await?
        {
            Redemption::Invalid => {
                tracing::info!(principal_id = %context.identity.principal, "link code refused");
                Ok(same(
                    "That code is wrong, expired or already used. Get a new one with /link.",
                ))
            }
            Redemption::AlreadyLinked => Ok(same("This account is already linked to that one.")),
            Redemption::Linked { from, to } => {
                tracing::info!(from = %from, to = %to, "identity linked");
                let route = self.route_of(true, context.origin, to, context.own_chat);
                let id = self.session_for(&route, context.origin, Some(to)).await?;
                Ok((
                    id,
                    "Linked: this account now shares its conversations with the account that \
                     made the code."
                        .to_owned(),
                ))
            }
        }
    }

    /// `/resume ID`: points this chat at one of the sender's sessions (a
    /// full id or an unambiguous prefix of one).
    async fn resume(
        &self,
        context: &CommandContext<'_>,
        id: &str,
    ) -> Result<(String, String), StoreError> {
        let same = |text: String| (context.session_id.to_owned(), text);
        let prefix = id.trim().to_ascii_lowercase();
        if prefix.len() < 4 || !prefix.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Ok(same(format!(
                "{id} is not a conversation id; /sessions lists yours."
            )));
        }
        let matches = self
            .store
            .principal_sessions_by_prefix(context.identity.principal, &prefix)
            .await?;
        match matches.as_slice() {
            [session] => {
                self.store
                    .bind_route(context.route.as_str(), session)
                    .await?;
                tracing::info!(session_id = %session, "chat switched to a session");
                let title = match self.store.session(session).await?.and_then(|s| s.title) {
                    Some(title) => format!(" ({title})"),
                    None => String::new(),
                };
                Ok((
                    session.clone(),
                    format!("Resumed conversation {}{title}.", short_id(session)),
                ))
            }
            [] => Ok(same(format!(
                "No conversation of yours starts with {prefix}; /sessions lists them."
            ))),
            _ => Ok(same(format!(
                "More than one conversation starts with {prefix}; give more of the id."
            ))),
        }
    }
}

/// A command's answer. `stored`, when set, is what the outbox keeps instead
/// of `text`, which holds a secret (a link code): the chat gets `text` now,
/// and a delivery retried from the outbox sends `stored`.
struct Answer {
    text: String,
    stored: Option<String>,
}

impl From<String> for Answer {
    fn from(text: String) -> Self {
        Self { text, stored: None }
    }
}

/// A `(session, text)` answer as a `(session, Answer)` one.
fn answered((session_id, text): (String, String)) -> (String, Answer) {
    (session_id, text.into())
}

/// The outbox's copy of a `/link` answer.
const LINK_CODE_STORED: &str = "A link code was sent to this chat. Codes are not stored, so if it \
    did not arrive, send /link for a new one.";
/// The text recorded for a `/link CODE` message in place of the code.
const LINK_REDEEM_STORED: &str = "/link (code not stored)";

/// The answer to `/undo` and `/retry` while a turn runs.
const BUSY: &str = "A reply is still being written; wait for it (or /stop it) first.";

fn short_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// The `/sessions` answer.
fn list_sessions(sessions: &[SessionSummary], current: &str, now: i64) -> String {
    if sessions.is_empty() {
        return "No conversations yet.".to_owned();
    }
    let mut text = "Your recent conversations:".to_owned();
    for session in sessions {
        let label = session
            .title
            .clone()
            .or_else(|| session.first_text.as_deref().map(first_words))
            .unwrap_or_else(|| "(empty)".to_owned());
        let marker = if session.id == current {
            " (this chat)"
        } else {
            ""
        };
        text.push_str(&format!(
            "\n{}  {label}  [{}, {}]{marker}",
            short_id(&session.id),
            session.platform,
            ago(now.saturating_sub(session.updated_at))
        ));
    }
    text.push_str("\nContinue one here with /resume ID.");
    text
}

/// Up to six words of a message, on one line.
fn first_words(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut label = words.iter().take(6).copied().collect::<Vec<_>>().join(" ");
    if words.len() > 6 {
        label.push('…');
    }
    label
}

/// A duration in milliseconds as "5 min ago".
fn ago(ms: i64) -> String {
    let minutes = ms / 60_000;
    match minutes {
        i64::MIN..=0 => "just now".to_owned(),
        1..=59 => format!("{minutes} min ago"),
        60..=1439 => format!("{} h ago", minutes / 60),
        _ => format!("{} days ago", minutes / 1440),
    }
}

/// The `/usage` answer.
fn usage_text(summary: crate::store::UsageSummary, cost: Option<i64>, daily_usd: f64) -> String {
    let usage = summary.usage;
    // Input tokens include cached ones (see `Usage`).
    let cached_percent = usage
        .cache_read_tokens
        .saturating_mul(100)
        .checked_div(usage.input_tokens)
        .unwrap_or(0);
    #[allow(clippy::cast_precision_loss)] // far below 2^52 nano-dollars
    let cost = match cost {
        Some(nanos) => format!(
            "about ${:.4} (estimated from the price table)",
            nanos as f64 / 1e9
        ),
        None => "cost unknown (no prices configured for these models)".to_owned(),
    };
    let limit = if daily_usd > 0.0 {
        format!(" Daily limit: ${daily_usd:.2}.")
    } else {
        String::new()
    };
    format!(
        "Today (UTC): {} model calls, {} input tokens ({cached_percent}% read from the \
         provider cache), {} output tokens, {cost}.{limit}",
        summary.calls, usage.input_tokens, usage.output_tokens
    )
}

/// The inbound record of a message. A `/link CODE` is recorded without its
/// code: a live code is a credential until redeemed (and stays one when the
/// redemption is refused, e.g. rate-limited or sent in a group).
fn new_inbound(
    message: &InboundMessage,
    session_id: &str,
    status: InboundStatus,
    command: Option<&Command>,
    principal: PrincipalId,
) -> NewInbound {
    let text = match command {
        Some(Command::Link(Some(_))) => LINK_REDEEM_STORED.to_owned(),
        _ => message.text.clone(),
    };
    NewInbound {
        platform: message.platform.to_string(),
        account: message.account.to_string(),
        event_id: message.event_id.to_string(),
        session_id: session_id.to_owned(),
        chat_id: message.chat.to_string(),
        thread_id: message.thread.as_ref().map(ToString::to_string),
        message_id: message.message_id.clone(),
        sender_id: message.sender.id.to_string(),
        sender_name: message.sender.display_name.clone(),
        text,
        status,
        principal_id: Some(principal.get()),
    }
}

#[async_trait]
impl InboundSink for SessionService {
    async fn submit(&self, message: InboundMessage) -> Result<Submitted, SubmitError> {
        match Self::submit(self, message, SubmitOptions::default()).await {
            Ok(Submission { admission, .. }) => Ok(match admission {
                Admission::Accepted { .. } => Submitted::Accepted,
                Admission::Duplicate => Submitted::Duplicate,
                Admission::Ignored => Submitted::Ignored,
                Admission::Handled { .. } => Submitted::Handled,
            }),
            Err(ServiceError::UnknownSession(id)) => {
                Err(SubmitError::Rejected(format!("unknown session {id}")))
            }
            Err(ServiceError::Store(err)) => Err(SubmitError::Unavailable(err.to_string())),
        }
    }
}
