//! The phone numbers one adapter serves, with what each sends with.
//!
//! Every number is its own account: its Phone Number ID is the
//! [`AccountId`] of the messages it receives and of the replies sent from
//! it. A webhook payload names the number it is for
//! (`metadata.phone_number_id`) and a reply names its account, so one
//! webhook and one sender serve every number of the app.

use std::collections::HashMap;
use std::sync::Arc;

use secrecy::SecretString;
use switchboard_contract::AccountId;

use crate::settings::{Secrets, SettingsError, TemplateSettings, WhatsAppSettings, number_key};

/// One phone number, ready to use.
pub(crate) struct Number {
    /// Its name in the settings (`default` or a `numbers` key).
    pub name: String,
    /// Its Phone Number ID, also its [`AccountId`].
    pub id: String,
    pub account: AccountId,
    pub token: SecretString,
    pub template: Option<TemplateSettings>,
}

/// Every number of the adapter, by Phone Number ID.
pub(crate) struct Numbers {
    by_id: HashMap<String, Arc<Number>>,
    /// In settings order, for start-up checks and reports.
    ordered: Vec<Arc<Number>>,
}

impl Numbers {
    /// The numbers `settings` configure, with their tokens from `secrets`.
    pub(crate) fn new(
        settings: &WhatsAppSettings,
        secrets: &Secrets,
    ) -> Result<Self, SettingsError> {
        let mut ordered = Vec::new();
        for config in settings.numbers() {
            let account = AccountId::parse(config.phone_number_id.as_str()).map_err(|_| {
                SettingsError::Invalid {
                    key: number_key(&config.name, "phone_number_id"),
                    reason: "is not a usable account id",
                }
            })?;
            ordered.push(Arc::new(Number {
                token: secrets.token(&config.name)?.clone(),
                name: config.name,
                id: config.phone_number_id,
                account,
                template: config.template,
            }));
        }
        let by_id = ordered
            .iter()
            .map(|number| (number.id.clone(), Arc::clone(number)))
            .collect();
        Ok(Self { by_id, ordered })
    }

    /// The number whose Phone Number ID (account) is `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&Arc<Number>> {
        self.by_id.get(id)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<Number>> {
        self.ordered.iter()
    }
}
