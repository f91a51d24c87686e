//! What an operator's `switchboard check` reports of each phone number:
//! [`check`] reads every number's details with its own token
//! (`GET /{phone-number-id}?fields=display_phone_number,verified_name,quality_rating`),
//! which shows at once whether the token and the id work. The report names
//! no secret and shows the business number masked.

use std::fmt;

use crate::api::{ApiError, Graph, PhoneNumberDetails};
use crate::numbers::{Number, Numbers};
use crate::redact;
use crate::settings::{Secrets, SettingsError, WhatsAppSettings};

/// What one number's check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberCheck {
    /// Its name in the settings (`default` or a `numbers` key).
    pub name: String,
    pub phone_number_id: String,
    /// Its details, or why they could not be read.
    pub result: Result<NumberReport, ApiError>,
}

/// A number's details, fit for a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberReport {
    /// The business number, masked to its last four digits.
    pub display_phone_number: String,
    pub verified_name: Option<String>,
    /// `GREEN`, `YELLOW`, `RED` or `UNKNOWN`.
    pub quality_rating: Option<String>,
}

impl NumberReport {
    fn from_details(details: PhoneNumberDetails) -> Self {
        Self {
            display_phone_number: details
                .display_phone_number
                .as_deref()
                .map_or_else(|| "unknown".to_owned(), |n| redact::phone(n).to_string()),
            verified_name: details.verified_name,
            quality_rating: details.quality_rating,
        }
    }
}

impl fmt::Display for NumberCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "number {} (id {}): ", self.name, self.phone_number_id)?;
        match &self.result {
            Ok(report) => {
                write!(f, "{}", report.display_phone_number)?;
                if let Some(name) = &report.verified_name {
                    write!(f, ", verified name {name:?}")?;
                }
                let quality = report.quality_rating.as_deref().unwrap_or("unknown");
                write!(f, ", quality rating {quality}")
            }
            Err(err) => write!(f, "{err}"),
        }
    }
}

/// Why nothing could be checked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("building the HTTP client failed: {0}")]
    HttpClient(String),
}

/// Reads the tokens from the environment and checks every number, as
/// [`check_with`] does.
///
/// # Errors
/// Invalid settings or a missing secret.
pub async fn check(settings: &WhatsAppSettings) -> Result<Vec<NumberCheck>, CheckError> {
    settings.validate()?;
    let secrets = Secrets::from_env(settings)?;
    check_with(settings, &secrets).await
}

/// Checks every number of `settings` with the tokens in `secrets`, in
/// settings order. A number whose details cannot be read has the reason in
/// its [`NumberCheck::result`].
///
/// # Errors
/// Invalid settings, a missing token, or no HTTP client.
pub async fn check_with(
    settings: &WhatsAppSettings,
    secrets: &Secrets,
) -> Result<Vec<NumberCheck>, CheckError> {
    settings.validate()?;
    let numbers = Numbers::new(settings, secrets)?;
    let http = crate::http_client(settings).map_err(CheckError::HttpClient)?;
    let graph = Graph::new(http, settings.graph_base());
    let mut checks = Vec::new();
    for number in numbers.iter() {
        let result = details(&graph, number).await;
        checks.push(NumberCheck {
            name: number.name.clone(),
            phone_number_id: number.id.clone(),
            result,
        });
    }
    Ok(checks)
}

/// The details of `number`, read with its token.
pub(crate) async fn details(graph: &Graph, number: &Number) -> Result<NumberReport, ApiError> {
    graph
        .phone_number(&number.id, &number.token)
        .await
        .map(NumberReport::from_details)
}
