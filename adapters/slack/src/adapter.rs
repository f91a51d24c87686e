//! [`SlackAdapter`]: built from [`SlackSettings`] and its [`Secrets`]
//! without a network call, then started by the core ([`Adapter::start`]):
//! `auth.test` for every workspace's bot token, and the routes (Events
//! API) or the Socket Mode connection. [`SlackAdapter::check`] runs the
//! same start-up calls for `switchboard check`.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use secrecy::{ExposeSecret, SecretString};
use switchboard_contract::{Adapter, Hookup, PlatformName, StartError, Started};

use crate::PLATFORM;
use crate::api::{ApiError, BotIdentity, WebApi};
use crate::handoff::Handoff;
use crate::inbound::Inbound;
use crate::names::UserNames;
use crate::normalise::Rules;
use crate::recent::Recent;
use crate::sender::SlackSender;
use crate::settings::{Mode, Secrets, SettingsError, SlackSettings, WorkspaceSecrets};
use crate::socket::{SocketApp, SocketMode};
use crate::webhook::{self, Paths, WebhookState};
use crate::workspace::{Workspace, Workspaces};

/// The Slack adapter: every configured workspace, one sender, one set of
/// routes or one Socket Mode connection.
pub struct SlackAdapter {
    settings: SlackSettings,
    secrets: Secrets,
}

impl fmt::Debug for SlackAdapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SlackAdapter")
            .field("settings", &self.settings)
            .field("secrets", &self.secrets)
            .finish()
    }
}

/// What [`SlackAdapter::check`] found for one workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceCheck {
    /// The workspace's name in the settings.
    pub workspace: String,
    /// What `auth.test` said of the bot token.
    pub identity: Result<BotIdentity, ApiError>,
    /// In Socket Mode, whether `apps.connections.open` took the app-level
    /// token.
    pub app_token: Option<Result<(), ApiError>>,
}

impl WorkspaceCheck {
    /// Whether everything checked works.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        self.identity.is_ok() && !matches!(self.app_token, Some(Err(_)))
    }
}

impl fmt::Display for WorkspaceCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "workspace {}: ", self.workspace)?;
        match &self.identity {
            Ok(bot) => write!(
                f,
                "auth.test answered: team {} ({}), bot user {} ({})",
                bot.team, bot.team_id, bot.user, bot.user_id
            )?,
            Err(err) => write!(f, "{err}")?,
        }
        match &self.app_token {
            Some(Ok(())) => write!(f, "; the app-level token opens Socket Mode connections"),
            Some(Err(err)) => write!(f, "; app-level token: {err}"),
            None => Ok(()),
        }
    }
}

impl SlackAdapter {
    /// Validates `settings` and reads the secrets from the environment
    /// variables it names. No network call.
    ///
    /// # Errors
    /// An invalid setting or a missing variable (named, never its value).
    pub fn from_settings(settings: SlackSettings) -> Result<Self, SettingsError> {
        let secrets = Secrets::from_env(&settings)?;
        Self::new(settings, secrets)
    }

    /// Validates `settings` and takes `secrets` as given (tests, secret
    /// stores). No network call.
    ///
    /// # Errors
    /// An invalid setting, or a secret the mode needs missing.
    pub fn new(settings: SlackSettings, secrets: Secrets) -> Result<Self, SettingsError> {
        settings.validate()?;
        let socket = settings.mode == Mode::Socket;
        for workspace in &secrets.workspaces {
            let missing = if socket {
                workspace
                    .app_token
                    .is_none()
                    .then_some("needs an app-level token in Socket Mode")
            } else {
                workspace
                    .signing_secret
                    .is_none()
                    .then_some("needs a signing secret for the Events API")
            };
            if let Some(reason) = missing {
                return Err(SettingsError::Invalid {
                    key: format!("slack workspace {}", workspace.name),
                    reason,
                });
            }
        }
        if secrets.workspaces.is_empty() {
            return Err(SettingsError::Invalid {
                key: "slack.workspaces".to_owned(),
                reason: "no workspace to serve",
            });
        }
        Ok(Self { settings, secrets })
    }

    /// The settings it was built from.
    #[must_use]
    pub fn settings(&self) -> &SlackSettings {
        &self.settings
    }

    /// Runs the start-up calls without starting: `auth.test` for every
    /// workspace, and `apps.connections.open` in Socket Mode (which only
    /// issues a connection URL). What it reports names no secret.
    pub async fn check(&self) -> Vec<WorkspaceCheck> {
        let api = match self.api() {
            Ok(api) => api,
            Err(err) => {
                return self
                    .secrets
                    .workspaces
                    .iter()
                    .map(|workspace| WorkspaceCheck {
                        workspace: workspace.name.clone(),
                        identity: Err(ApiError::Network {
                            method: "auth.test",
                            detail: err.to_string(),
                        }),
                        app_token: None,
                    })
                    .collect();
            }
        };
        let mut checks = Vec::new();
        for workspace in &self.secrets.workspaces {
            let identity = api.auth_test(&workspace.bot_token).await;
            let app_token = match &workspace.app_token {
                Some(token) if self.settings.mode == Mode::Socket => {
                    Some(api.open_connection(token).await.map(|_| ()))
                }
                _ => None,
            };
            checks.push(WorkspaceCheck {
                workspace: workspace.name.clone(),
                identity,
                app_token,
            });
        }
        checks
    }

    fn api(&self) -> Result<WebApi, StartError> {
        let timeout = self.settings.request_timeout();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(std::time::Duration::from_secs(5)))
            .build()
            .map_err(|err| {
                StartError::Configuration(format!(
                    "building the HTTP client failed: {}",
                    err.without_url()
                ))
            })?;
        Ok(WebApi::new(http, &self.settings.api_url))
    }

    /// `auth.test` for every workspace.
    async fn connect(&self, api: &WebApi) -> Result<Workspaces, StartError> {
        let mut list = Vec::new();
        for workspace in &self.secrets.workspaces {
            let identity = api
                .auth_test(&workspace.bot_token)
                .await
                .map_err(|err| start_error(&workspace.name, &err))?;
            tracing::info!(
                workspace = %workspace.name,
                team_id = %identity.team_id,
                bot_user_id = %identity.user_id,
                "Slack workspace connected"
            );
            let connected = Workspace::new(
                workspace.name.clone(),
                workspace.bot_token.clone(),
                identity,
            )
            .map_err(|err| {
                StartError::Configuration(format!("slack workspace {}: {err}", workspace.name))
            })?;
            list.push(connected);
        }
        Workspaces::new(list).map_err(StartError::Configuration)
    }

    /// The lease of the Socket Mode connection: `slack:` and the team ids
    /// served, sorted (`slack:T0123`, `slack:T0123+T0456`), the same on
    /// every instance with the same workspaces.
    fn lease_name(workspaces: &Workspaces) -> String {
        let mut teams: Vec<&str> = workspaces.iter().map(|w| w.team_id()).collect();
        teams.sort_unstable();
        format!("{PLATFORM}:{}", teams.join("+"))
    }

    /// One Socket Mode app per distinct app-level token.
    fn socket_apps(&self) -> Vec<SocketApp> {
        let mut apps: Vec<SocketApp> = Vec::new();
        for workspace in &self.secrets.workspaces {
            let Some(token) = &workspace.app_token else {
                continue;
            };
            match apps.iter_mut().find(|app| same(&app.token, token)) {
                Some(app) => app.label = format!("{}, {}", app.label, workspace.name),
                None => apps.push(SocketApp {
                    label: workspace.name.clone(),
                    token: token.clone(),
                }),
            }
        }
        apps
    }

    /// The distinct signing secrets.
    fn signing_secrets(&self) -> Vec<SecretString> {
        let mut secrets: Vec<SecretString> = Vec::new();
        for secret in self
            .secrets
            .workspaces
            .iter()
            .filter_map(|w: &WorkspaceSecrets| w.signing_secret.as_ref())
        {
            if !secrets.iter().any(|known| same(known, secret)) {
                secrets.push(secret.clone());
            }
        }
        secrets
    }
}

#[async_trait]
impl Adapter for SlackAdapter {
    fn platform(&self) -> PlatformName {
        PlatformName::parse(PLATFORM).unwrap_or_else(|_| unreachable!("a valid platform name"))
    }

    fn webhook_paths(&self) -> Vec<String> {
        match self.settings.mode {
            Mode::Events => vec![
                self.settings.events_path.clone(),
                self.settings.interactivity_path.clone(),
            ],
            Mode::Socket => Vec::new(),
        }
    }

    async fn start(&self, hookup: Hookup) -> Result<Started, StartError> {
        let settings = &self.settings;
        let api = self.api()?;
        let workspaces = Arc::new(self.connect(&api).await?);
        let handoff = Arc::new(Handoff::new(settings.max_in_flight));
        let sender = Arc::new(SlackSender::new(
            api.clone(),
            Arc::clone(&workspaces),
            settings.drafts(),
        ));
        let inbound = Arc::new(Inbound {
            sink: hookup.sink,
            workspaces: Arc::clone(&workspaces),
            api: api.clone(),
            names: Arc::new(UserNames::new(
                settings.user_cache_ttl(),
                settings.user_cache_capacity,
            )),
            handoff: Arc::clone(&handoff),
            recent: Recent::new(),
            sender: Arc::clone(&sender),
            rules: Rules {
                free_response: settings.free_response_channels.iter().cloned().collect(),
                thread_replies: settings.thread_replies,
            },
            ack_timeout: settings.ack_timeout(),
        });
        let started = Started::sender(sender).with_drain(handoff);
        Ok(match settings.mode {
            Mode::Events => {
                let state = Arc::new(WebhookState {
                    inbound,
                    secrets: self.signing_secrets(),
                    max_age: settings.signature_max_age(),
                });
                let paths = Paths {
                    events: &settings.events_path,
                    interactivity: &settings.interactivity_path,
                };
                started.with_webhook(webhook::router(state, &paths, settings.max_body_bytes))
            }
            Mode::Socket => started.with_connection(Arc::new(SocketMode::new(
                self.socket_apps(),
                inbound,
                api,
                hookup.observer,
                Self::lease_name(&workspaces),
            ))),
        })
    }

    async fn check(&self) -> Result<String, StartError> {
        let checks = SlackAdapter::check(self).await;
        let report = checks
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ");
        if checks.iter().all(WorkspaceCheck::is_ok) {
            Ok(report)
        } else {
            Err(StartError::Unavailable(report))
        }
    }
}

/// Whether two secrets are the same (to serve one app once).
fn same(a: &SecretString, b: &SecretString) -> bool {
    a.expose_secret() == b.expose_secret()
}

/// A failed `auth.test` as the core's start error: a refused token is the
/// configuration's fault, anything else Slack's or the network's.
fn start_error(workspace: &str, err: &ApiError) -> StartError {
    let text = format!("slack workspace {workspace}: {err}");
    if err.is_auth() {
        StartError::Configuration(format!("{text} (check its bot token)"))
    } else if err.is_transient() {
        StartError::Unavailable(text)
    } else {
        StartError::Configuration(text)
    }
}
