//! Senders' display names: `users.info` asked once per person and
//! remembered in memory for a while ([`UserNames`]), within a size bound.
//! A name is a courtesy: a lookup that fails or takes too long leaves the
//! message without one rather than holding it up.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use secrecy::SecretString;
use serde::Deserialize;

use crate::api::WebApi;
use crate::bounded::Bounded;

/// Display names (`None`: the person has none) by (team id, user id).
pub(crate) struct UserNames {
    names: Mutex<Bounded<(String, String), Option<String>>>,
}

#[derive(Deserialize)]
struct Info {
    user: User,
}

#[derive(Deserialize)]
struct User {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    real_name: Option<String>,
    #[serde(default)]
    profile: Option<Profile>,
}

#[derive(Deserialize)]
struct Profile {
    #[serde(default)]
    display_name: Option<String>,
    #[serde(default)]
    real_name: Option<String>,
}

impl User {
    /// The name people see: the display name, else the full name, else
    /// the handle.
    fn shown(self) -> Option<String> {
        let profile = self.profile.unwrap_or(Profile {
            display_name: None,
            real_name: None,
        });
        [
            profile.display_name,
            profile.real_name,
            self.real_name,
            self.name,
        ]
        .into_iter()
        .flatten()
        .map(|name| name.trim().to_owned())
        .find(|name| !name.is_empty())
    }
}

impl UserNames {
    /// Names kept for `ttl`, at most `capacity` of them.
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        Self {
            names: Mutex::new(Bounded::new(capacity, ttl)),
        }
    }

    /// `user`'s display name in `team`, from memory or `users.info` (at
    /// most `patience` spent asking).
    pub async fn lookup(
        &self,
        api: &WebApi,
        token: &SecretString,
        team: &str,
        user: &str,
        patience: Duration,
    ) -> Option<String> {
        let key = (team.to_owned(), user.to_owned());
        if let Some(name) = self.lock().get(&key) {
            return name;
        }
        let asked = tokio::time::timeout(
            patience,
            api.get::<Info>("users.info", token, &[("user", user)]),
        )
        .await;
        match asked {
            Ok(Ok(info)) => {
                let name = info.user.shown();
                self.lock().insert(key, name.clone());
                name
            }
            Ok(Err(err)) => {
                tracing::debug!(error = %err, "no display name for a Slack user");
                None
            }
            Err(_) => {
                tracing::debug!("users.info was too slow; going on without a name");
                None
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Bounded<(String, String), Option<String>>> {
        self.names.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_display_name_is_preferred() {
        let user: User = serde_json::from_str(
            r#"{"name":"alice","real_name":"Alice Liddell","profile":{"display_name":"  ","real_name":"Alice L."}}"#,
        )
        .unwrap();
        assert_eq!(user.shown().as_deref(), Some("Alice L."));
        let user: User = serde_json::from_str(r#"{"name":"bob"}"#).unwrap();
        assert_eq!(user.shown().as_deref(), Some("bob"));
    }
}
