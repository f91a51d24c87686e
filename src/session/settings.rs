//! How conversations are kept and run: sessions for direct and group chats
//! (`[sessions]`), who may talk to the agent (`[access]`) and the runner
//! that runs turns and delivers replies (`[runner]`).

use std::num::NonZeroUsize;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::agent::settings::AgentSettings;
use crate::domain::setting::{self, InvalidSetting};
use crate::media::budget::MediaBudget;
use crate::tools::settings::MemorySettings;

/// How group chats map to sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupSessions {
    /// One session per group chat (or thread).
    #[default]
    PerChat,
    /// One session per sender within a group chat.
    PerUser,
}

/// The longest `sessions.burst_window_ms`: every reply waits that long.
pub const MAX_BURST_WINDOW_MS: u64 = 10_000;

/// What a message does when its session is busy with a turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BusyMode {
    /// Wait for the running turn, then run.
    #[default]
    Queue,
    /// Stop the running turn, then run.
    Interrupt,
}

/// How a principal's direct chats map to sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DmSessions {
    /// One conversation across all the principal's linked identities: start
    /// on one platform, continue on another.
    #[default]
    Shared,
    /// One conversation per direct chat.
    PerPlatform,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SessionSettings {
    pub group_sessions: GroupSessions,
    pub dm_sessions: DmSessions,
    pub busy: BusyMode,
    /// Messages from one sender arriving within this many milliseconds of
    /// the first, while no turn runs in their session, become one turn
    /// (their texts joined by newlines). A session's next turn waits until
    /// its first waiting message is this old. 0 turns merging off.
    #[serde(
        rename = "burst_window_ms",
        deserialize_with = "setting::millis::deserialize"
    )]
    #[schemars(with = "u64")]
    pub burst_window: Duration,
}

impl Default for SessionSettings {
    fn default() -> Self {
        Self {
            group_sessions: GroupSessions::default(),
            dm_sessions: DmSessions::default(),
            busy: BusyMode::default(),
            burst_window: Duration::from_millis(300),
        }
    }
}

/// Who may talk to the agent on the chat platforms. The HTTP API (its own
/// bearer keys) and the terminal (local) are not restricted.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AccessSettings {
    /// `"platform:user_id"` or `"principal:ID"` entries; a principal is
    /// allowed when it or one of its identities is listed. Empty: everyone.
    /// Otherwise an unknown sender in a direct chat gets a pairing code and
    /// no answer until `switchboard pairing approve CODE`; in groups it is
    /// ignored.
    pub allowlist: Vec<String>,
    /// Principals (same entry forms) always allowed, who may also approve or
    /// deny pairing codes in a direct chat (`/approve CODE`, `/deny CODE`).
    pub admins: Vec<String>,
    /// Allowlists of single platforms, by platform name: bare user ids of
    /// that platform, or the entry forms above. A platform is gated when
    /// the global list or its own list is set; a sender on it is allowed
    /// when either lists them.
    pub platforms: std::collections::BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RunnerSettings {
    /// Turns running at once across all sessions; others wait in order.
    #[serde(deserialize_with = "setting::at_least_one::deserialize")]
    #[schemars(with = "usize")]
    pub max_concurrent_turns: NonZeroUsize,
    /// How long a session lease lasts without renewal.
    #[serde(
        rename = "lease_ttl_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub lease_ttl: Duration,
    /// How long deduplication records of finished messages are kept (at
    /// least 72 h: Feishu retries for 6 h, Telegram and Discord redeliver
    /// after restarts).
    #[serde(
        rename = "dedup_retention_hours",
        deserialize_with = "setting::hours::deserialize"
    )]
    #[schemars(with = "u64")]
    pub dedup_retention: Duration,
    /// How often housekeeping runs (pruning old deduplication records).
    #[serde(
        rename = "maintenance_interval_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub maintenance_interval: Duration,
    /// How often each instance looks for work nobody is doing: sessions
    /// whose lease expired with messages unfinished (their instance died),
    /// replies nobody is delivering. A dead instance's turns resume within
    /// `lease_ttl_secs` plus this.
    #[serde(
        rename = "sweep_interval_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub sweep_interval: Duration,
}

impl Default for RunnerSettings {
    fn default() -> Self {
        Self {
            max_concurrent_turns: NonZeroUsize::new(32).expect("32 is not 0"),
            lease_ttl: Duration::from_secs(30),
            dedup_retention: Duration::from_secs(72 * 3600),
            maintenance_interval: Duration::from_secs(60),
            sweep_interval: Duration::from_secs(5),
        }
    }
}

fn valid_access_entry(entry: &str) -> bool {
    match entry.split_once(':') {
        Some(("principal", id)) => id.parse::<i64>().is_ok(),
        Some((platform, user)) => !platform.is_empty() && !user.is_empty(),
        None => false,
    }
}

impl SessionSettings {
    /// Checks what parses but cannot be used.
    ///
    /// # Errors
    /// A burst window over [`MAX_BURST_WINDOW_MS`].
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.burst_window > Duration::from_millis(MAX_BURST_WINDOW_MS) {
            return Err(InvalidSetting::new(
                "sessions.burst_window_ms",
                format!("must be at most {MAX_BURST_WINDOW_MS} (every reply waits this long)"),
            ));
        }
        Ok(())
    }
}

impl AccessSettings {
    /// Checks the allowlist and admin entries.
    ///
    /// # Errors
    /// An entry that is neither `platform:user_id` nor `principal:ID`.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        for (key, entries) in [
            ("access.allowlist", &self.allowlist),
            ("access.admins", &self.admins),
        ] {
            if let Some(bad) = entries.iter().find(|entry| !valid_access_entry(entry)) {
                return Err(InvalidSetting::new(
                    key,
                    format!("`{bad}` is neither `platform:user_id` nor `principal:ID`"),
                ));
            }
        }
        Ok(())
    }
}

impl RunnerSettings {
    /// The shortest deduplication retention: Feishu retries for 6 h,
    /// Telegram and Discord redeliver after restarts.
    pub const MIN_DEDUP_RETENTION: Duration = Duration::from_secs(72 * 3600);

    /// Checks what parses but cannot be used.
    ///
    /// # Errors
    /// A lease under a second, or a retention under 72 hours.
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        if self.lease_ttl < Duration::from_secs(1) {
            return Err(InvalidSetting::new(
                "runner.lease_ttl_secs",
                "must be at least 1",
            ));
        }
        if self.dedup_retention < Self::MIN_DEDUP_RETENTION {
            return Err(InvalidSetting::new(
                "runner.dedup_retention_hours",
                "must be at least 72",
            ));
        }
        Ok(())
    }
}

/// What the session service reads of the other features' settings,
/// gathered once by the configuration: the agent new sessions get, the
/// models a conversation may pick, the memory and spend settings the chat
/// commands show, and the media limits.
#[derive(Debug, Clone)]
pub struct ServiceSettings {
    pub sessions: SessionSettings,
    pub access: AccessSettings,
    pub agent: AgentSettings,
    pub memory: MemorySettings,
    /// `llm.model`: new sessions' model.
    pub model: String,
    /// `llm.extra_models`: further models a conversation may pick.
    pub extra_models: Vec<String>,
    /// `limits.principal_daily_usd` (0: no cap).
    pub daily_usd: f64,
    pub media_budget: MediaBudget,
}
