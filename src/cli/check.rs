//! `switchboard check`: prints what [`crate::check::run`] found and exits
//! non-zero on a problem.

use std::path::Path;

use crate::check::{self, Verdict};
use crate::config::{self, Settings};
use crate::telemetry;

/// Runs every check and prints one line each.
///
/// # Errors
/// One problem or more was found.
pub async fn run(settings: &Settings, file: Option<&Path>) -> anyhow::Result<()> {
    telemetry::init(&settings.log, Some("error"));
    let source = match config::file_in_use(file) {
        Some(file) => format!("{} is valid", file.display()),
        None => "valid (no file: built-in defaults and the environment)".to_owned(),
    };
    let findings = check::run(settings, &source).await;
    for finding in &findings {
        println!("{finding}");
    }
    let problems = findings
        .iter()
        .filter(|finding| finding.verdict == Verdict::Problem)
        .count();
    match problems {
        0 => Ok(()),
        1 => anyhow::bail!("1 problem found"),
        n => anyhow::bail!("{n} problems found"),
    }
}
