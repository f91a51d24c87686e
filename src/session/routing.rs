//! Which session a message belongs to: its chat's [`Origin`], the
//! [`RouteKey`] the chat (or, for shared direct chats, the sender's
//! principal) is routed by, and the session that route points at, created on
//! first contact with its system prompt built once.
//!
//! Direct chats are routed by the sender's principal when
//! `sessions.dm_sessions = "shared"`, so every linked identity continues one
//! conversation; the reply still goes to the chat the message came from.
//! Group chats are routed by the chat (and the sender, with
//! `sessions.group_sessions = "per_user"`).

use std::sync::Arc;

use switchboard_contract::{ChatKind, InboundMessage};

use super::key::{Origin, RouteKey};
use super::service::ServiceError;
use crate::agent::prompt::{build_system_prompt, offers_memory, with_person_memory};
use crate::agent::settings::AgentSettings;
use crate::domain::{ChatMessage, PrincipalId, SessionId};
use crate::session::settings::{DmSessions, GroupSessions, SessionSettings};
use crate::store::{NewSession, Store, StoreError};
use crate::tools::ToolRegistry;

/// Where a message belongs.
#[derive(Debug, Clone)]
pub struct Place {
    /// The chat it came from (and goes back to).
    pub origin: Origin,
    /// What the chat is routed by.
    pub route: RouteKey,
    /// The session the route points at.
    pub session_id: SessionId,
    /// A direct chat (sessions there belong to the sender's principal).
    pub direct: bool,
}

/// Routes chats to sessions and starts sessions.
pub struct Routing {
    store: Store,
    registry: Arc<ToolRegistry>,
    agent: AgentSettings,
    /// The model new sessions start with.
    model: String,
    sessions: SessionSettings,
}

impl Routing {
    pub fn new(
        store: Store,
        registry: Arc<ToolRegistry>,
        agent: AgentSettings,
        model: String,
        sessions: SessionSettings,
    ) -> Self {
        Self {
            store,
            registry,
            agent,
            model,
            sessions,
        }
    }

    /// The place of a message from `principal`. `session`, when given, is
    /// the id of an existing session of the principal's (or of no one's), as
    /// the client sent it, that the chat is pointed at first (text that
    /// cannot be an id is an unknown session like any other); `own_chat`
    /// routes a direct chat by the chat alone even when direct chats are
    /// shared.
    ///
    /// # Errors
    /// An unknown session (or another principal's), or a database failure.
    pub async fn place(
        &self,
        message: &InboundMessage,
        principal: PrincipalId,
        session: Option<&str>,
        own_chat: bool,
    ) -> Result<Place, ServiceError> {
        let direct = message.chat_kind == ChatKind::Direct;
        let origin = self.origin_of(message);
        let route = self.route_of(direct, &origin, principal, own_chat);
        if let Some(requested) = session {
            let unknown = || ServiceError::UnknownSession(requested.to_owned());
            let session = SessionId::parse(requested).map_err(|_| unknown())?;
            let row = self
                .store
                .sessions()
                .get(&session)
                .await?
                .ok_or_else(unknown)?;
            if row.principal.is_some_and(|owner| owner != principal) {
                // Answered like a missing session: ids of other people's
                // sessions are not confirmed.
                tracing::warn!(principal_id = %principal, "refused another principal's session");
                return Err(unknown());
            }
            self.store
                .sessions()
                .bind_route(route.as_str(), &session)
                .await?;
        }
        let owner = direct.then_some(principal);
        let session_id = self.session_for(&route, &origin, owner).await?;
        Ok(Place {
            origin,
            route,
            session_id,
            direct,
        })
    }

    /// The session a direct chat from `origin` is on once its identity
    /// belongs to `principal` (after `/link` or `/unlink`).
    ///
    /// # Errors
    /// A database failure.
    pub async fn direct_session(
        &self,
        origin: &Origin,
        principal: PrincipalId,
        own_chat: bool,
    ) -> Result<SessionId, StoreError> {
        let route = self.route_of(true, origin, principal, own_chat);
        self.session_for(&route, origin, Some(principal)).await
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
    ) -> Result<SessionId, StoreError> {
        let session = self.new_session(origin, owner).await?;
        self.store.sessions().create(&session).await?;
        self.store
            .sessions()
            .bind_route(route.as_str(), &session.id)
            .await?;
        Ok(session.id)
    }

    /// Creates session `id` for the chat of `message`, owned by `owner`,
    /// with `seed` as its conversation so far (stored as history, not run),
    /// and points the chat's own route at it. Returns `false`, creating
    /// nothing, when the id is taken.
    ///
    /// # Errors
    /// A database failure.
    pub async fn start_seeded_session(
        &self,
        message: &InboundMessage,
        id: SessionId,
        owner: PrincipalId,
        seed: &[ChatMessage],
    ) -> Result<bool, StoreError> {
        let origin = self.origin_of(message);
        let session = NewSession {
            id,
            ..self.new_session(&origin, Some(owner)).await?
        };
        let created = self
            .store
            .api()
            .create_seeded_session(origin.key().as_str(), &session, seed)
            .await?;
        if created {
            tracing::info!(
                session_id = %session.id,
                seeded = seed.len(),
                "session started from a client's transcript"
            );
        }
        Ok(created)
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

    /// The session `route` points at, created (and the route bound) on
    /// first contact.
    async fn session_for(
        &self,
        route: &RouteKey,
        origin: &Origin,
        owner: Option<PrincipalId>,
    ) -> Result<SessionId, StoreError> {
        if let Some(session) = self.store.sessions().route(route.as_str()).await? {
            return Ok(session);
        }
        let session = self.new_session(origin, owner).await?;
        let id = self
            .store
            .sessions()
            .create_routed(route.as_str(), &session)
            .await?;
        if id == session.id {
            tracing::info!(session_id = %id, "session started");
        }
        Ok(id)
    }

    /// A new session's row: the system prompt is built here, once. A
    /// session of a person's own (`owner`) that offers the `memory` tool
    /// gets the person's facts as they are now, frozen into its prompt.
    async fn new_session(
        &self,
        origin: &Origin,
        owner: Option<PrincipalId>,
    ) -> Result<NewSession, StoreError> {
        let toolset = self.registry.offered();
        let mut system_prompt = build_system_prompt(&self.agent, toolset.specs());
        if let Some(owner) = owner.filter(|_| offers_memory(&toolset.names())) {
            let facts = self.store.memories().list(owner).await?;
            system_prompt = with_person_memory(&system_prompt, &facts);
        }
        Ok(NewSession {
            id: SessionId::generate(),
            origin_key: origin.key().to_string(),
            platform: origin.platform.clone(),
            account: origin.account.clone(),
            chat_id: origin.chat.clone(),
            thread_id: origin.thread.clone(),
            system_prompt,
            model: self.model.clone(),
            toolset: toolset.stored(),
            principal: owner,
        })
    }
}
