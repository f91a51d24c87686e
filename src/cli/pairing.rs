//! `switchboard pairing list|approve|deny`: answers pairing requests from
//! unknown senders.

use anyhow::Context;

use super::{PairingAction, open_existing};
use crate::config::Settings;
use crate::domain::PairingStatus;
use crate::store::{Store, StoreError};

/// `switchboard pairing list|approve|deny`.
pub async fn run(settings: &Settings, action: PairingAction) -> anyhow::Result<()> {
    let store = open_existing(settings).await?;
    let result = match action {
        PairingAction::List => {
            let requests = store.pairing().requests(PairingStatus::Pending).await;
            requests.map(|requests| {
                if requests.is_empty() {
                    println!("No pairing requests waiting.");
                }
                for request in requests {
                    println!(
                        "{}  {}:{}  {}",
                        request.code,
                        request.platform,
                        request.user_id,
                        request.display_name.unwrap_or_default()
                    );
                }
                true
            })
        }
        PairingAction::Approve { code } => decide(&store, &code, true).await,
        PairingAction::Deny { code } => decide(&store, &code, false).await,
    };
    store.close().await;
    match result.context("reading pairing requests")? {
        true => Ok(()),
        false => anyhow::bail!("no pairing request awaits a decision with that code"),
    }
}

async fn decide(store: &Store, code: &str, approve: bool) -> Result<bool, StoreError> {
    let decided = store
        .pairing()
        .decide(&code.trim().to_ascii_uppercase(), approve)
        .await?;
    if let Some(request) = &decided {
        println!(
            "{} {}:{}",
            if approve { "Approved" } else { "Denied" },
            request.platform,
            request.user_id
        );
    }
    Ok(decided.is_some())
}
