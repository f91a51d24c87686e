//! The session service: where every platform's messages enter the core.
//!
//! It drops what is not for the agent (bots, group messages that do not
//! address the bot), records each message once (a redelivered event is a
//! duplicate), answers commands, resolves the chat to its session (creating
//! the session, with its system prompt built once, on first contact), and
//! queues the message for the session's runner.

use std::sync::Arc;

use async_trait::async_trait;
use switchboard_contract::{ChatKind, InboundMessage, InboundSink, SubmitError, Submitted};
use tokio::sync::oneshot;

use super::commands::{Command, HELP};
use super::key::{Origin, RouteKey};
use super::runner::{Runner, TurnReply};
use super::turn::StopCause;
use crate::agent::prompt::build_system_prompt;
use crate::config::{AgentSettings, BusyMode, GroupSessions, SessionSettings};
use crate::store::{InboundStatus, NewInbound, NewSession, Store, StoreError, TurnEnd};
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
    sessions: SessionSettings,
}

impl SessionService {
    pub fn new(
        store: Store,
        runner: Runner,
        registry: Arc<ToolRegistry>,
        agent: AgentSettings,
        model: String,
        sessions: SessionSettings,
    ) -> Self {
        Self {
            store,
            runner,
            registry,
            agent,
            model,
            sessions,
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
    /// An unknown session in `options`, or a database failure.
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
        let origin = self.origin_of(&message);
        let route = origin.key();
        if let Some(session) = &options.session {
            if self.store.session(session).await?.is_none() {
                return Err(ServiceError::UnknownSession(session.clone()));
            }
            self.store.bind_route(route.as_str(), session).await?;
        }
        let session_id = self.session_for(&route, &origin).await?;
        // `/compact` needs a model call, so it waits its turn in the queue.
        let command = Command::parse(&message.text, None).filter(|c| *c != Command::Compact);
        let status = if command.is_some() {
            InboundStatus::Command
        } else {
            InboundStatus::Pending
        };
        let Some(inbound_id) = self
            .store
            .record_inbound(&new_inbound(&message, &session_id, status))
            .await?
        else {
            tracing::debug!(event_id = %message.event_id, "duplicate event dropped");
            return Ok(Submission {
                admission: Admission::Duplicate,
                reply: None,
            });
        };
        let reply = options.wait.then(|| self.runner.wait_for(inbound_id));
        let admission = match command {
            Some(command) => {
                let (session_id, text) = self
                    .run_command(command, &route, &origin, &session_id)
                    .await?;
                let row = self
                    .store
                    .finish_turn(&TurnEnd {
                        inbound_id,
                        final_message: None,
                        reply: &text,
                        status: InboundStatus::Command,
                        outcome: "command",
                    })
                    .await?;
                self.runner.deliver(&row, InboundStatus::Command).await;
                Admission::Handled {
                    inbound_id,
                    session_id,
                    reply: text,
                }
            }
            None => {
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

    /// Creates a fresh session for `origin` and points the chat at it.
    ///
    /// # Errors
    /// A database failure.
    pub async fn start_new_session(&self, origin: &Origin) -> Result<String, StoreError> {
        let session = self.new_session(origin);
        self.store.create_session(&session).await?;
        self.store
            .bind_route(origin.key().as_str(), &session.id)
            .await?;
        Ok(session.id)
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

    async fn session_for(&self, route: &RouteKey, origin: &Origin) -> Result<String, StoreError> {
        if let Some(session) = self.store.route(route.as_str()).await? {
            return Ok(session);
        }
        let session = self.new_session(origin);
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
    fn new_session(&self, origin: &Origin) -> NewSession {
        let toolset = self
            .registry
            .toolset(&self.agent.tools)
            .unwrap_or_else(|unknown| {
                tracing::warn!(?unknown, "configured tools that do not exist are left out");
                let known: Vec<&String> = self
                    .agent
                    .tools
                    .iter()
                    .filter(|name| self.registry.get(name).is_some())
                    .collect();
                self.registry.toolset(&known).unwrap_or_default()
            });
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
        }
    }

    /// Runs a command; returns the session the chat is on afterwards and the
    /// reply.
    async fn run_command(
        &self,
        command: Command,
        route: &RouteKey,
        origin: &Origin,
        session_id: &str,
    ) -> Result<(String, String), StoreError> {
        debug_assert_eq!(route, &origin.key());
        Ok(match command {
            Command::Help => (session_id.to_owned(), HELP.to_owned()),
            Command::New => {
                let id = self.start_new_session(origin).await?;
                (id.clone(), format!("Started a new conversation ({id})."))
            }
            Command::Status => {
                let text = match self.store.session(session_id).await? {
                    Some(session) => format!(
                        "Conversation {}\nModel: {}\nTokens: {} in ({} from cache), {} out",
                        session.id,
                        session.model,
                        session.totals.input_tokens,
                        session.totals.cache_read_tokens,
                        session.totals.output_tokens
                    ),
                    None => "No conversation yet.".to_owned(),
                };
                (session_id.to_owned(), text)
            }
            Command::Compact => (session_id.to_owned(), "Compaction is queued.".to_owned()),
            Command::Stop => {
                let text = if self.runner.stop(session_id, StopCause::User) {
                    "Stopping the running task."
                } else {
                    "Nothing is running."
                };
                (session_id.to_owned(), text.to_owned())
            }
            Command::Unknown(name) => (
                session_id.to_owned(),
                format!("Unknown command /{name}.\n\n{HELP}"),
            ),
        })
    }
}

fn new_inbound(message: &InboundMessage, session_id: &str, status: InboundStatus) -> NewInbound {
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
        text: message.text.clone(),
        status,
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
