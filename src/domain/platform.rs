//! The platforms served inside this process (the HTTP API, the terminal),
//! named in one place: their replies go to a caller waiting in this process,
//! not through a platform adapter, and their senders need no allowlist.

/// Platforms served inside this process, whose replies are handed to a
/// waiting caller (the HTTP API's request, the terminal) rather than sent
/// to a platform, and whose senders need no allowlist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalPlatform {
    /// The OpenAI-compatible HTTP API.
    Api,
    /// `switchboard chat`.
    Terminal,
}

impl LocalPlatform {
    pub const ALL: [Self; 2] = [Self::Api, Self::Terminal];

    /// The platform name its messages carry.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::Terminal => "terminal",
        }
    }

    /// The local platform of this name, if it is one.
    pub fn of(platform: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|local| local.name() == platform)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_platforms_are_found_by_their_names_only() {
        for local in LocalPlatform::ALL {
            assert_eq!(LocalPlatform::of(local.name()), Some(local));
        }
        assert_eq!(LocalPlatform::of("telegram"), None);
        assert_eq!(LocalPlatform::of("API"), None);
    }

    #[test]
    fn local_platform_names_are_valid_platform_names() {
        for local in LocalPlatform::ALL {
            let name = switchboard_contract::PlatformName::parse(local.name());
            assert_eq!(name.as_ref().map(|n| n.as_str()), Ok(local.name()));
        }
    }
}
