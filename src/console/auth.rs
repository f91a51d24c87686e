//! The console's admin credential: a password checked against an argon2
//! hash (`console.password_hash`) and/or a bearer key from the environment
//! (`console.admin_key_env`); sessions as signed stateless cookies; and the
//! guard every console route passes through.
//!
//! A session cookie is `s.EXPIRES.NONCE.MAC`: the expiry (Unix ms), a random
//! nonce and an HMAC-SHA256 of both under a key derived from the secret in
//! `console.secret_env`. Any instance holding the same secret accepts it,
//! so sessions work across instances sharing a database without a table.
//! It is `HttpOnly`, `SameSite=Strict`, scoped to `/console`, and `Secure`
//! when `console.secure_cookie` is set. The login form gets a pre-login
//! cookie of the same shape (`p.…`, scoped to `/console/login`).
//!
//! Every state-changing request (any method but GET and HEAD) must come
//! from the console's own origin (`Origin` matching `Host`, and no
//! `Sec-Fetch-Site: cross-site`), and a cookie session's must carry the
//! session's CSRF token (the form field `csrf` or the `X-CSRF-Token`
//! header): an HMAC of the session's nonce, which a page of another site can
//! neither read nor compute. A bearer-key request needs no token: a browser
//! never adds that header on its own.

use std::sync::Arc;

use argon2::Argon2;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use axum::body::{Body, to_bytes};
use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, COOKIE, HOST, ORIGIN};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::ConsoleState;
use crate::config::{ConfigError, ConsoleSettings};

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "sb_console";
/// The pre-login cookie's name (it carries the login form's CSRF token).
pub const LOGIN_COOKIE: &str = "sb_console_login";
/// The login page.
pub const LOGIN_PATH: &str = "/console/login";
/// Shortest accepted cookie secret.
const MIN_SECRET_CHARS: usize = 32;
/// How long a login form stays valid.
const LOGIN_FORM_MS: i64 = 3_600_000;
/// Largest form body the guard reads to find the CSRF token.
const MAX_FORM_BYTES: usize = 64 * 1024;

type HmacSha256 = Hmac<Sha256>;

/// Who was let in, as the handlers see it.
#[derive(Debug, Clone)]
pub struct Admin {
    /// The CSRF token forms must carry (empty for a bearer-key request).
    pub csrf: String,
}

/// The kinds of signed cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A logged-in session.
    Session,
    /// A login form waiting to be sent.
    Login,
}

impl Kind {
    fn tag(self) -> &'static str {
        match self {
            Self::Session => "s",
            Self::Login => "p",
        }
    }
}

/// A verified cookie: its nonce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    kind: Kind,
    nonce: String,
}

/// The credentials and cookie keys, read once at start.
pub struct Credentials {
    mac_key: SecretString,
    password_hash: Option<String>,
    admin_key: Option<[u8; 32]>,
    secure_cookie: bool,
    session_ms: i64,
}

impl Credentials {
    /// Reads the secret and the admin key from the environment variables
    /// the settings name.
    ///
    /// # Errors
    /// The secret is unset or too short, or neither a password hash nor an
    /// admin key is configured.
    pub fn from_settings(settings: &ConsoleSettings) -> Result<Self, ConfigError> {
        let secret = std::env::var(&settings.secret_env).unwrap_or_default();
        if secret.trim().chars().count() < MIN_SECRET_CHARS {
            return Err(ConfigError::Invalid {
                key: "console.secret_env",
                reason: format!(
                    "the environment variable `{}` must hold a secret of at least \
                     {MIN_SECRET_CHARS} characters (the same on every instance)",
                    settings.secret_env
                ),
            });
        }
        let admin_key = std::env::var(&settings.admin_key_env)
            .ok()
            .map(|key| key.trim().to_owned())
            .filter(|key| !key.is_empty())
            .map(|key| Sha256::digest(key.as_bytes()).into());
        let password_hash = settings
            .password_hash
            .as_deref()
            .map(str::trim)
            .filter(|hash| !hash.is_empty())
            .map(str::to_owned);
        if password_hash.is_none() && admin_key.is_none() {
            return Err(ConfigError::Invalid {
                key: "console.password_hash",
                reason: format!(
                    "the console needs a password hash (`switchboard console-hash`) or an \
                     admin key in the environment variable `{}`",
                    settings.admin_key_env
                ),
            });
        }
        // A key of its own for the console, whatever else the secret is
        // used for.
        let derived = Sha256::digest(format!("switchboard-console:{}", secret.trim()).as_bytes());
        Ok(Self {
            mac_key: SecretString::from(hex::encode(derived)),
            password_hash,
            admin_key,
            secure_cookie: settings.secure_cookie,
            session_ms: crate::domain::millis(settings.session_lifetime),
        })
    }

    /// Whether password login is configured.
    #[must_use]
    pub fn has_password(&self) -> bool {
        self.password_hash.is_some()
    }

    /// Whether an admin bearer key is configured.
    #[must_use]
    pub fn has_admin_key(&self) -> bool {
        self.admin_key.is_some()
    }

    fn mac(&self, payload: &str) -> String {
        // HMAC takes a key of any length.
        let mut mac = HmacSha256::new_from_slice(self.mac_key.expose_secret().as_bytes())
            .expect("HMAC accepts any key length");
        mac.update(payload.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    /// A new signed cookie value of `kind`, valid from `now_ms` for its
    /// kind's lifetime.
    #[must_use]
    pub fn issue(&self, kind: Kind, now_ms: i64) -> (String, Token) {
        let lifetime = match kind {
            Kind::Session => self.session_ms,
            Kind::Login => LOGIN_FORM_MS,
        };
        let expires = now_ms.saturating_add(lifetime);
        let nonce = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        let payload = format!("{}.{expires}.{nonce}", kind.tag());
        let value = format!("{payload}.{}", self.mac(&payload));
        (value, Token { kind, nonce })
    }

    /// The token of a cookie value of `kind` that this secret signed and
    /// that has not expired at `now_ms`.
    #[must_use]
    pub fn verify(&self, value: &str, kind: Kind, now_ms: i64) -> Option<Token> {
        let (payload, mac) = value.rsplit_once('.')?;
        let mut parts = payload.splitn(3, '.');
        let (tag, expires, nonce) = (parts.next()?, parts.next()?, parts.next()?);
        let expected = self.mac(payload);
        if !bool::from(expected.as_bytes().ct_eq(mac.as_bytes())) || tag != kind.tag() {
            return None;
        }
        let expires: i64 = expires.parse().ok()?;
        (expires > now_ms).then(|| Token {
            kind,
            nonce: nonce.to_owned(),
        })
    }

    /// The CSRF token of a session (or login form).
    #[must_use]
    pub fn csrf(&self, token: &Token) -> String {
        self.mac(&format!("csrf.{}.{}", token.kind.tag(), token.nonce))
    }

    /// Whether `presented` is the CSRF token of `token`.
    #[must_use]
    pub fn csrf_matches(&self, token: &Token, presented: &str) -> bool {
        bool::from(self.csrf(token).as_bytes().ct_eq(presented.as_bytes()))
    }

    /// Whether `password` matches the configured hash.
    #[must_use]
    pub fn password_matches(&self, password: &str) -> bool {
        let Some(hash) = &self.password_hash else {
            return false;
        };
        PasswordHash::new(hash).is_ok_and(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
    }

    /// Whether the request carries the admin bearer key.
    fn bearer_matches(&self, headers: &HeaderMap) -> bool {
        let Some(expected) = &self.admin_key else {
            return false;
        };
        let presented = headers
            .get(AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim);
        presented.is_some_and(|key| {
            bool::from(Sha256::digest(key.as_bytes()).ct_eq(expected.as_slice()))
        })
    }

    /// The `Set-Cookie` value that stores `value` as `name` for `path`
    /// (`None`: removes it).
    #[must_use]
    pub fn set_cookie(&self, name: &str, value: Option<&str>, path: &str) -> String {
        let secure = if self.secure_cookie { "; Secure" } else { "" };
        match value {
            Some(value) => {
                let max_age = if name == SESSION_COOKIE {
                    self.session_ms / 1000
                } else {
                    LOGIN_FORM_MS / 1000
                };
                format!(
                    "{name}={value}; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
                )
            }
            None => format!("{name}=; Path={path}; Max-Age=0; HttpOnly; SameSite=Strict{secure}"),
        }
    }
}

/// The argon2 hash (PHC string) of a password, for `console.password_hash`.
///
/// # Errors
/// Argon2 refused the input (a password too long for it).
pub fn hash_password(password: &str) -> Result<String, argon2::password_hash::Error> {
    let salt = SaltString::encode_b64(uuid::Uuid::new_v4().as_bytes())?;
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)?
        .to_string())
}

/// The value of the cookie `name` in the request, if any.
#[must_use]
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Whether a state-changing request comes from the console's own origin:
/// no `Sec-Fetch-Site: cross-site`, and an `Origin` (when sent) naming the
/// host the request was sent to (`Host`, or `X-Forwarded-Host` as a reverse
/// proxy passes it: a page of another site cannot set either on a form).
#[must_use]
pub fn same_origin(headers: &HeaderMap) -> bool {
    let fetch_site = headers
        .get("sec-fetch-site")
        .and_then(|value| value.to_str().ok());
    if matches!(fetch_site, Some("cross-site" | "same-site")) {
        return false;
    }
    let Some(origin) = headers.get(ORIGIN) else {
        return true;
    };
    let Some(origin_host) = origin
        .to_str()
        .ok()
        .and_then(|origin| origin.split_once("://"))
        .map(|(_, rest)| rest.trim_end_matches('/'))
    else {
        return false;
    };
    let forwarded = headers
        .get("x-forwarded-host")
        .and_then(|value| value.to_str().ok())
        .and_then(|hosts| hosts.split(',').next())
        .map(str::trim);
    let host = headers.get(HOST).and_then(|value| value.to_str().ok());
    [host, forwarded]
        .into_iter()
        .flatten()
        .any(|host| origin_host.eq_ignore_ascii_case(host))
}

/// Lets a request through when it carries the admin key or a valid session
/// cookie, and, unless it only reads, comes from the console's own origin
/// with the session's CSRF token. The login page is let through (it checks
/// its own form). A refused read is sent to the login page; a refused write
/// gets 401 (no credential) or 403 (cross-site).
pub async fn guard(
    State(state): State<Arc<ConsoleState>>,
    request: Request,
    next: Next,
) -> Response {
    if request.uri().path() == LOGIN_PATH {
        return next.run(request).await;
    }
    let credentials = &state.credentials;
    let reads = matches!(*request.method(), Method::GET | Method::HEAD);
    let now = crate::domain::now_ms();
    let session = cookie(request.headers(), SESSION_COOKIE)
        .and_then(|value| credentials.verify(value, Kind::Session, now));
    let bearer = credentials.bearer_matches(request.headers());
    if session.is_none() && !bearer {
        return if reads {
            Redirect::to(LOGIN_PATH).into_response()
        } else {
            (StatusCode::UNAUTHORIZED, "log in to the console first").into_response()
        };
    }
    if reads {
        let csrf = session
            .as_ref()
            .map(|token| credentials.csrf(token))
            .unwrap_or_default();
        let mut request = request;
        request.extensions_mut().insert(Admin { csrf });
        return next.run(request).await;
    }
    if !same_origin(request.headers()) {
        tracing::warn!(path = %request.uri().path(), "console: cross-site request refused");
        return (StatusCode::FORBIDDEN, "cross-site request refused").into_response();
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = to_bytes(body, MAX_FORM_BYTES).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "form too large").into_response();
    };
    let csrf = match &session {
        // A bearer key in the request: no browser sent it by itself.
        _ if bearer => String::new(),
        Some(token) => {
            let presented = parts
                .headers
                .get("x-csrf-token")
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
                .or_else(|| form_field(&bytes, "csrf"));
            if !presented.is_some_and(|presented| credentials.csrf_matches(token, &presented)) {
                tracing::warn!(path = %parts.uri.path(), "console: missing or wrong CSRF token");
                return (StatusCode::FORBIDDEN, "missing or wrong CSRF token").into_response();
            }
            credentials.csrf(token)
        }
        None => return StatusCode::UNAUTHORIZED.into_response(),
    };
    let mut request = Request::from_parts(parts, Body::from(bytes));
    request.extensions_mut().insert(Admin { csrf });
    next.run(request).await
}

/// The first value of `name` in a URL-encoded form body.
#[must_use]
pub fn form_field(body: &[u8], name: &str) -> Option<String> {
    url::form_urlencoded::parse(body)
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials() -> Credentials {
        Credentials {
            mac_key: SecretString::from("k".repeat(64)),
            password_hash: Some(hash_password("correct horse").expect("hashes")),
            admin_key: None,
            secure_cookie: true,
            session_ms: 3_600_000,
        }
    }

    #[test]
    fn a_signed_cookie_verifies_until_it_expires_and_only_as_its_kind() {
        let credentials = credentials();
        let (value, token) = credentials.issue(Kind::Session, 1_000);
        assert_eq!(
            credentials.verify(&value, Kind::Session, 2_000),
            Some(token)
        );
        assert_eq!(credentials.verify(&value, Kind::Login, 2_000), None);
        assert_eq!(credentials.verify(&value, Kind::Session, 3_601_000), None);
        let tampered = value.replacen("s.", "s.9", 1);
        assert_eq!(credentials.verify(&tampered, Kind::Session, 2_000), None);
    }

    #[test]
    fn csrf_tokens_belong_to_their_session() {
        let credentials = credentials();
        let (_, first) = credentials.issue(Kind::Session, 0);
        let (_, second) = credentials.issue(Kind::Session, 0);
        let token = credentials.csrf(&first);
        assert!(credentials.csrf_matches(&first, &token));
        assert!(!credentials.csrf_matches(&second, &token));
        assert!(!credentials.csrf_matches(&first, ""));
    }

    #[test]
    fn passwords_are_checked_against_the_hash() {
        let credentials = credentials();
        assert!(credentials.password_matches("correct horse"));
        assert!(!credentials.password_matches("wrong"));
        let cookie = credentials.set_cookie(SESSION_COOKIE, Some("v"), "/console");
        assert_eq!(
            cookie,
            "sb_console=v; Path=/console; Max-Age=3600; HttpOnly; SameSite=Strict; Secure"
        );
    }

    #[test]
    fn only_the_own_origin_may_post() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.insert(*name, value.parse().expect("header"));
            }
            map
        };
        assert!(same_origin(&headers(&[("host", "a:8080")])));
        assert!(same_origin(&headers(&[
            ("host", "a:8080"),
            ("origin", "http://a:8080")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "a:8080"),
            ("origin", "https://evil.example")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "a:8080"),
            ("origin", "null")
        ])));
        assert!(same_origin(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("x-forwarded-host", "console.example.com"),
            ("origin", "https://console.example.com")
        ])));
        assert!(!same_origin(&headers(&[
            ("host", "a:8080"),
            ("sec-fetch-site", "cross-site")
        ])));
    }
}
