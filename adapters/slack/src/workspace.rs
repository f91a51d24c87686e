//! The workspaces one adapter serves, once each bot token's identity is
//! known (`auth.test`): found by `team_id` for what arrives, and by the
//! contract's [`AccountId`] — which is the team id — for what is sent.
//!
//! So every id the core sees is scoped by its workspace: a message's
//! `account` is the team id (`T0123`), its sender's [`UserId`] the Slack
//! user id (`U0456`), unique within that account.
//!
//! [`UserId`]: switchboard_contract::UserId

use std::sync::Arc;

use secrecy::SecretString;
use switchboard_contract::{AccountId, IdError};

use crate::api::BotIdentity;

/// One connected workspace.
pub(crate) struct Workspace {
    /// Its name in the settings.
    pub name: String,
    /// The bot token.
    pub token: SecretString,
    /// Who the token belongs to.
    pub identity: BotIdentity,
    /// The team id as the contract's account.
    pub account: AccountId,
}

impl Workspace {
    /// # Errors
    /// A team id the contract cannot hold as an account id.
    pub fn new(name: String, token: SecretString, identity: BotIdentity) -> Result<Self, IdError> {
        Ok(Self {
            account: AccountId::parse(identity.team_id.as_str())?,
            name,
            token,
            identity,
        })
    }

    pub fn team_id(&self) -> &str {
        &self.identity.team_id
    }

    pub fn bot_user_id(&self) -> &str {
        &self.identity.user_id
    }
}

/// Every connected workspace.
pub(crate) struct Workspaces {
    list: Vec<Arc<Workspace>>,
}

impl Workspaces {
    /// # Errors
    /// Two bot tokens of the same workspace, naming both.
    pub fn new(list: Vec<Workspace>) -> Result<Self, String> {
        for (i, workspace) in list.iter().enumerate() {
            if let Some(other) = list[..i]
                .iter()
                .find(|other| other.team_id() == workspace.team_id())
            {
                return Err(format!(
                    "slack.workspaces: {} and {} are the same workspace ({})",
                    other.name,
                    workspace.name,
                    workspace.team_id()
                ));
            }
        }
        Ok(Self {
            list: list.into_iter().map(Arc::new).collect(),
        })
    }

    /// The workspace of an event's `team_id`.
    pub fn by_team(&self, team_id: &str) -> Option<&Arc<Workspace>> {
        self.list
            .iter()
            .find(|workspace| workspace.team_id() == team_id)
    }

    /// The workspace a reply's account names.
    pub fn by_account(&self, account: &AccountId) -> Option<&Arc<Workspace>> {
        self.by_team(account.as_str())
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Workspace>> {
        self.list.iter()
    }
}
