//! Who may talk to the agent: the allowlists (global, per platform, admins),
//! pairing codes for unknown direct-chat senders, and the admins' decisions
//! on them.
//!
//! A platform is gated when the global list or its own list is set; local
//! platforms (the terminal, the HTTP API) never are. An unknown sender in a
//! group is ignored; in a direct chat it gets a pairing code and no turn,
//! unless it sends `/link CODE` with a code from an allowed account.

use switchboard_contract::{ChatKind, InboundMessage};

use super::commands::Command;
use super::link::LinkCode;
use super::texts;
use crate::domain::{LocalPlatform, PairingStatus, PrincipalId};
use crate::session::settings::AccessSettings;
use crate::store::{Applicant, Identity, Store, StoreError};

/// What access control does with a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    Allowed,
    /// Answered with this (the pairing greeting), no turn.
    Reply(String),
    /// Dropped (a denied sender, or an unknown one in a group).
    Ignored,
}

/// An admin's answer to a pairing request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Deny,
}

/// The allowlists and the pairing requests.
pub struct Access {
    store: Store,
    settings: AccessSettings,
}

impl Access {
    pub fn new(store: Store, settings: AccessSettings) -> Self {
        Self { store, settings }
    }

    /// The gate for a message from `identity`; `command` is the message
    /// parsed as a command, if it is one.
    ///
    /// # Errors
    /// A database failure.
    pub async fn admit(
        &self,
        message: &InboundMessage,
        identity: &Identity,
        command: Option<&Command>,
    ) -> Result<Gate, StoreError> {
        if self.is_allowed(message, identity).await? {
            return Ok(Gate::Allowed);
        }
        if message.chat_kind != ChatKind::Direct {
            tracing::debug!(principal_id = %identity.principal, "unknown sender in a group ignored");
            return Ok(Gate::Ignored);
        }
        // `/link CODE` (a code from an allowed account) still gets through.
        if matches!(command, Some(Command::Link(Some(_)))) {
            return Ok(Gate::Allowed);
        }
        self.pairing(message, identity).await
    }

    /// Whether the principal (or one of its identities) is an admin.
    ///
    /// # Errors
    /// A database failure.
    pub async fn is_admin(&self, principal: PrincipalId) -> Result<bool, StoreError> {
        self.listed(&self.settings.admins, principal).await
    }

    /// `/approve CODE`, `/deny CODE`: the answer to the admin.
    ///
    /// # Errors
    /// A database failure.
    pub async fn decide(&self, code: &str, decision: Decision) -> Result<String, StoreError> {
        let code = code.trim().to_ascii_uppercase();
        let approve = decision == Decision::Approve;
        Ok(match self.store.pairing().decide(&code, approve).await? {
            Some(request) => {
                tracing::info!(approve, platform = %request.platform, "pairing decided");
                texts::pairing_decided(decision, &request)
            }
            None => texts::NO_PAIRING_REQUEST.to_owned(),
        })
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
            .settings
            .platforms
            .get(platform)
            .filter(|list| !list.is_empty());
        if (self.settings.allowlist.is_empty() && own_list.is_none())
            || LocalPlatform::of(platform).is_some()
        {
            return Ok(true);
        }
        if own_list.is_some_and(|list| list.iter().any(|entry| entry == message.sender.id.as_str()))
        {
            return Ok(true);
        }
        for list in [
            Some(&self.settings.allowlist),
            Some(&self.settings.admins),
            own_list,
        ]
        .into_iter()
        .flatten()
        {
            if self.listed(list, identity.principal).await? {
                return Ok(true);
            }
        }
        self.store.principals().approved(identity.principal).await
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
        let identities = self.store.principals().identities(principal).await?;
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
            platform: &message.platform,
            account: &message.account,
            user_id: &message.sender.id,
            display_name: message.sender.display_name.as_deref(),
        };
        let request = self
            .store
            .pairing()
            .request(&applicant, code.as_str())
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
                Gate::Reply(texts::pairing_requested(&request.code))
            }
        })
    }
}
