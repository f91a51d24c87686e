//! The `current_time` tool: the current date and time in UTC or a named IANA
//! time zone, computed with `jiff` against the system time zone database.
//!
//! Owns argument parsing for `{"timezone": …}`, time zone lookup, and the
//! result object `{"iso8601", "unix", "timezone", "weekday"}`.

use async_trait::async_trait;
use jiff::civil::Weekday;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ZonedDateTime};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, arguments_schema};

/// Reports the current date and time; stateless.
#[derive(Debug, Clone, Copy, Default)]
pub struct CurrentTime;

const DESCRIPTION: &str = "Get the current date and time. Use this whenever the answer depends on \
today's date, the current time, the day of the week, or the time in another place; never guess \
the date. Optional argument `timezone`: an IANA time zone name such as \"Europe/Berlin\", \
\"America/New_York\" or \"Asia/Tokyo\" (default \"UTC\"). Returns `iso8601` (local date and time \
with UTC offset, e.g. \"2025-03-14T09:26:53+01:00\"), `unix` (seconds since 1970-01-01 UTC), \
`timezone` (the zone used) and `weekday` (e.g. \"Friday\"). An unknown time zone name is an \
error.";

#[async_trait]
impl Tool for CurrentTime {
    fn name(&self) -> &'static str {
        "current_time"
    }

    fn description(&self) -> &'static str {
        DESCRIPTION
    }

    fn parameters(&self) -> Value {
        arguments_schema::<Args>()
    }

    fn idempotent(&self) -> bool {
        true
    }

    async fn call(&self, _ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let name = timezone_arg(args)?;
        let (tz, name) = lookup(name.as_deref())?;
        describe(Timestamp::now(), tz, &name)
    }
}

/// The arguments. Other fields are ignored, though the schema forbids them.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Args {
    /// IANA time zone name, e.g. "Europe/Berlin". Defaults to "UTC".
    // Described as a plain string (not string-or-null): the schema predates
    // its derivation, and its bytes are in every cached prompt.
    #[serde(default)]
    #[schemars(with = "String")]
    timezone: Option<String>,
}

/// The `timezone` argument, if given and non-empty.
fn timezone_arg(args: Value) -> Result<Option<String>, ToolError> {
    match args {
        Value::Null => Ok(None),
        Value::Object(_) => {
            let Args { timezone } = serde_json::from_value(args).map_err(|_| {
                ToolError::InvalidArguments(
                    "`timezone` must be a string such as \"Europe/Berlin\"".to_owned(),
                )
            })?;
            Ok(timezone
                .map(|name| name.trim().to_owned())
                .filter(|name| !name.is_empty()))
        }
        _ => Err(ToolError::InvalidArguments(
            "arguments must be an object like {\"timezone\": \"Europe/Berlin\"}".to_owned(),
        )),
    }
}

/// Resolves a time zone name; `None` and "UTC" need no database.
fn lookup(name: Option<&str>) -> Result<(TimeZone, String), ToolError> {
    let Some(name) = name else {
        return Ok((TimeZone::UTC, "UTC".to_owned()));
    };
    if name.eq_ignore_ascii_case("UTC") {
        return Ok((TimeZone::UTC, "UTC".to_owned()));
    }
    match TimeZone::get(name) {
        Ok(tz) => {
            let canonical = tz.iana_name().unwrap_or(name).to_owned();
            Ok((tz, canonical))
        }
        Err(_) => Err(ToolError::InvalidArguments(format!(
            "unknown time zone {name:?}: use an IANA time zone name such as \
             \"Europe/Berlin\", \"America/New_York\" or \"UTC\""
        ))),
    }
}

/// The result object for `now` seen in `tz`, truncated to whole seconds.
fn describe(now: Timestamp, tz: TimeZone, name: &str) -> Result<Value, ToolError> {
    let unix = now.as_second();
    let zoned: ZonedDateTime = Timestamp::from_second(unix)
        .map_err(|_| ToolError::Failed("the system clock is out of range".to_owned()))?
        .to_zoned_datetime(tz);
    let iso8601 = jiff::fmt::strtime::format("%Y-%m-%dT%H:%M:%S%:z", &zoned)
        .map_err(|_| ToolError::Failed("could not format the current time".to_owned()))?;
    Ok(json!({
        "iso8601": iso8601,
        "unix": unix,
        "timezone": name,
        "weekday": weekday_name(zoned.weekday()),
    }))
}

fn weekday_name(day: Weekday) -> &'static str {
    match day {
        Weekday::Monday => "Monday",
        Weekday::Tuesday => "Tuesday",
        Weekday::Wednesday => "Wednesday",
        Weekday::Thursday => "Thursday",
        Weekday::Friday => "Friday",
        Weekday::Saturday => "Saturday",
        Weekday::Sunday => "Sunday",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schema is in every cached prompt: its bytes must not drift.
    #[test]
    fn the_argument_schema_keeps_its_bytes() {
        let schema = serde_json::to_string(&CurrentTime.parameters()).unwrap();
        assert_eq!(
            schema,
            r#"{"additionalProperties":false,"properties":{"timezone":{"description":"IANA time zone name, e.g. \"Europe/Berlin\". Defaults to \"UTC\".","type":"string"}},"type":"object"}"#
        );
    }

    fn ctx() -> ToolContext {
        ToolContext {
            request_id: "r".to_owned(),
            session_id: crate::domain::SessionId::parse("s").expect("valid id"),
            inbound_id: crate::domain::InboundId::new(1),
            principal: None,
            subagents: None,
            person: None,
        }
    }

    /// 2024-01-01T00:00:00Z, a Monday.
    const NEW_YEAR_2024: i64 = 1_704_067_200;

    fn at(secs: i64, zone: Option<&str>) -> Value {
        let (tz, name) = lookup(zone).unwrap();
        describe(Timestamp::from_second(secs).unwrap(), tz, &name).unwrap()
    }

    #[test]
    fn utc_by_default() {
        let v = at(NEW_YEAR_2024, None);
        assert_eq!(v["iso8601"], "2024-01-01T00:00:00+00:00");
        assert_eq!(v["unix"], NEW_YEAR_2024);
        assert_eq!(v["timezone"], "UTC");
        assert_eq!(v["weekday"], "Monday");
    }

    #[test]
    fn named_zones() {
        let berlin = at(NEW_YEAR_2024, Some("Europe/Berlin"));
        assert_eq!(berlin["iso8601"], "2024-01-01T01:00:00+01:00");
        assert_eq!(berlin["timezone"], "Europe/Berlin");
        assert_eq!(berlin["weekday"], "Monday");
        assert_eq!(berlin["unix"], NEW_YEAR_2024);

        // Still Sunday evening in New York.
        let ny = at(NEW_YEAR_2024, Some("America/New_York"));
        assert_eq!(ny["iso8601"], "2023-12-31T19:00:00-05:00");
        assert_eq!(ny["weekday"], "Sunday");

        let kolkata = at(NEW_YEAR_2024, Some("Asia/Kolkata"));
        assert_eq!(kolkata["iso8601"], "2024-01-01T05:30:00+05:30");

        // Summer time in Berlin: 2024-07-01T12:00:00Z.
        let summer = at(1_719_835_200, Some("Europe/Berlin"));
        assert_eq!(summer["iso8601"], "2024-07-01T14:00:00+02:00");
    }

    #[tokio::test]
    async fn call_now() {
        let before = Timestamp::now().as_second();
        let v = CurrentTime
            .call(&ctx(), json!({"timezone": "Asia/Tokyo"}))
            .await
            .unwrap();
        let after = Timestamp::now().as_second();
        let unix = v["unix"].as_i64().unwrap();
        assert!(before <= unix && unix <= after);
        assert_eq!(v["timezone"], "Asia/Tokyo");
        assert!(v["iso8601"].as_str().unwrap().ends_with("+09:00"));

        let v = CurrentTime.call(&ctx(), json!({})).await.unwrap();
        assert_eq!(v["timezone"], "UTC");
        let v = CurrentTime.call(&ctx(), Value::Null).await.unwrap();
        assert_eq!(v["timezone"], "UTC");
    }

    #[tokio::test]
    async fn unknown_zone_is_invalid() {
        let err = CurrentTime
            .call(&ctx(), json!({"timezone": "Mars/Olympus_Mons"}))
            .await
            .unwrap_err();
        match err {
            ToolError::InvalidArguments(msg) => {
                assert!(msg.contains("Mars/Olympus_Mons"), "{msg}");
                assert!(msg.contains("IANA"), "{msg}");
            }
            other => panic!("unexpected {other:?}"),
        }
        let err = CurrentTime
            .call(&ctx(), json!({"timezone": 5}))
            .await
            .unwrap_err();
        assert!(matches!(err, ToolError::InvalidArguments(_)));
    }

    #[test]
    fn metadata() {
        assert_eq!(CurrentTime.name(), "current_time");
        assert!(CurrentTime.idempotent());
        assert_eq!(CurrentTime.parameters()["type"], "object");
    }
}
