//! Cached tool results: the key a call is stored under, and the lookup and
//! store the agent loop does around a cacheable tool's call.
//!
//! A tool opts in with [`Tool::cache_policy`](super::Tool::cache_policy)
//! (the calculator by nature; MCP tools by `cache_ttl_secs`). The key is the
//! SHA-256 of the tool name, the canonical JSON of the arguments (keys
//! sorted, no spaces: two spellings of the same call hit the same row) and,
//! for a per-user tool, the principal (or the session, without one). The
//! value is the exact result text the model saw from the live call, so a
//! hit leaves the history's bytes as a live call would. Only successful
//! results are stored. The rows live in the database (`tool_cache`), shared
//! by every instance; see [`crate::store::ToolCache::get`].

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::CachePolicy;
use crate::domain::{PrincipalId, SessionId, canonical_json};

/// Whose calls share cached results.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub principal_id: Option<PrincipalId>,
    pub session_id: &'a SessionId,
}

/// The cache key of a call: hex SHA-256 over the tool name, the canonical
/// arguments and, for a per-user tool, who calls.
pub fn cache_key(tool: &str, args: &Value, policy: CachePolicy, caller: Caller<'_>) -> String {
    let mut hasher = Sha256::new();
    hasher.update(tool.as_bytes());
    hasher.update([0]);
    hasher.update(canonical_json(args).as_bytes());
    hasher.update([0]);
    if policy.per_user {
        let whose = match caller.principal_id {
            Some(principal) => format!("principal:{principal}"),
            None => format!("session:{}", caller.session_id.as_str()),
        };
        hasher.update(whose.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// The TTL in milliseconds, as the store takes it.
pub fn ttl_ms(policy: CachePolicy) -> i64 {
    i64::try_from(policy.ttl.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn policy(per_user: bool) -> CachePolicy {
        CachePolicy {
            ttl: Duration::from_secs(60),
            per_user,
        }
    }

    #[test]
    fn the_key_ignores_argument_order_and_depends_on_tool_and_values() {
        let session = SessionId::generate();
        let caller = Caller {
            principal_id: Some(PrincipalId::new(1)),
            session_id: &session,
        };
        let a = cache_key("t", &json!({"a": 1, "b": 2}), policy(false), caller);
        let b = cache_key("t", &json!({"b": 2, "a": 1}), policy(false), caller);
        assert_eq!(a, b);
        assert_ne!(
            a,
            cache_key("u", &json!({"a": 1, "b": 2}), policy(false), caller)
        );
        assert_ne!(
            a,
            cache_key("t", &json!({"a": 1, "b": 3}), policy(false), caller)
        );
    }

    #[test]
    fn a_shared_tool_ignores_the_caller_and_a_per_user_tool_does_not() {
        let (s1, s2) = (SessionId::generate(), SessionId::generate());
        let one = Caller {
            principal_id: Some(PrincipalId::new(1)),
            session_id: &s1,
        };
        let two = Caller {
            principal_id: Some(PrincipalId::new(2)),
            session_id: &s2,
        };
        let args = json!({"x": 1});
        assert_eq!(
            cache_key("t", &args, policy(false), one),
            cache_key("t", &args, policy(false), two)
        );
        assert_ne!(
            cache_key("t", &args, policy(true), one),
            cache_key("t", &args, policy(true), two)
        );
        let anonymous = Caller {
            principal_id: None,
            session_id: &s1,
        };
        let other_session = Caller {
            principal_id: None,
            session_id: &s2,
        };
        assert_ne!(
            cache_key("t", &args, policy(true), anonymous),
            cache_key("t", &args, policy(true), other_session)
        );
    }
}
