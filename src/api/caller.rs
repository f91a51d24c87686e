//! Who an API request acts for: the tenant of its bearer key.
//!
//! A key listed with `users` (`[api.keys.NAME] users = [...]`) acts for
//! those `user` values, in the namespace every such key shares (account
//! `default`, also the namespace of an API without keys). A key without a
//! list (every key of `api.keys_env`, and named keys without `users`) acts
//! in a namespace of its own (account `key:NAME`), so only for the users and
//! sessions it created: its `alice` is not another key's `alice`. The key's
//! name is what is stored (as the identities' and sessions' account), never
//! the key.

use std::sync::Arc;

use super::ApiError;
use crate::config::ApiKey;
use crate::store::ApiScope;

/// The account of API identities (and sessions) shared by keys with a user
/// list, and used when no key is configured.
const SHARED_ACCOUNT: &str = "default";

/// The sender id of requests without a `user`.
pub const ANONYMOUS_SENDER: &str = "api";

/// The tenant a request acts as, put in the request's extensions by the
/// authentication layer.
#[derive(Debug, Clone)]
pub struct Caller {
    account: Arc<str>,
    users: Option<Arc<[String]>>,
}

impl Caller {
    /// A caller of an API that requires no key.
    pub fn open() -> Self {
        Self {
            account: Arc::from(SHARED_ACCOUNT),
            users: None,
        }
    }

    /// The caller a key stands for.
    pub fn of_key(key: &ApiKey) -> Self {
        match &key.users {
            Some(users) => Self {
                account: Arc::from(SHARED_ACCOUNT),
                users: Some(users.iter().cloned().collect()),
            },
            None => Self {
                account: Arc::from(format!("key:{}", key.name)),
                users: None,
            },
        }
    }

    /// The account its API identities are recorded under.
    pub fn account(&self) -> &str {
        &self.account
    }

    /// Whose sessions it may read.
    pub fn scope(&self) -> ApiScope<'_> {
        ApiScope {
            account: &self.account,
            users: self.users.as_deref(),
        }
    }

    /// Whose sessions it may read, narrowed to one `user` of its own
    /// (`only` holds that one user).
    ///
    /// # Errors
    /// A user the key may not act for.
    pub fn scope_of_user<'a>(&'a self, only: &'a [String]) -> Result<ApiScope<'a>, ApiError> {
        for user in only {
            self.check_user(user)?;
        }
        Ok(ApiScope {
            account: &self.account,
            users: Some(only),
        })
    }

    /// The sender a request acts as: its `user`, which a key with a user
    /// list must be allowed; without one, the list's only user, or the
    /// anonymous sender for keys without a list.
    ///
    /// # Errors
    /// A user the key may not act for, or none given to a key with several.
    pub fn sender(&self, user: Option<&str>) -> Result<String, ApiError> {
        match (user, self.users.as_deref()) {
            (Some(user), _) => {
                self.check_user(user)?;
                Ok(user.to_owned())
            }
            (None, None) => Ok(ANONYMOUS_SENDER.to_owned()),
            (None, Some([only])) => Ok(only.clone()),
            (None, Some(users)) => Err(ApiError::BadRequest(format!(
                "this API key acts for several users ({}): set `user`",
                users.join(", ")
            ))),
        }
    }

    fn check_user(&self, user: &str) -> Result<(), ApiError> {
        match self.users.as_deref() {
            Some(users) if !users.iter().any(|allowed| allowed == user) => Err(
                ApiError::Forbidden(format!("this API key may not act for user `{user}`")),
            ),
            _ => Ok(()),
        }
    }
}
