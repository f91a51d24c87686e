//! What every feature's settings share: the error a value that parses but
//! cannot be used gives ([`InvalidSetting`]), settings read as the typed
//! values the code uses — durations written as whole seconds,
//! milliseconds or hours ([`secs`], [`millis`], [`hours`]), counts that must
//! be at least 1 ([`at_least_one`]), base URLs ([`BaseUrl`]) — so each is
//! converted once, where it is read, and never clamped again downstream.
//!
//! The configuration's keys keep their units (`timeout_secs = 30`): a
//! field reads `#[serde(rename = "timeout_secs", with = "secs")]` and holds
//! a [`Duration`]. Its schema (what the loader checks keys and types
//! against) stays a whole number, through `#[schemars(with = "u64")]`.

use std::fmt;
use std::num::{NonZeroU32, NonZeroU64, NonZeroUsize};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A setting whose value parses but cannot be used: its dotted key and
/// why, as the operator reads it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid setting `{key}`: {reason}")]
pub struct InvalidSetting {
    pub key: &'static str,
    pub reason: String,
}

impl InvalidSetting {
    /// `key` is invalid because `reason`.
    pub fn new(key: &'static str, reason: impl Into<String>) -> Self {
        Self {
            key,
            reason: reason.into(),
        }
    }
}

/// A duration written as whole seconds.
pub mod secs {
    use super::{Deserialize, Deserializer, Duration};

    /// # Errors
    /// The value is not a whole number.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_secs)
    }
}

/// A duration written as whole milliseconds.
pub mod millis {
    use super::{Deserialize, Deserializer, Duration};

    /// # Errors
    /// The value is not a whole number.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(Duration::from_millis)
    }
}

/// A duration written as whole hours.
pub mod hours {
    use super::{Deserialize, Deserializer, Duration};

    /// # Errors
    /// The value is not a whole number.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        u64::deserialize(deserializer).map(|hours| Duration::from_secs(hours.saturating_mul(3600)))
    }
}

/// A count that must be at least 1 (`NonZeroU32`, `NonZeroU64`,
/// `NonZeroUsize`), refused with "must be at least 1" otherwise.
pub mod at_least_one {
    use super::{Deserialize, Deserializer, NonZeroU32, NonZeroU64, NonZeroUsize};

    /// A non-zero count that deserializes from its plain integer.
    pub trait Count: Sized {
        type Plain: for<'de> Deserialize<'de>;
        fn new(plain: Self::Plain) -> Option<Self>;
    }

    impl Count for NonZeroU32 {
        type Plain = u32;
        fn new(plain: u32) -> Option<Self> {
            Self::new(plain)
        }
    }

    impl Count for NonZeroU64 {
        type Plain = u64;
        fn new(plain: u64) -> Option<Self> {
            Self::new(plain)
        }
    }

    impl Count for NonZeroUsize {
        type Plain = usize;
        fn new(plain: usize) -> Option<Self> {
            Self::new(plain)
        }
    }

    /// # Errors
    /// The value is not a whole number, or is 0.
    pub fn deserialize<'de, D: Deserializer<'de>, T: Count>(
        deserializer: D,
    ) -> Result<T, D::Error> {
        let plain = T::Plain::deserialize(deserializer)?;
        T::new(plain).ok_or_else(|| serde::de::Error::custom("must be at least 1"))
    }
}

/// The base URL of an HTTP service (a model provider, a transcription
/// server): an `http://` or `https://` URL, kept as written without a
/// trailing `/` so that paths are appended to it (`{base}/chat/completions`).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct BaseUrl(String);

/// Text that is not an http(s) URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be an http(s) URL, like https://api.openai.com/v1")]
pub struct NotAnHttpUrl;

impl BaseUrl {
    /// Checks that `text` is an http(s) URL.
    ///
    /// # Errors
    /// Another scheme, or not a URL at all.
    pub fn parse(text: &str) -> Result<Self, NotAnHttpUrl> {
        let trimmed = text.trim().trim_end_matches('/');
        match url::Url::parse(trimmed) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.has_host() => {
                Ok(Self(trimmed.to_owned()))
            }
            _ => Err(NotAnHttpUrl),
        }
    }

    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl<'de> Deserialize<'de> for BaseUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for BaseUrl {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "BaseUrl".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        String::json_schema(generator)
    }
}

/// The candidate closest to `given`, if any is close enough to be a typo.
pub fn closest<'a>(given: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|candidate| (strsim::jaro_winkler(given, candidate), candidate))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_http_urls_kept_without_a_trailing_slash() {
        let url = BaseUrl::parse("http://127.0.0.1:8080/v1/").expect("valid");
        assert_eq!(url.as_str(), "http://127.0.0.1:8080/v1");
        assert_eq!(
            BaseUrl::parse("https://api.anthropic.com").map(|url| url.to_string()),
            Ok("https://api.anthropic.com".to_owned())
        );
        for bad in ["ftp://x", "api.openai.com/v1", "", "http://"] {
            assert_eq!(BaseUrl::parse(bad), Err(NotAnHttpUrl), "{bad}");
        }
    }

    #[test]
    fn counts_of_zero_are_refused_and_durations_keep_their_unit() {
        #[derive(Deserialize)]
        struct Sample {
            #[serde(deserialize_with = "at_least_one::deserialize")]
            count: NonZeroU32,
            #[serde(with = "millis")]
            wait: Duration,
            #[serde(with = "hours")]
            keep: Duration,
        }
        let parsed: Sample =
            serde_json::from_str(r#"{"count": 2, "wait": 250, "keep": 72}"#).expect("parses");
        assert_eq!(parsed.count.get(), 2);
        assert_eq!(parsed.wait, Duration::from_millis(250));
        assert_eq!(parsed.keep, Duration::from_secs(72 * 3600));
        let zero = serde_json::from_str::<Sample>(r#"{"count": 0, "wait": 1, "keep": 1}"#);
        assert!(zero.is_err_and(|err| err.to_string().contains("must be at least 1")));
    }
}
