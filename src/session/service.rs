//! The session service: where every platform's messages enter the core.
//!
//! It drops what is not for the agent (bots, group messages that do not
//! address the bot), resolves the sender to a principal (created on first
//! contact), lets [`access`](super::access) decide whether it may talk,
//! finds the chat's session through [`routing`](super::routing), records
//! the message once (a redelivered event is a duplicate; one arriving while
//! the first delivery's files are still fetched waits for it, see
//! `session::arrivals`), and then either
//! answers it as a [command](super::commands) or queues it for the
//! session's runner.

use crate::domain::{
    InboundId, InboundStatus, Outcome, PrincipalId, SessionId, StopCause, TurnOptions,
};
use std::sync::Arc;

use async_trait::async_trait;
use switchboard_contract::{
    ActionReply, ChatKind, DeliveryState, DeliveryStatus, InboundAction, InboundMessage,
    InboundSink, SubmitError, Submitted,
};
use tokio::sync::oneshot;

use super::access::{Access, Gate};
use super::approvals::{Approvals, Decider, Refused, Verdict};
use super::arrivals::Arrivals;
use super::commands::{Answer, Command, CommandSettings, Commands, Context, Dispatched};
use super::notices::{self, Press};
use super::routing::{Place, Routing};
use super::runner::{Runner, TurnReply};
use super::texts;
use crate::agent::live::LiveSubscription;
use crate::media::budget::MediaBudget;
use crate::media::{Media, MediaError};
use crate::session::settings::BusyMode;
use crate::session::settings::ServiceSettings;
use crate::store::{NewInbound, Store, StoreError, TurnEnd};
use crate::tools::ToolRegistry;
use crate::tools::ask_user::ASK_USER;
use crate::tools::memory::MEMORY;
use crate::tools::tasks::TaskTools;

/// What became of a submitted message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Queued for its session's runner.
    Accepted {
        inbound_id: InboundId,
        session_id: SessionId,
    },
    /// The same platform event was recorded before.
    Duplicate,
    /// Not for the agent.
    Ignored,
    /// A command, answered through the outbox.
    Handled {
        inbound_id: InboundId,
        session_id: SessionId,
        reply: String,
    },
}

/// Options for [`SessionService::submit`].
#[derive(Debug, Clone, Default)]
pub struct SubmitOptions {
    /// Continue this session (it must exist): the chat is pointed at it first.
    /// The id as the client sent it: text that cannot be an id is answered
    /// as an unknown session, at the same point as a well-formed unknown id.
    pub session: Option<String>,
    /// Return a receiver for the turn's reply.
    pub wait: bool,
    /// Route by this chat alone, even a direct chat whose principal's
    /// conversation is shared (the HTTP API's anonymous one-off requests, and
    /// requests naming their session).
    pub own_chat: bool,
    /// Switch the session to this model first (one of the configured
    /// models, checked by the caller), as `/model NAME` does.
    pub model: Option<String>,
    /// Follow the turn live (see `agent::live`): subscribed before the turn
    /// is queued, so nothing of it is missed.
    pub live: bool,
    /// What the message's turn is asked beyond its text (the HTTP API's
    /// call settings and client instructions), stored with it.
    pub turn: TurnOptions,
}

/// A submitted message and, when asked for, its reply to come and its live
/// events.
#[derive(Debug)]
pub struct Submission {
    pub admission: Admission,
    pub reply: Option<oneshot::Receiver<TurnReply>>,
    pub live: Option<LiveSubscription>,
}

/// Why a message could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("no session with id {0}")]
    UnknownSession(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The blob store failed.
    #[error(transparent)]
    Media(#[from] MediaError),
}

/// The platform-neutral core of message handling.
pub struct SessionService {
    store: Store,
    runner: Runner,
    access: Access,
    routing: Routing,
    commands: CommandSettings,
    /// What a message does to a turn already running in its session.
    busy: BusyMode,
    /// Where attachments are fetched to.
    media: Arc<Media>,
    /// How much a message and a person may send.
    media_budget: MediaBudget,
    /// Events whose files are being fetched.
    arrivals: Arrivals,
    /// What `/tasks` and `/timezone` act through.
    tasks: TaskTools,
    /// `ask_user` is offered, so a message may answer an open question (a
    /// lookup skipped on every message otherwise).
    asks_questions: bool,
}

impl SessionService {
    /// Builds the service from the settings it reads; attachments go to
    /// `media`.
    pub fn new(
        store: Store,
        runner: Runner,
        registry: Arc<ToolRegistry>,
        media: Arc<Media>,
        tasks: TaskTools,
        settings: &ServiceSettings,
    ) -> Self {
        let commands = CommandSettings::new(settings);
        // `ask_user`'s questions, and an MCP server's (elicitation).
        let asks_questions = registry.get(ASK_USER).is_some() || registry.tools_may_ask();
        let mut agent = settings.agent.clone();
        if !settings.memory.enabled {
            // Not registered either: new sessions go without it, unlogged.
            agent.tools.retain(|tool| tool != MEMORY);
        }
        Self {
            access: Access::new(store.clone(), settings.access.clone()),
            routing: Routing::new(
                store.clone(),
                registry,
                agent,
                commands.model.clone(),
                settings.sessions.clone(),
            ),
            store,
            runner,
            commands,
            busy: settings.sessions.busy,
            media,
            media_budget: settings.media_budget,
            arrivals: Arrivals::default(),
            tasks,
            asks_questions,
        }
    }

    pub fn runner(&self) -> &Runner {
        &self.runner
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Starts session `id` for the chat and sender of `message` (the HTTP
    /// API's client-chosen ids and transcripts that match no session), its
    /// conversation seeded with `seed`. Returns `false` when the id is taken.
    ///
    /// # Errors
    /// A database failure.
    pub async fn start_seeded_session(
        &self,
        message: &InboundMessage,
        id: SessionId,
        seed: &[crate::domain::ChatMessage],
    ) -> Result<bool, StoreError> {
        let identity = self
            .store
            .principals()
            .resolve_identity(
                message.platform.as_str(),
                message.account.as_str(),
                message.sender.id.as_str(),
            )
            .await?;
        self.routing
            .start_seeded_session(message, id, identity.principal, seed)
            .await
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
        if message.sender.is_bot || (message.chat_kind == ChatKind::Group && !message.mentions_bot)
        {
            return Ok(Submission::without_reply(Admission::Ignored));
        }
        let identity = self
            .store
            .principals()
            .resolve_identity(
                message.platform.as_str(),
                message.account.as_str(),
                message.sender.id.as_str(),
            )
            .await?;
        let command = Command::parse(&message.text, None);
        // An unknown sender gets a pairing code instead of a turn.
        let pairing = match self
            .access
            .admit(&message, &identity, command.as_ref())
            .await?
        {
            Gate::Allowed => None,
            Gate::Reply(text) => Some(text),
            Gate::Ignored => return Ok(Submission::without_reply(Admission::Ignored)),
        };
        let place = self
            .routing
            .place(
                &message,
                identity.principal,
                options.session.as_deref(),
                options.own_chat,
            )
            .await?;
        if let Some(model) = &options.model {
            // Before the message is queued, so that its turn uses it.
            self.store
                .sessions()
                .set_model(&place.session_id, model)
                .await?;
        }
        // A message for the model has its files fetched and stored before
        // it is recorded, so that a restart loses none of it; a file that
        // cannot be taken is answered at once instead.
        let mut media = Vec::new();
        let mut refusal = None;
        let fetches = pairing.is_none() && command.is_none() && !message.attachments.is_empty();
        // Held until the message is recorded: a redelivery arriving while
        // the files are fetched waits, then finds it recorded.
        let _arrival = if fetches {
            Some(
                self.arrivals
                    .hold(
                        message.platform.as_str(),
                        message.account.as_str(),
                        message.event_id.as_str(),
                    )
                    .await,
            )
        } else {
            None
        };
        if fetches
            // A redelivery is dropped below: its files were taken (and
            // counted) the first time.
            && self
                .store
                .inbound().id_of_event(
                    message.platform.as_str(),
                    message.account.as_str(),
                    message.event_id.as_str(),
                )
                .await?
                .is_none()
        {
            let budget = &self.media_budget;
            let allowance = budget.allowance(&self.store, identity.principal).await?;
            let taken = match self.media.ingest(&message.attachments, &allowance).await? {
                Ok(refs) => budget
                    .charge(&self.store, identity.principal, &refs)
                    .await?
                    .map(|()| refs),
                Err(refused) => Err(refused),
            };
            match taken {
                Ok(refs) => media = refs,
                Err(refused) => refusal = Some(refused.reply()),
            }
        }
        let pairing = pairing.or(refusal);
        // A question the agent asked this person here is answered by their
        // next message (its text is the answer, not a new turn).
        let answers = match (&pairing, &command) {
            (None, None) if self.asks_questions && !message.text.trim().is_empty() => {
                self.open_question(&place.session_id, identity.principal)
                    .await?
            }
            _ => None,
        };
        let answered = pairing.is_some()
            || answers.is_some()
            || command.as_ref().is_some_and(|c| !c.is_queued());
        let mut record = new_inbound(
            &message,
            &place.session_id,
            answered,
            command.as_ref(),
            identity.principal,
        );
        record.media = media;
        record.options = options.turn.stored();
        let Some(inbound_id) = self.store.inbound().record(&record).await? else {
            tracing::debug!(event_id = %message.event_id, "duplicate event dropped");
            self.runner
                .metrics()
                .duplicate_dropped(message.platform.as_str());
            return Ok(Submission::without_reply(Admission::Duplicate));
        };
        let reply = options.wait.then(|| self.runner.wait_for(inbound_id));
        let live = options
            .live
            .then(|| self.runner.live().subscribe(inbound_id));
        if let Some(question) = answers {
            let who = Decider {
                principal: Some(identity.principal),
                admin: false,
                label: format!("{}:{}", message.platform, message.sender.id),
                chat: None,
                pressed: None,
            };
            let verdict = Verdict::Text(message.text.trim().to_owned());
            let taken = self
                .approvals()
                .decide(question, None, &verdict, &who, "message")
                .await?;
            let note = match taken {
                Ok(_) => texts::ANSWER_TAKEN,
                Err(_) => texts::ALREADY_DECIDED,
            };
            let admission = self
                .answer(inbound_id, place.session_id.clone(), note.into())
                .await?;
            return Ok(Submission {
                admission,
                reply,
                live,
            });
        }
        let dispatched = match (pairing, command) {
            (Some(text), _) => Dispatched::Answer {
                session_id: place.session_id.clone(),
                answer: text.into(),
            },
            (None, Some(command)) => {
                let context = Context {
                    inbound_id,
                    identity,
                    place: &place,
                    own_chat: options.own_chat,
                };
                self.commands().run(command, &context).await?
            }
            (None, None) => Dispatched::Queue,
        };
        let admission = self.settle(inbound_id, place, dispatched).await?;
        Ok(Submission {
            admission,
            reply,
            live,
        })
    }

    /// The oldest open question of the session that `principal` asked
    /// for, which their next message answers.
    async fn open_question(
        &self,
        session_id: &SessionId,
        principal: PrincipalId,
    ) -> Result<Option<i64>, StoreError> {
        Ok(self
            .store
            .approvals()
            .pending_in(session_id)
            .await?
            .into_iter()
            .find(|approval| {
                approval.kind == crate::domain::ApprovalKind::Question
                    && approval.principal_id == Some(principal)
            })
            .map(|approval| approval.id))
    }

    /// Decides approvals (buttons, commands, the API, answers).
    pub fn approvals(&self) -> Approvals<'_> {
        Approvals {
            store: &self.store,
            runner: &self.runner,
            metrics: self.runner.metrics(),
        }
    }

    /// Whether `principal` is an admin.
    ///
    /// # Errors
    /// A database failure.
    pub async fn is_admin(&self, principal: PrincipalId) -> Result<bool, StoreError> {
        self.access.is_admin(principal).await
    }

    /// Tasks: what the API's `/v1/tasks` and hooks act through.
    pub fn tasks(&self) -> &TaskTools {
        &self.tasks
    }

    /// The command handlers, over this service's parts.
    fn commands(&self) -> Commands<'_> {
        Commands {
            store: &self.store,
            runner: &self.runner,
            access: &self.access,
            routing: &self.routing,
            settings: &self.commands,
            tasks: &self.tasks,
        }
    }

    /// Carries out what became of a recorded message: answers it in its
    /// chat, or wakes its session's runner.
    async fn settle(
        &self,
        inbound_id: InboundId,
        place: Place,
        dispatched: Dispatched,
    ) -> Result<Admission, StoreError> {
        let session_id = place.session_id;
        Ok(match dispatched {
            Dispatched::Answer { session_id, answer } => {
                self.answer(inbound_id, session_id, answer).await?
            }
            Dispatched::Queue => {
                if self.busy == BusyMode::Interrupt {
                    self.runner
                        .stop(&session_id, StopCause::Interrupted)
                        .await?;
                }
                self.runner.notify(&session_id);
                Admission::Accepted {
                    inbound_id,
                    session_id,
                }
            }
            Dispatched::Retried => {
                self.runner.notify(&session_id);
                Admission::Accepted {
                    inbound_id,
                    session_id,
                }
            }
        })
    }

    /// Writes a command's answer to the outbox and hands it out. A secret
    /// answer reaches the chat while the outbox keeps only its stored form.
    async fn answer(
        &self,
        inbound_id: InboundId,
        session_id: SessionId,
        answer: Answer,
    ) -> Result<Admission, StoreError> {
        let Answer { text, stored } = answer;
        // The waiting caller (if any) is answered here with the text as
        // delivered: a signal that the stored form was written must not
        // reach it first.
        let waiters = self.runner.take_waiters(inbound_id);
        let mut row = self
            .store
            .outbox()
            .finish_turn(&TurnEnd {
                inbound_id,
                final_message: None,
                reply: stored.as_deref().unwrap_or(&text),
                status: InboundStatus::Command,
                outcome: Outcome::Command,
                relayed: false,
            })
            .await?;
        row.text.clone_from(&text);
        for waiter in waiters {
            let _ = waiter.send(TurnReply {
                inbound_id,
                session_id: session_id.clone(),
                text: text.clone(),
                status: InboundStatus::Command,
            });
        }
        self.runner.deliver(&row, InboundStatus::Command).await;
        Ok(Admission::Handled {
            inbound_id,
            session_id,
            reply: text,
        })
    }
}

impl Submission {
    fn without_reply(admission: Admission) -> Self {
        Self {
            admission,
            reply: None,
            live: None,
        }
    }
}

/// The inbound record of a message (a `/link CODE` without its code):
/// `answered` at once (a command, a pairing greeting), or waiting for its
/// session's runner.
fn new_inbound(
    message: &InboundMessage,
    session_id: &SessionId,
    answered: bool,
    command: Option<&Command>,
    principal: PrincipalId,
) -> NewInbound {
    let status = if answered {
        InboundStatus::Command
    } else {
        InboundStatus::Pending
    };
    NewInbound {
        platform: message.platform.clone(),
        account: message.account.clone(),
        event_id: message.event_id.clone(),
        session_id: session_id.clone(),
        chat_id: message.chat.clone(),
        thread_id: message.thread.clone(),
        message_id: message.message_id.clone(),
        sender_id: message.sender.id.clone(),
        sender_name: message.sender.display_name.clone(),
        speaker: super::speaker::label(message.chat_kind, &message.sender),
        text: Command::recorded_text(command, &message.text).to_owned(),
        status,
        principal_id: Some(principal),
        media: Vec::new(),
        options: None,
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
            Err(ServiceError::Media(err)) => Err(SubmitError::Unavailable(err.to_string())),
        }
    }

    /// A press of a question's button: decided if the presser may, and the
    /// question's message updated to the outcome. A press that is not ours,
    /// forged, from another chat or someone else's changes nothing.
    async fn act(&self, action: InboundAction) -> Result<ActionReply, SubmitError> {
        let unavailable = |err: StoreError| SubmitError::Unavailable(err.to_string());
        let Some(press) = Press::parse(action.action.as_str()) else {
            return Ok(ActionReply::notice(texts::BUTTON_UNKNOWN));
        };
        let identity = self
            .store
            .principals()
            .resolve_identity(
                action.platform.as_str(),
                action.account.as_str(),
                action.sender.id.as_str(),
            )
            .await
            .map_err(unavailable)?;
        let admin = self
            .access
            .is_admin(identity.principal)
            .await
            .map_err(unavailable)?;
        let who = Decider {
            principal: Some(identity.principal),
            admin,
            label: format!("{}:{}", action.platform, action.sender.id),
            chat: Some((action.platform.to_string(), action.chat.to_string())),
            pressed: action.message_id.clone(),
        };
        let decided = self
            .approvals()
            .decide(
                press.approval_id,
                Some(&press.nonce),
                &Verdict::Answer(press.answer),
                &who,
                "button",
            )
            .await
            .map_err(unavailable)?;
        Ok(match decided {
            Ok(row) => ActionReply {
                notice: Some(texts::DECIDED.to_owned()),
                update: Some(notices::settled(&row)),
            },
            Err(Refused::Settled(row)) => ActionReply {
                notice: Some(texts::ALREADY_DECIDED.to_owned()),
                update: Some(notices::settled(&row)),
            },
            Err(Refused::NotYours(text)) => ActionReply::notice(text),
            Err(Refused::Unknown) => ActionReply::notice(texts::BUTTON_UNKNOWN),
        })
    }

    /// Keeps a platform's report on a sent message (WhatsApp's statuses)
    /// against its outbox row; a failure is logged, without the chat.
    async fn delivery_status(&self, status: DeliveryStatus) -> Result<(), SubmitError> {
        if let DeliveryState::Failed { code, reason } = &status.state {
            tracing::warn!(
                platform = %status.platform,
                message_id = %status.message_id,
                code = ?code,
                %reason,
                "the platform reports a sent message failed"
            );
        }
        self.store
            .deliveries()
            .record(&status)
            .await
            .map(drop)
            .map_err(|err| SubmitError::Unavailable(err.to_string()))
    }
}
