//! Logging: `tracing` to stderr, filtered by `RUST_LOG` or `log.filter`.
//! Text lines are coloured only when stderr is a terminal (and `NO_COLOR` is
//! unset); with `log.json` each line is one JSON object whose top level holds
//! the event's fields and those of every span it happened in — so each line
//! of a turn carries the turn's `trace_id`, `session_id` and `platform`.
//! Message bodies and secrets are never logged.

use std::fmt;
use std::io::IsTerminal;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use crate::config::LogSettings;

/// Installs the global subscriber. `default_filter` applies when neither
/// `RUST_LOG` nor the settings give one (the terminal chat uses `warn` so
/// logs do not interleave with the conversation).
pub fn init(settings: &LogSettings, default_filter: Option<&str>) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .or_else(|| default_filter.map(str::to_owned))
        .unwrap_or_else(|| settings.filter.clone());
    let filter = EnvFilter::try_new(quiet_dependencies(&filter))
        .unwrap_or_else(|_| EnvFilter::new(quiet_dependencies("info")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (tests) keeps the first subscriber.
    let _ = if settings.json {
        builder
            .with_ansi(false)
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .try_init()
    } else {
        builder.with_ansi(colour()).try_init()
    };
}

/// `filter`, with the MCP SDK (`rmcp`) held to warnings unless the filter
/// names it: at INFO it logs every server notification with its content
/// (a server's log lines and progress messages may carry user data).
fn quiet_dependencies(filter: &str) -> String {
    if filter.contains("rmcp") {
        filter.to_owned()
    } else {
        format!("{filter},rmcp=warn")
    }
}

/// Whether text logs are coloured: stderr is a terminal and `NO_COLOR` is
/// unset or empty.
fn colour() -> bool {
    std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
}

/// One JSON object per event: `timestamp`, `level`, `target`, `spans` (the
/// names of the spans it happened in, outermost first, joined by `:`), the
/// fields of those spans (inner ones win) and the event's own fields
/// (`message` among them).
struct FlatJson;

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let metadata = event.metadata();
        let mut line = Map::new();
        line.insert(
            "timestamp".to_owned(),
            Value::String(jiff::Timestamp::now().to_string()),
        );
        line.insert(
            "level".to_owned(),
            Value::String(metadata.level().as_str().to_owned()),
        );
        line.insert(
            "target".to_owned(),
            Value::String(metadata.target().to_owned()),
        );
        if let Some(scope) = ctx.event_scope() {
            let mut names = Vec::new();
            for span in scope.from_root() {
                names.push(span.name());
                let extensions = span.extensions();
                // `JsonFields` stores each span's fields as a JSON object.
                if let Some(fields) = extensions.get::<FormattedFields<N>>()
                    && let Ok(Value::Object(fields)) = serde_json::from_str(fields.fields.as_str())
                {
                    line.extend(fields);
                }
            }
            line.insert("spans".to_owned(), Value::String(names.join(":")));
        }
        event.record(&mut Fields(&mut line));
        let text = serde_json::to_string(&Value::Object(line)).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// Writes an event's fields into the line.
struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .insert(field.name().to_owned(), Value::String(value.to_owned()));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), Value::Bool(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_owned(), value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .insert(field.name().to_owned(), Value::String(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_owned(), Value::String(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mcp_sdk_logs_warnings_only_unless_named() {
        assert_eq!(quiet_dependencies("info"), "info,rmcp=warn");
        assert_eq!(quiet_dependencies("debug,rmcp=trace"), "debug,rmcp=trace");
        assert!(EnvFilter::try_new(quiet_dependencies("info,switchboard=debug")).is_ok());
    }
}
