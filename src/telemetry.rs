//! Logging: `tracing` to stderr, filtered by `RUST_LOG` or `log.filter`.
//! Turn spans carry a trace id; message bodies and secrets are never logged.

use tracing_subscriber::EnvFilter;

use crate::config::LogSettings;

/// Installs the global subscriber. `default_filter` applies when neither
/// `RUST_LOG` nor the settings give one (the terminal chat uses `warn` so
/// logs do not interleave with the conversation).
pub fn init(settings: &LogSettings, default_filter: Option<&str>) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .or_else(|| default_filter.map(str::to_owned))
        .unwrap_or_else(|| settings.filter.clone());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests) keeps the first subscriber.
    let _ = if settings.json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
