//! The one place that knows which platform adapters exist: it turns the
//! configured sections (`[telegram]`, `[discord]`, `[feishu]`, `[slack]`,
//! `[whatsapp]`) into
//! [`Adapter`]s, in that order, for the supervisor
//! ([`Platforms::start`](super::Platforms::start)) and for `switchboard
//! check` alike.
//!
//! Adding a platform is one call of `add` in [`configured`]: its name, its
//! section of the settings (`Option<…Settings>` in [`Settings`]), and the
//! constructor that builds its adapter from the section without a network
//! call (`fn(Section) -> Result<impl Adapter, impl Display>`). The supervisor
//! and `switchboard check` need nothing more.

use std::fmt::Display;
use std::sync::Arc;

use switchboard_contract::Adapter;
use switchboard_discord::DiscordPlatform;
use switchboard_feishu::FeishuPlatform;
use switchboard_slack::SlackAdapter;
use switchboard_telegram::TelegramPlatform;
use switchboard_whatsapp::WhatsAppAdapter;

use crate::config::Settings;

/// One configured platform: its adapter, or why it could not be built (a
/// configuration error, such as a missing variable; never a secret).
pub struct Configured {
    /// The platform's name (`telegram`), as the adapter reports it.
    pub platform: String,
    pub adapter: Result<Arc<dyn Adapter>, String>,
}

/// The adapters of the platforms `settings` configure.
#[must_use]
pub fn configured(settings: &Settings) -> Vec<Configured> {
    let mut adapters = Vec::new();
    add(
        &mut adapters,
        switchboard_telegram::PLATFORM,
        &settings.telegram,
        TelegramPlatform::new,
    );
    add(
        &mut adapters,
        switchboard_discord::PLATFORM,
        &settings.discord,
        DiscordPlatform::new,
    );
    add(
        &mut adapters,
        switchboard_feishu::PLATFORM,
        &settings.feishu,
        FeishuPlatform::new,
    );
    add(
        &mut adapters,
        switchboard_slack::PLATFORM,
        &settings.slack,
        SlackAdapter::from_settings,
    );
    add(
        &mut adapters,
        switchboard_whatsapp::PLATFORM,
        &settings.whatsapp,
        WhatsAppAdapter::from_env,
    );
    adapters
}

/// Builds `platform`'s adapter from its `section`, when configured.
fn add<S, A, E>(
    adapters: &mut Vec<Configured>,
    platform: &str,
    section: &Option<S>,
    build: impl FnOnce(S) -> Result<A, E>,
) where
    S: Clone,
    A: Adapter,
    E: Display,
{
    let Some(section) = section else { return };
    let adapter = build(section.clone()).map(|adapter| Arc::new(adapter) as Arc<dyn Adapter>);
    adapters.push(Configured {
        platform: match &adapter {
            Ok(adapter) => adapter.platform().to_string(),
            Err(_) => platform.to_owned(),
        },
        adapter: adapter.map_err(|err| err.to_string()),
    });
}
