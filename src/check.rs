//! `switchboard check`: with the configuration already loaded (and so
//! validated), reaches everything the gateway depends on — the database, the
//! model endpoint (its model list) and each enabled platform (its adapter's
//! check, from the same [`registry`] the gateway starts them from: Telegram
//! `getMe`, Discord `GET /users/@me`, Feishu's tenant token and bot info),
//! and checks the web console's secret and credential when it is enabled,
//! and the S3 bucket when files are kept in one —
//! and reports each, without changing anything: no migration is run, no
//! database is created, no webhook is registered.

use std::fmt;
use std::time::Duration;

use secrecy::ExposeSecret;

use crate::config::{Settings, sqlite_path};
use crate::llm::ProviderKind;
use crate::platforms::{Configured, registry};
use crate::store::{Store, StoreOptions};

/// How long each reach may take.
const TIMEOUT: Duration = Duration::from_secs(15);

/// How one check went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// Works, but likely not as meant.
    Warning,
    Problem,
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Finding {
    pub verdict: Verdict,
    /// What was checked (`database`, `model endpoint`, `telegram`, …).
    pub subject: String,
    pub detail: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.verdict {
            Verdict::Ok => "ok     ",
            Verdict::Warning => "warning",
            Verdict::Problem => "PROBLEM",
        };
        write!(f, "{tag} {}: {}", self.subject, self.detail)
    }
}

fn finding(verdict: Verdict, subject: &str, detail: impl Into<String>) -> Finding {
    Finding {
        verdict,
        subject: subject.to_owned(),
        detail: detail.into(),
    }
}

/// Runs every check; `source` names where the configuration came from.
pub async fn run(settings: &Settings, source: &str) -> Vec<Finding> {
    let mut findings = vec![finding(Verdict::Ok, "configuration", source)];
    findings.push(database(settings).await);
    findings.extend(model(settings).await);
    findings.extend(platforms(settings).await);
    findings.extend(console(settings));
    findings.extend(media(settings).await);
    findings
}

/// The S3 bucket, when files are kept in one (`media.store = "s3"`): its
/// credentials are set and it answers a signed request. Nothing is written.
async fn media(settings: &Settings) -> Option<Finding> {
    use crate::media::blobs::{BlobStore as _, hash_of};

    if settings.media.store != crate::media::settings::BlobStoreKind::S3 {
        return None;
    }
    const SUBJECT: &str = "media store";
    let s3 = &settings.media.s3;
    let place = if s3.endpoint.trim().is_empty() {
        format!("bucket {} (AWS S3, {})", s3.bucket, s3.region)
    } else {
        format!("bucket {} at {}", s3.bucket, shown_url(s3.endpoint.trim()))
    };
    let blobs = match crate::media::s3::S3Blobs::from_settings(s3) {
        Ok(blobs) => blobs,
        Err(err) => return Some(finding(Verdict::Problem, SUBJECT, err.to_string())),
    };
    // A blob no one stores: the bucket answers "not found" when it is
    // there and the key may read it.
    Some(
        match tokio::time::timeout(TIMEOUT, blobs.stat(&hash_of(b""))).await {
            Ok(Ok(_)) => finding(Verdict::Ok, SUBJECT, format!("{place} answered")),
            Ok(Err(err)) => finding(Verdict::Problem, SUBJECT, format!("{place}: {err}")),
            Err(_) => timed_out(SUBJECT),
        },
    )
}

/// The web console, when enabled: its secret and credential are there.
fn console(settings: &Settings) -> Option<Finding> {
    if !settings.console.enabled {
        return None;
    }
    Some(
        match crate::console::auth::Credentials::from_settings(&settings.console) {
            Ok(credentials) => {
                let logins = match (credentials.has_password(), credentials.has_admin_key()) {
                    (true, true) => "password login and the admin key",
                    (true, false) => "password login",
                    _ => "the admin key only",
                };
                finding(
                    Verdict::Ok,
                    "console",
                    format!("served at /console ({logins})"),
                )
            }
            Err(err) => finding(Verdict::Problem, "console", err.to_string()),
        },
    )
}

/// `database.url` with any password left out, for messages.
#[must_use]
pub fn shown_url(url: &str) -> String {
    if let Some((path, _)) = sqlite_path(url) {
        return path.to_owned();
    }
    match url::Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            parsed.to_string()
        }
        Err(_) => "(an unparsable URL)".to_owned(),
    }
}

async fn database(settings: &Settings) -> Finding {
    let url = &settings.database.url;
    let shown = shown_url(url);
    if let Some((path, _)) = sqlite_path(url)
        && !std::path::Path::new(path).exists()
    {
        return finding(
            Verdict::Warning,
            "database",
            format!(
                "no database at {shown} yet: `switchboard serve` or `switchboard migrate` \
                 creates it there"
            ),
        );
    }
    let options = StoreOptions {
        max_connections: 1,
        ..StoreOptions::new(url)
    };
    let reached = tokio::time::timeout(TIMEOUT, async {
        let store = Store::connect_without_migrating(&options).await?;
        let pinged = store.ping().await;
        store.close().await;
        pinged
    })
    .await;
    match reached {
        Ok(Ok(())) => finding(Verdict::Ok, "database", format!("reached {shown}")),
        Ok(Err(err)) => finding(
            Verdict::Problem,
            "database",
            format!("cannot open {shown}: {err}"),
        ),
        Err(_) => finding(
            Verdict::Problem,
            "database",
            format!("no answer from {shown} within {}s", TIMEOUT.as_secs()),
        ),
    }
}

/// Lists the endpoint's models (`GET {base_url}/models`, Anthropic
/// `GET {base_url}/v1/models`) with the configured key.
async fn model(settings: &Settings) -> Vec<Finding> {
    let llm = &settings.llm;
    let subject = "model endpoint";
    let mut findings = Vec::new();
    let key = std::env::var(&llm.api_key_env).unwrap_or_default();
    if key.trim().is_empty() {
        findings.push(finding(
            Verdict::Warning,
            subject,
            format!(
                "the environment variable {} (llm.api_key_env) is unset: calls go without a key",
                llm.api_key_env
            ),
        ));
    }
    let base = llm.base_url.as_str();
    let url = match llm.provider {
        ProviderKind::Openai => format!("{base}/models"),
        ProviderKind::Anthropic => format!("{base}/v1/models"),
    };
    let response = match models_request(settings, &url, &key).send().await {
        Ok(response) => response,
        Err(err) => {
            findings.push(finding(
                Verdict::Problem,
                subject,
                format!(
                    "GET {url} failed: {} (check llm.base_url)",
                    err.without_url()
                ),
            ));
            return findings;
        }
    };
    let status = response.status();
    if !status.is_success() {
        let hint = match status.as_u16() {
            401 | 403 => format!("check the key in {}", llm.api_key_env),
            404 => "check llm.base_url (OpenAI-compatible: up to and including /v1)".to_owned(),
            _ => "the endpoint may be down".to_owned(),
        };
        findings.push(finding(
            Verdict::Problem,
            subject,
            format!("GET {url} answered HTTP {}: {hint}", status.as_u16()),
        ));
        return findings;
    }
    let listed = listed_models(response).await;
    findings.push(compare_models(settings, &url, &listed));
    findings
}

/// `GET url` with the configured `key` (when there is one), as the
/// provider wants it.
fn models_request(settings: &Settings, url: &str, key: &str) -> reqwest::RequestBuilder {
    let llm = &settings.llm;
    let mut request = reqwest::Client::new().get(url).timeout(TIMEOUT);
    let secret = secrecy::SecretString::from(key.trim().to_owned());
    if !secret.expose_secret().is_empty() {
        request = match llm.provider {
            ProviderKind::Openai => request.bearer_auth(secret.expose_secret()),
            ProviderKind::Anthropic => request.header("x-api-key", secret.expose_secret()),
        };
    }
    if llm.provider == ProviderKind::Anthropic {
        request = request.header("anthropic-version", "2023-06-01");
    }
    request
}

/// The model ids a models list names (`data[].id`).
async fn listed_models(response: reqwest::Response) -> Vec<String> {
    response
        .json::<serde_json::Value>()
        .await
        .ok()
        .and_then(|body| {
            body.get("data")
                .and_then(|data| data.as_array())
                .map(|data| {
                    data.iter()
                        .filter_map(|model| model.get("id").and_then(|id| id.as_str()))
                        .map(str::to_owned)
                        .collect()
                })
        })
        .unwrap_or_default()
}

/// Whether the endpoint at `url` lists every configured model.
fn compare_models(settings: &Settings, url: &str, listed: &[String]) -> Finding {
    let llm = &settings.llm;
    let subject = "model endpoint";
    let mut configured = vec![llm.model.clone()];
    configured.extend(llm.extra_models.iter().cloned());
    configured.extend(settings.limits.fallback_model.iter().cloned());
    let missing: Vec<&String> = configured
        .iter()
        .filter(|model| !listed.contains(model))
        .collect();
    if !listed.is_empty() && !missing.is_empty() {
        let names: Vec<String> = missing.iter().map(|m| format!("`{m}`")).collect();
        finding(
            Verdict::Warning,
            subject,
            format!(
                "{url} does not list {} (check llm.model, llm.extra_models, limits.fallback_model)",
                names.join(", ")
            ),
        )
    } else {
        finding(
            Verdict::Ok,
            subject,
            format!("GET {url} answered ({} models listed)", listed.len()),
        )
    }
}

/// Each configured platform, reached as its adapter starts, changing
/// nothing there ([`Adapter::check`](switchboard_contract::Adapter::check)).
async fn platforms(settings: &Settings) -> Vec<Finding> {
    let mut findings = Vec::new();
    for Configured { platform, adapter } in registry::configured(settings) {
        findings.push(match adapter {
            Ok(adapter) => match tokio::time::timeout(TIMEOUT, adapter.check()).await {
                Ok(Ok(found)) => finding(Verdict::Ok, &platform, found),
                Ok(Err(err)) => finding(Verdict::Problem, &platform, err.to_string()),
                Err(_) => timed_out(&platform),
            },
            Err(err) => finding(Verdict::Problem, &platform, err),
        });
    }
    findings
}

fn timed_out(subject: &str) -> Finding {
    finding(
        Verdict::Problem,
        subject,
        format!("no answer within {}s", TIMEOUT.as_secs()),
    )
}
