//! Answering commands: one match over [`Command`], and a handler for each
//! command that needs more than a line.
//!
//! Identity commands (`/link`, `/unlink`, `/sessions`, `/resume`, `/usage`,
//! `/memory`) answer in direct chats only: group chats never reach a
//! principal's own sessions or facts.

use super::Command;
use crate::domain::{InboundId, SessionId, StopCause, now_ms, start_of_today_ms};
use crate::session::access::{Access, Decision};
use crate::session::approvals::{Approvals, Decider, Refused, Verdict};
use crate::session::link::{CODE_TTL, FAILURE_WINDOW, LinkCode, MAX_FAILURES};
use crate::session::notices;
use crate::session::routing::{Place, Routing};
use crate::session::runner::Runner;
use crate::session::settings::{DmSessions, ServiceSettings};
use crate::session::texts;
use crate::store::{Identity, Redemption, Store, StoreError};
use crate::tools::settings::MemorySettings;
use crate::tools::tasks::TaskTools;

/// What commands act on: the service's parts, borrowed for one message.
pub struct Commands<'a> {
    pub store: &'a Store,
    pub runner: &'a Runner,
    pub access: &'a Access,
    pub routing: &'a Routing,
    pub settings: &'a CommandSettings,
    /// Tasks: `/tasks`, `/timezone`, `/stop ID`.
    pub tasks: &'a TaskTools,
}

/// The settings commands read.
#[derive(Debug, Clone)]
pub struct CommandSettings {
    /// The model new sessions start with (`llm.model`).
    pub model: String,
    /// Models `/model` may switch to: `llm.model` and `llm.extra_models`.
    pub models: Vec<String>,
    /// Model calls each message may use, for `/status`.
    pub max_iterations: u32,
    /// A principal's daily spend cap in dollars (0: none), for `/usage`.
    pub daily_usd: f64,
    /// How direct chats map to sessions, which `/link` explains.
    pub dm_sessions: DmSessions,
    /// Whether `/memory` works, and the limits it shows.
    pub memory: MemorySettings,
}

/// Who sent a command, from where, and the session the chat is on.
pub struct Context<'a> {
    /// The command's own recorded message.
    pub inbound_id: InboundId,
    pub identity: Identity,
    pub place: &'a Place,
    /// The message is routed by its chat alone (see `SubmitOptions`).
    pub own_chat: bool,
}

/// What became of a command.
#[derive(Debug)]
pub enum Dispatched {
    /// Answered; the chat is on `session_id` afterwards.
    Answer {
        session_id: SessionId,
        answer: Answer,
    },
    /// The message runs as a task of its session, like ordinary text
    /// (`/compact`, which needs a model call).
    Queue,
    /// `/retry`: the message became a task asking the last question again.
    Retried,
}

/// A command's answer. `stored`, when set, is what the outbox keeps instead
/// of `text`, which holds a secret (a link code): the chat gets `text` now,
/// and a delivery retried from the outbox sends `stored`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub text: String,
    pub stored: Option<String>,
}

impl From<String> for Answer {
    fn from(text: String) -> Self {
        Self { text, stored: None }
    }
}

impl From<&str> for Answer {
    fn from(text: &str) -> Self {
        text.to_owned().into()
    }
}

/// Sessions `/sessions` lists.
const SESSIONS_LISTED: i64 = 10;
/// Longest title kept, in characters.
const TITLE_MAX_CHARS: usize = 200;

impl CommandSettings {
    /// Reads the models, `agent.max_iterations`, the daily spend cap,
    /// `sessions.dm_sessions` and `memory`.
    pub fn new(settings: &ServiceSettings) -> Self {
        let model = settings.model.clone();
        let mut models = vec![model.clone()];
        models.extend(
            settings
                .extra_models
                .iter()
                .filter(|m| **m != model)
                .cloned(),
        );
        Self {
            model,
            models,
            max_iterations: settings.agent.max_iterations.into(),
            daily_usd: settings.daily_usd,
            dm_sessions: settings.sessions.dm_sessions,
            memory: settings.memory.clone(),
        }
    }
}

impl Commands<'_> {
    /// Runs a command.
    ///
    /// # Errors
    /// A database failure.
    pub async fn run(
        &self,
        command: Command,
        context: &Context<'_>,
    ) -> Result<Dispatched, StoreError> {
        let session_id = &context.place.session_id;
        let identity_command = matches!(
            command,
            Command::Link(_)
                | Command::Unlink
                | Command::Sessions
                | Command::Resume(_)
                | Command::Usage
                | Command::Memory(_)
                | Command::Timezone(_)
        );
        if identity_command && !context.place.direct {
            return Ok(stay(context, texts::DIRECT_ONLY));
        }
        Ok(match command {
            Command::Help => stay(context, texts::HELP),
            Command::New => self.new_session(context).await?,
            Command::Status => {
                let running = self
                    .runner
                    .running(session_id)
                    .await?
                    // A task that has not opened its purse yet has it all.
                    .map(|running| running.budget_left.unwrap_or(self.settings.max_iterations));
                let session = self.store.sessions().get(session_id).await?;
                let text = texts::status(session.as_ref(), running, self.settings.max_iterations);
                stay(context, text)
            }
            Command::Stop(Some(id)) => stay(context, self.stop_task(context, &id).await?),
            Command::Tasks(action) => stay(context, self.tasks(context, action.as_deref()).await?),
            Command::Timezone(zone) => {
                stay(context, self.timezone(context, zone.as_deref()).await?)
            }
            Command::Stop(None) => {
                let label = format!("principal:{}", context.identity.principal.get());
                let parked = self
                    .store
                    .approvals()
                    .stop_waiting(session_id, &label)
                    .await?;
                if parked {
                    self.runner.notify(session_id);
                }
                let running = self.runner.stop(session_id, StopCause::User).await?;
                stay(
                    context,
                    if parked || running {
                        texts::STOPPING
                    } else {
                        texts::NOTHING_RUNNING
                    },
                )
            }
            Command::Allow(argument) => {
                let chat = argument
                    .as_deref()
                    .is_some_and(|a| a.split_whitespace().nth(1) == Some("chat"));
                let answer = if chat {
                    notices::Answer::AllowSession
                } else {
                    notices::Answer::Allow
                };
                stay(
                    context,
                    self.decide_approval(context, argument.as_deref(), answer)
                        .await?,
                )
            }
            Command::Reject(argument) => stay(
                context,
                self.decide_approval(context, argument.as_deref(), notices::Answer::Deny)
                    .await?,
            ),
            Command::Compact => Dispatched::Queue,
            Command::Retry => self.retry(context).await?,
            Command::Undo => self.undo(context).await?,
            Command::Link(None) => stay(context, self.new_link_code(&context.identity).await?),
            Command::Link(Some(code)) => self.redeem(context, &code).await?,
            Command::Unlink => self.unlink(context).await?,
            Command::Sessions => {
                let sessions = self
                    .store
                    .principals()
                    .sessions(context.identity.principal, SESSIONS_LISTED)
                    .await?;
                stay(context, texts::sessions(&sessions, session_id, now_ms()))
            }
            Command::Resume(None) => stay(context, texts::RESUME_USAGE),
            Command::Resume(Some(id)) => self.resume(context, &id).await?,
            Command::Title(None) => {
                let title = self
                    .store
                    .sessions()
                    .get(session_id)
                    .await?
                    .and_then(|s| s.title);
                stay(
                    context,
                    title.map_or_else(|| texts::NO_TITLE.to_owned(), |t| texts::title(&t)),
                )
            }
            Command::Title(Some(title)) => {
                let title: String = title.chars().take(TITLE_MAX_CHARS).collect();
                self.store.sessions().set_title(session_id, &title).await?;
                stay(context, texts::title_set(&title))
            }
            Command::Model(name) => self.model(context, name).await?,
            Command::Usage => {
                let (summary, cost) = self
                    .store
                    .principals()
                    .usage_since(context.identity.principal, start_of_today_ms())
                    .await?;
                stay(
                    context,
                    texts::usage(&summary, cost, self.settings.daily_usd),
                )
            }
            Command::Memory(action) => {
                stay(context, self.memory(context, action.as_deref()).await?)
            }
            Command::Approve(code) => self.decide(context, code, Decision::Approve).await?,
            Command::Deny(code) => self.decide(context, code, Decision::Deny).await?,
            Command::Unknown(name) => stay(context, texts::unknown_command(&name)),
        })
    }

    /// `/new`: a fresh session for this chat.
    async fn new_session(&self, context: &Context<'_>) -> Result<Dispatched, StoreError> {
        let place = context.place;
        let owner = place.direct.then_some(context.identity.principal);
        let id = self
            .routing
            .start_new_session(&place.route, &place.origin, owner)
            .await?;
        let text = texts::new_conversation(&id);
        Ok(moved(id, text))
    }

    /// `/retry`: hides the last exchange and turns the command message into
    /// a new task asking the same again; an answer instead while a turn
    /// runs or when there is nothing to retry.
    async fn retry(&self, context: &Context<'_>) -> Result<Dispatched, StoreError> {
        let session_id = &context.place.session_id;
        if self.runner.running(session_id).await?.is_some() {
            return Ok(stay(context, texts::BUSY));
        }
        let Some(hidden) = self
            .store
            .transcript()
            .hide_last_exchange(session_id)
            .await?
        else {
            return Ok(stay(context, texts::NOTHING_TO_RETRY));
        };
        tracing::info!(
            session_id = session_id.as_str(),
            entries = hidden.entries,
            "retrying the last message"
        );
        self.store
            .inbound()
            .requeue(context.inbound_id, &hidden.user_text)
            .await?;
        Ok(Dispatched::Retried)
    }

    /// `/undo`: hides the last exchange from what the model sees.
    async fn undo(&self, context: &Context<'_>) -> Result<Dispatched, StoreError> {
        let session_id = &context.place.session_id;
        if self.runner.running(session_id).await?.is_some() {
            return Ok(stay(context, texts::BUSY));
        }
        Ok(
            match self
                .store
                .transcript()
                .hide_last_exchange(session_id)
                .await?
            {
                None => stay(context, texts::NOTHING_TO_UNDO),
                Some(hidden) => {
                    tracing::info!(
                        session_id = session_id.as_str(),
                        entries = hidden.entries,
                        "last exchange hidden"
                    );
                    stay(context, texts::UNDONE)
                }
            },
        )
    }

    /// `/model`: shows the session's model and the choice; `/model NAME`
    /// switches to one of them.
    async fn model(
        &self,
        context: &Context<'_>,
        name: Option<String>,
    ) -> Result<Dispatched, StoreError> {
        let session_id = &context.place.session_id;
        let models = &self.settings.models;
        let Some(name) = name else {
            let current = self
                .store
                .sessions()
                .get(session_id)
                .await?
                .map_or_else(|| self.settings.model.clone(), |s| s.model);
            return Ok(stay(context, texts::model(&current, models)));
        };
        if !models.contains(&name) {
            return Ok(stay(context, texts::unknown_model(models)));
        }
        self.store.sessions().set_model(session_id, &name).await?;
        tracing::info!(session_id = session_id.as_str(), model = %name, "session model switched");
        Ok(stay(context, texts::model_switched(&name)))
    }

    /// `/approve CODE`, `/deny CODE`: admins only, in a direct chat.
    async fn decide(
        &self,
        context: &Context<'_>,
        code: Option<String>,
        decision: Decision,
    ) -> Result<Dispatched, StoreError> {
        if !context.place.direct || !self.access.is_admin(context.identity.principal).await? {
            return Ok(stay(context, texts::ADMINS_ONLY));
        }
        Ok(match code {
            None => stay(context, texts::DECIDE_USAGE),
            Some(code) => stay(context, self.access.decide(&code, decision).await?),
        })
    }

    /// `/memory`: the sender's facts, numbered oldest first; `/memory
    /// forget N` removes the N-th of that list, `/memory clear` all of them.
    /// Sessions already running keep the facts they started with.
    async fn memory(
        &self,
        context: &Context<'_>,
        action: Option<&str>,
    ) -> Result<String, StoreError> {
        if !self.settings.memory.enabled {
            return Ok(texts::MEMORY_OFF.to_owned());
        }
        let principal = context.identity.principal;
        let words: Vec<&str> = action.unwrap_or_default().split_whitespace().collect();
        Ok(match words.as_slice() {
            [] | ["list"] => {
                let facts = self.store.memories().list(principal).await?;
                texts::memory_list(&facts, self.settings.memory.max_entries.get())
            }
            ["forget", number] => {
                let facts = self.store.memories().list(principal).await?;
                let fact = number
                    .parse::<usize>()
                    .ok()
                    .and_then(|n| n.checked_sub(1))
                    .and_then(|index| facts.get(index));
                match fact {
                    Some(fact) if self.store.memories().forget(principal, fact.id).await? => {
                        tracing::info!(principal_id = %principal, fact_id = fact.id, "fact removed by /memory");
                        texts::memory_forgotten(&fact.text)
                    }
                    _ => texts::no_such_fact(number, facts.len()),
                }
            }
            ["clear"] => {
                let removed = self.store.memories().clear(principal).await?;
                tracing::info!(principal_id = %principal, removed, "memory cleared by /memory");
                texts::memory_cleared(removed)
            }
            _ => texts::MEMORY_USAGE.to_owned(),
        })
    }

    /// `/link`: a fresh one-time code for the sender's principal. The code
    /// is a credential: the answer's stored form (the outbox row) leaves it
    /// out, and the store keeps only its hash.
    async fn new_link_code(&self, identity: &Identity) -> Result<Answer, StoreError> {
        let code = LinkCode::generate();
        let ttl_ms = i64::try_from(CODE_TTL.as_millis()).unwrap_or(i64::MAX);
        self.store
            .principals()
            .create_link_code(identity, code.as_str(), now_ms().saturating_add(ttl_ms))
            .await?;
        tracing::info!(principal_id = %identity.principal, "link code issued");
        Ok(Answer {
            text: texts::link_code(code.as_str(), self.settings.dm_sessions),
            stored: Some(texts::LINK_CODE_STORED.to_owned()),
        })
    }

    /// `/link CODE`: joins the sender's identity to the code owner.
    async fn redeem(&self, context: &Context<'_>, code: &str) -> Result<Dispatched, StoreError> {
        let identity = &context.identity;
        let window_ms = i64::try_from(FAILURE_WINDOW.as_millis()).unwrap_or(i64::MAX);
        let failures = self
            .store
            .principals()
            .link_failures_since(identity, now_ms().saturating_sub(window_ms))
            .await?;
        if failures >= MAX_FAILURES {
            tracing::warn!(principal_id = %identity.principal, "link attempts rate-limited");
            return Ok(stay(context, texts::LINK_RATE_LIMITED));
        }
        let Ok(code) = LinkCode::parse(code) else {
            return Ok(stay(context, texts::NOT_A_LINK_CODE));
        };
        Ok(
            match self
                .store
                .principals()
                .redeem_link_code(identity, code.as_str())
                .await?
            {
                Redemption::Invalid => {
                    tracing::info!(principal_id = %identity.principal, "link code refused");
                    stay(context, texts::LINK_CODE_REFUSED)
                }
                Redemption::AlreadyLinked => stay(context, texts::ALREADY_LINKED),
                Redemption::Linked { from, to } => {
                    tracing::info!(from = %from, to = %to, "identity linked");
                    let id = self
                        .routing
                        .direct_session(&context.place.origin, to, context.own_chat)
                        .await?;
                    moved(id, texts::linked(self.settings.dm_sessions))
                }
            },
        )
    }

    /// `/unlink`: detaches the sender's identity into a fresh principal.
    async fn unlink(&self, context: &Context<'_>) -> Result<Dispatched, StoreError> {
        let Some(fresh) = self
            .store
            .principals()
            .unlink_identity(&context.identity)
            .await?
        else {
            return Ok(stay(context, texts::NOT_LINKED));
        };
        let cancelled = self
            .store
            .tasks()
            .cancel_made_by(context.identity.id, Some(context.identity.principal))
            .await?;
        tracing::info!(
            from = %context.identity.principal,
            to = %fresh,
            cancelled,
            "identity unlinked; the tasks it made are cancelled"
        );
        let id = self
            .routing
            .direct_session(&context.place.origin, fresh, context.own_chat)
            .await?;
        Ok(moved(id, texts::UNLINKED))
    }

    /// `/resume ID`: points this chat at one of the sender's sessions (a
    /// full id or an unambiguous prefix of one).
    async fn resume(&self, context: &Context<'_>, id: &str) -> Result<Dispatched, StoreError> {
        let prefix = id.trim().to_ascii_lowercase();
        if prefix.len() < 4 || !prefix.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Ok(stay(context, texts::not_a_session_id(id)));
        }
        let matches = self
            .store
            .principals()
            .sessions_by_prefix(context.identity.principal, &prefix)
            .await?;
        Ok(match matches.as_slice() {
            [session] => {
                self.store
                    .sessions()
                    .bind_route(context.place.route.as_str(), session)
                    .await?;
                tracing::info!(session_id = %session, "chat switched to a session");
                let title = self
                    .store
                    .sessions()
                    .get(session)
                    .await?
                    .and_then(|s| s.title);
                let text = texts::resumed(session, title.as_deref());
                moved(session.clone(), text)
            }
            [] => stay(context, texts::no_session_with_prefix(&prefix)),
            _ => stay(context, texts::ambiguous_prefix(&prefix)),
        })
    }
}

/// An answer that leaves the chat on its session.
fn stay(context: &Context<'_>, answer: impl Into<Answer>) -> Dispatched {
    moved(context.place.session_id.clone(), answer)
}

/// An answer after which the chat is on `session_id`.
fn moved(session_id: SessionId, answer: impl Into<Answer>) -> Dispatched {
    Dispatched::Answer {
        session_id,
        answer: answer.into(),
    }
}

impl Commands<'_> {
    /// `/allow N [chat]` and `/reject N`: decides approval N for the
    /// sender, as its requester or an admin.
    async fn decide_approval(
        &self,
        context: &Context<'_>,
        argument: Option<&str>,
        answer: notices::Answer,
    ) -> Result<String, StoreError> {
        let Some(id) = argument
            .and_then(|a| a.split_whitespace().next())
            .and_then(|id| id.trim_start_matches('#').parse::<i64>().ok())
        else {
            return Ok(texts::APPROVAL_USAGE.to_owned());
        };
        let principal = context.identity.principal;
        let who = Decider {
            principal: Some(principal),
            admin: self.access.is_admin(principal).await?,
            label: format!("principal:{}", principal.get()),
            chat: None,
            pressed: None,
        };
        let approvals = Approvals {
            store: self.store,
            runner: self.runner,
            metrics: self.runner.metrics(),
        };
        Ok(
            match approvals
                .decide(id, None, &Verdict::Answer(answer), &who, "command")
                .await?
            {
                Ok(row) => notices::settled(&row),
                Err(Refused::Settled(row)) => {
                    format!("{} {}", texts::ALREADY_DECIDED, notices::settled(&row))
                }
                Err(Refused::NotYours(text)) => text.to_owned(),
                Err(Refused::Unknown) => texts::NO_SUCH_APPROVAL.to_owned(),
            },
        )
    }
}
