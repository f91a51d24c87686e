//! The `http_get` tool: fetches a public http(s) URL and returns its status,
//! content type and (size-capped) body as text.
//!
//! Owns the URL policy and its enforcement: allowed schemes, the host allow
//! and deny lists, and the ban on private, loopback, link-local and other
//! non-public addresses. The policy is checked up front for the URL given,
//! again for every redirect hop (custom [`reqwest::redirect::Policy`]), and
//! for every resolved address (custom [`reqwest::dns::Resolve`] on the
//! client), so a public name that resolves to an internal address (DNS
//! rebinding) or a redirect to one is refused. Proxies from the environment
//! are ignored, since a proxy would resolve names itself.
//!
//! One [`reqwest::Client`] is built per [`HttpGet`] and kept for the life of
//! the tool (the registry keeps tools for the life of the process), so its
//! connection pool survives turns.

use std::error::Error as StdError;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::header::CONTENT_TYPE;
use reqwest::redirect::Policy;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use url::{Host, Url};

use super::{Tool, ToolContext, ToolError, arguments_schema};
use crate::domain::setting;

/// Limits and host rules for [`HttpGet`].
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct HttpGetConfig {
    /// If non-empty, only these hosts and their subdomains may be fetched
    /// (case-insensitive; IP literals match exactly).
    pub allow_hosts: Vec<String>,
    /// These hosts and their subdomains may never be fetched.
    pub deny_hosts: Vec<String>,
    /// Allow private, loopback, link-local and other non-public addresses.
    pub allow_private: bool,
    /// Bodies are cut off after this many bytes.
    pub max_bytes: usize,
    /// Bound on the whole request, redirects and body included (at least 1).
    #[serde(
        rename = "timeout_secs",
        deserialize_with = "setting::secs::deserialize"
    )]
    #[schemars(with = "u64")]
    pub timeout: Duration,
    /// Redirects followed before giving up.
    pub max_redirects: usize,
}

impl Default for HttpGetConfig {
    fn default() -> Self {
        Self {
            allow_hosts: Vec::new(),
            deny_hosts: Vec::new(),
            allow_private: false,
            max_bytes: 512 * 1024,
            timeout: Duration::from_secs(15),
            max_redirects: 5,
        }
    }
}

impl HttpGetConfig {
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }
}

/// Fetches web pages for the model; holds one long-lived HTTP client.
pub struct HttpGet {
    client: reqwest::Client,
    config: HttpGetConfig,
}

const DESCRIPTION: &str = "Fetch a web page or other text resource with an HTTP GET request and \
return its content. Use it to read a specific public URL (documentation, an article, a JSON API, \
a raw file) when you need its current content; it does not search the web. Argument `url`: an \
absolute http:// or https:// URL. Redirects are followed. Private, local-network and loopback \
addresses and some hosts are not allowed. Returns `url` (the final URL after redirects), \
`status` (HTTP status code; an error status such as 404 is still returned as a result, check \
it), `content_type` (the Content-Type header, or null), `body` (the response body as text; \
HTML is returned raw) and `truncated` (true if the body was cut off at the size limit).";

impl HttpGet {
    /// Builds the tool and its HTTP client.
    ///
    /// # Errors
    /// If the HTTP client cannot be built (TLS backend initialisation).
    pub fn new(config: HttpGetConfig) -> Result<Self, reqwest::Error> {
        let client = guarded_client(
            &config,
            concat!("switchboard-http-get/", env!("CARGO_PKG_VERSION")),
        )?;
        Ok(Self { client, config })
    }

    pub fn config(&self) -> &HttpGetConfig {
        &self.config
    }

    async fn fetch(&self, url: Url) -> Result<Value, ToolError> {
        let mut response = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| self.failure(&e))?;
        let status = response.status().as_u16();
        let final_url = response.url().to_string();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);

        let max = self.config.max_bytes;
        let expected = response
            .content_length()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(8 * 1024);
        let mut body = Vec::with_capacity(expected.min(max));
        let mut truncated = false;
        while let Some(chunk) = response.chunk().await.map_err(|e| self.failure(&e))? {
            let room = max - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        // Dropping the response here closes the connection if unread.
        drop(response);

        Ok(json!({
            "url": final_url,
            "status": status,
            "content_type": content_type,
            "body": body_text(body, truncated),
            "truncated": truncated,
        }))
    }

    /// A short message for the model; the details go to the log.
    fn failure(&self, error: &reqwest::Error) -> ToolError {
        tracing::debug!(error = %error, source = ?error.source(), "http_get request failed");
        ToolError::Failed(failure_text(error, self.config.timeout()))
    }

    fn timeout_message(&self) -> String {
        timeout_text(self.config.timeout())
    }
}

#[async_trait]
impl Tool for HttpGet {
    fn name(&self) -> &'static str {
        "http_get"
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
        let url = url_arg(args)?;
        check_url(&url, &self.config).map_err(|refusal| {
            ToolError::InvalidArguments(format!("cannot fetch {url}: {refusal}"))
        })?;
        match tokio::time::timeout(self.config.timeout(), self.fetch(url)).await {
            Ok(result) => result,
            Err(_) => Err(ToolError::Failed(self.timeout_message())),
        }
    }
}

/// The arguments. Other fields are ignored, though the schema forbids them.
#[derive(Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
struct Args {
    /// Absolute http:// or https:// URL to fetch.
    url: String,
}

fn url_arg(args: Value) -> Result<Url, ToolError> {
    let Args { url } = serde_json::from_value(args).map_err(|_| {
        ToolError::InvalidArguments(
            "`url` is required and must be a string like \"https://example.com/\"".to_owned(),
        )
    })?;
    let raw = url.trim();
    Url::parse(raw).map_err(|e| {
        let hint = if raw.contains("://") {
            ""
        } else {
            " (include the scheme, e.g. https://)"
        };
        ToolError::InvalidArguments(format!("`url` is not a valid URL: {e}{hint}"))
    })
}

/// A client that keeps `config`'s URL policy on every redirect hop and
/// every resolved address (see the module docs), with its redirect limit and
/// timeout, and no proxy; also what the API fetches `image_url`s with.
///
/// # Errors
/// If the HTTP client cannot be built (TLS backend initialisation).
pub(crate) fn guarded_client(
    config: &HttpGetConfig,
    user_agent: &str,
) -> Result<reqwest::Client, reqwest::Error> {
    let policy_config = Arc::new(config.clone());
    reqwest::Client::builder()
        .user_agent(user_agent)
        .no_proxy()
        .dns_resolver(Arc::new(GuardedResolver {
            allow_private: config.allow_private,
        }))
        .redirect(Policy::custom(move |attempt| {
            if attempt.previous().len() > policy_config.max_redirects {
                let message = format!(
                    "too many redirects (the limit is {})",
                    policy_config.max_redirects
                );
                return attempt.error(Shown(message));
            }
            match check_url(attempt.url(), &policy_config) {
                Ok(()) => attempt.follow(),
                Err(refusal) => {
                    let message = format!("redirect refused: {refusal}");
                    attempt.error(Shown(message))
                }
            }
        }))
        .timeout(config.timeout())
        .build()
}

/// Why `url` may not be fetched under `config` (scheme, host lists, a
/// non-public IP literal), if it may not; checked before a request, the
/// client of [`guarded_client`] checking redirects and resolved addresses.
pub(crate) fn refusal_of(url: &Url, config: &HttpGetConfig) -> Option<String> {
    check_url(url, config).err().map(|refusal| refusal.0)
}

/// What to tell a user about a failed request of a [`guarded_client`]
/// whose timeout is `timeout`: the policy's own words for a refused
/// redirect or address, else a short description without the URL.
pub(crate) fn failure_text(error: &reqwest::Error, timeout: Duration) -> String {
    if let Some(message) = shown_message(error) {
        return message;
    }
    if error.is_timeout() {
        timeout_text(timeout)
    } else if error.is_redirect() {
        "the redirect could not be followed".to_owned()
    } else if error.is_connect() {
        "could not connect to the server".to_owned()
    } else if error.is_body() || error.is_decode() {
        "the connection failed while reading the response".to_owned()
    } else {
        "the request failed".to_owned()
    }
}

fn timeout_text(timeout: Duration) -> String {
    format!("the request timed out after {} s", timeout.as_secs())
}

/// An error whose message is meant for the model; found in reqwest's error
/// chain to explain refused redirects and resolutions.
#[derive(Debug)]
struct Shown(String);

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for Shown {}

fn shown_message(error: &(dyn StdError + 'static)) -> Option<String> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(shown) = e.downcast_ref::<Shown>() {
            return Some(shown.0.clone());
        }
        current = e.source();
    }
    None
}

/// Why a URL may not be fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Refusal(String);

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Scheme, allow/deny list and (for IP literals) address checks.
fn check_url(url: &Url, config: &HttpGetConfig) -> Result<(), Refusal> {
    let scheme = url.scheme();
    if scheme != "http" && scheme != "https" {
        return Err(Refusal(format!(
            "only http and https URLs are allowed, not {scheme}:"
        )));
    }
    let (host, ip) = match url.host() {
        Some(Host::Domain(domain)) => (normalize_host(domain), None),
        Some(Host::Ipv4(v4)) => (v4.to_string(), Some(IpAddr::V4(v4))),
        Some(Host::Ipv6(v6)) => (v6.to_string(), Some(IpAddr::V6(v6))),
        None => return Err(Refusal("the URL has no host".to_owned())),
    };
    if config
        .deny_hosts
        .iter()
        .any(|pattern| host_matches(&host, ip, pattern))
    {
        return Err(Refusal(format!("the host {host} is on the deny list")));
    }
    if !config.allow_hosts.is_empty()
        && !config
            .allow_hosts
            .iter()
            .any(|pattern| host_matches(&host, ip, pattern))
    {
        return Err(Refusal(format!("the host {host} is not on the allow list")));
    }
    if let Some(ip) = ip
        && !config.allow_private
        && !is_public_ip(ip)
    {
        return Err(Refusal(format!(
            "{ip} is a private, loopback, link-local or otherwise non-public address"
        )));
    }
    Ok(())
}

fn normalize_host(host: &str) -> String {
    host.trim()
        .trim_start_matches("*.")
        .trim_start_matches('.')
        .trim_end_matches('.')
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase()
}

/// Whether `host` (normalised) is `pattern` or, for names, a subdomain of it.
fn host_matches(host: &str, ip: Option<IpAddr>, pattern: &str) -> bool {
    let pattern = normalize_host(pattern);
    if pattern.is_empty() {
        return false;
    }
    match ip {
        Some(ip) => pattern.parse::<IpAddr>().is_ok_and(|p| p == ip),
        None => {
            host == pattern
                || host
                    .strip_suffix(pattern.as_str())
                    .is_some_and(|rest| rest.ends_with('.'))
        }
    }
}

/// Whether `ip` is a globally routable unicast address.
fn is_public_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let reserved = a == 0 // "this network"
        || a == 10 // private
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64/10
        || a == 127 // loopback
        || (a == 169 && b == 254) // link-local, cloud metadata
        || (a == 172 && (16..32).contains(&b)) // private
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2) // documentation
        || (a == 192 && b == 168) // private
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || (a == 198 && b == 51 && c == 100) // documentation
        || (a == 203 && b == 0 && c == 113) // documentation
        || a >= 224; // multicast, reserved, broadcast
    !reserved
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let s = ip.segments();
    let embedded = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        Ipv4Addr::new(a, b, c, d)
    };
    // NAT64 64:ff9b::/96 embeds an IPv4 address in the last 32 bits.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return is_public_v4(embedded(s[6], s[7]));
    }
    // 6to4 2002::/16 embeds an IPv4 address in bits 16..48.
    if s[0] == 0x2002 {
        return is_public_v4(embedded(s[1], s[2]));
    }
    // Only 2000::/3 is global unicast. Outside it: ::/8 (unspecified,
    // loopback, IPv4-compatible), 100::/64 discard, 64:ff9b:1::/48 local
    // NAT64, fc00::/7 unique local, fe80::/10 link-local, fec0::/10
    // site-local, ff00::/8 multicast.
    if s[0] & 0xe000 != 0x2000 {
        return false;
    }
    // 2001::/23: IETF assignments (Teredo, benchmarking, ORCHID);
    // 2001:db8::/32 and 3fff::/20: documentation.
    let special =
        (s[0] == 0x2001 && (s[1] < 0x0200 || s[1] == 0x0db8)) || (s[0] == 0x3fff && s[1] < 0x1000);
    !special
}

/// Resolves names with the system resolver and drops non-public addresses
/// unless private ones are allowed; used for every connection the client
/// makes, redirects included.
struct GuardedResolver {
    allow_private: bool,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(resolve_guarded(
            name.as_str().to_owned(),
            self.allow_private,
        ))
    }
}

async fn resolve_guarded(
    host: String,
    allow_private: bool,
) -> Result<Addrs, Box<dyn StdError + Send + Sync>> {
    let resolved: Vec<SocketAddr> = match tokio::net::lookup_host((host.as_str(), 0)).await {
        Ok(addrs) => addrs.collect(),
        Err(error) => {
            tracing::debug!(%host, %error, "http_get: name resolution failed");
            return Err(Box::new(Shown(format!(
                "could not resolve the host {host}"
            ))));
        }
    };
    let found = resolved.len();
    let allowed: Vec<SocketAddr> = resolved
        .into_iter()
        .filter(|addr| allow_private || is_public_ip(addr.ip()))
        .collect();
    if allowed.is_empty() {
        let message = if found == 0 {
            format!("could not resolve the host {host}")
        } else {
            format!(
                "the host {host} resolves to a private, loopback, link-local or otherwise \
                 non-public address"
            )
        };
        return Err(Box::new(Shown(message)));
    }
    Ok(Box::new(allowed.into_iter()))
}

/// Lossy UTF-8; a multi-byte character cut by truncation is dropped rather
/// than shown as a replacement character.
fn body_text(mut body: Vec<u8>, truncated: bool) -> String {
    if truncated {
        // The last chunk's invalid bytes sit at the very end of the body.
        let partial = body
            .utf8_chunks()
            .last()
            .map_or(0, |chunk| chunk.invalid().len());
        if (1..4).contains(&partial) {
            body.truncate(body.len() - partial);
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schema is in every cached prompt: its bytes must not drift.
    #[test]
    fn the_argument_schema_keeps_its_bytes() {
        let schema =
            serde_json::to_string(&HttpGet::new(HttpGetConfig::default()).unwrap().parameters())
                .unwrap();
        assert_eq!(
            schema,
            r#"{"additionalProperties":false,"properties":{"url":{"description":"Absolute http:// or https:// URL to fetch.","type":"string"}},"required":["url"],"type":"object"}"#
        );
    }

    use axum::Router;
    use axum::http::StatusCode;
    use axum::response::Redirect;
    use axum::routing::get;

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

    fn local_config() -> HttpGetConfig {
        HttpGetConfig {
            allow_private: true,
            ..HttpGetConfig::default()
        }
    }

    async fn serve() -> SocketAddr {
        let router = Router::new()
            .route("/", get(|| async { "hello" }))
            .route("/big", get(|| async { "x".repeat(10_000) }))
            .route("/utf8", get(|| async { "é".repeat(100) }))
            .route(
                "/missing",
                get(|| async { (StatusCode::NOT_FOUND, "nope") }),
            )
            .route("/to-root", get(|| async { Redirect::temporary("/") }))
            .route(
                "/to-denied",
                get(|| async { Redirect::temporary("http://denied.example/") }),
            )
            .route(
                "/to-ftp",
                get(|| async { Redirect::temporary("ftp://127.0.0.1/file") }),
            )
            .route("/loop", get(|| async { Redirect::temporary("/loop") }))
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(3)).await;
                    "late"
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            axum::serve(listener, router).await.unwrap();
        });
        addr
    }

    async fn get_url(tool: &HttpGet, url: &str) -> Result<Value, ToolError> {
        tool.call(&ctx(), json!({ "url": url })).await
    }

    fn invalid(result: Result<Value, ToolError>) -> String {
        match result {
            Err(ToolError::InvalidArguments(msg)) => msg,
            other => panic!("expected InvalidArguments, got {other:?}"),
        }
    }

    fn failed(result: Result<Value, ToolError>) -> String {
        match result {
            Err(ToolError::Failed(msg)) => msg,
            other => panic!("expected Failed, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn default_config_denies_loopback() {
        let addr = serve().await;
        let tool = HttpGet::new(HttpGetConfig::default()).unwrap();
        let msg = invalid(get_url(&tool, &format!("http://{addr}/")).await);
        assert!(msg.contains("127.0.0.1"), "{msg}");
        assert!(msg.contains("non-public"), "{msg}");
        // A name resolving to loopback is refused by the resolver.
        let msg = failed(get_url(&tool, &format!("http://localhost:{}/", addr.port())).await);
        assert!(msg.contains("localhost"), "{msg}");
        assert!(msg.contains("non-public"), "{msg}");
    }

    #[tokio::test]
    async fn allow_private_fetches() {
        let addr = serve().await;
        let tool = HttpGet::new(local_config()).unwrap();
        let v = get_url(&tool, &format!("http://{addr}/")).await.unwrap();
        assert_eq!(v["status"], 200);
        assert_eq!(v["body"], "hello");
        assert_eq!(v["truncated"], false);
        assert_eq!(v["url"], format!("http://{addr}/"));
        assert!(
            v["content_type"]
                .as_str()
                .unwrap()
                .starts_with("text/plain"),
            "{v}"
        );

        // Names go through the resolver too; the same client is reused.
        let v = get_url(&tool, &format!("http://localhost:{}/", addr.port()))
            .await
            .unwrap();
        assert_eq!(v["body"], "hello");

        // A non-2xx status is a result, not an error.
        let v = get_url(&tool, &format!("http://{addr}/missing"))
            .await
            .unwrap();
        assert_eq!(v["status"], 404);
        assert_eq!(v["body"], "nope");

        // Redirects are followed and the final URL reported.
        let v = get_url(&tool, &format!("http://{addr}/to-root"))
            .await
            .unwrap();
        assert_eq!(v["url"], format!("http://{addr}/"));
        assert_eq!(v["body"], "hello");
    }

    #[tokio::test]
    async fn schemes_and_bad_urls_rejected() {
        let tool = HttpGet::new(HttpGetConfig::default()).unwrap();
        let msg = invalid(get_url(&tool, "ftp://example.com/file").await);
        assert!(msg.contains("only http and https"), "{msg}");
        let msg = invalid(get_url(&tool, "file:///etc/passwd").await);
        assert!(msg.contains("only http and https"), "{msg}");
        let msg = invalid(get_url(&tool, "example.com/page").await);
        assert!(msg.contains("include the scheme"), "{msg}");
        let msg = invalid(tool.call(&ctx(), json!({})).await);
        assert!(msg.contains("`url` is required"), "{msg}");
    }

    #[tokio::test]
    async fn private_literals_rejected_up_front() {
        let tool = HttpGet::new(HttpGetConfig::default()).unwrap();
        for url in [
            "http://[::1]/",
            "http://10.0.0.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://0.0.0.0/",
            "http://100.64.0.1/",
            "http://172.16.5.4/",
            "http://192.168.1.1/",
            "https://[fd00::1]/",
            "http://[fe80::1]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:a9fe:a9fe]/",
            "http://[64:ff9b::a00:1]/",
            "http://[2002:c0a8:101::]/",
            "http://0x7f000001/",
            "http://2130706433/",
            "http://127.1/",
            "http://224.0.0.1/",
        ] {
            let msg = invalid(get_url(&tool, url).await);
            assert!(msg.contains("non-public"), "{url}: {msg}");
        }
    }

    #[tokio::test]
    async fn deny_list() {
        let addr = serve().await;
        let tool = HttpGet::new(HttpGetConfig {
            deny_hosts: vec!["127.0.0.1".to_owned(), "Evil.Example".to_owned()],
            ..local_config()
        })
        .unwrap();
        let msg = invalid(get_url(&tool, &format!("http://{addr}/")).await);
        assert!(msg.contains("deny list"), "{msg}");
        let msg = invalid(get_url(&tool, "https://api.evil.example/x").await);
        assert!(msg.contains("deny list"), "{msg}");
        let msg = invalid(get_url(&tool, "https://EVIL.example./x").await);
        assert!(msg.contains("deny list"), "{msg}");
    }

    #[tokio::test]
    async fn allow_list() {
        let addr = serve().await;
        let only_example = HttpGet::new(HttpGetConfig {
            allow_hosts: vec!["example.com".to_owned()],
            ..local_config()
        })
        .unwrap();
        let msg = invalid(get_url(&only_example, &format!("http://{addr}/")).await);
        assert!(msg.contains("not on the allow list"), "{msg}");
        let msg = invalid(get_url(&only_example, "https://notexample.com/").await);
        assert!(msg.contains("not on the allow list"), "{msg}");

        let only_local = HttpGet::new(HttpGetConfig {
            allow_hosts: vec!["127.0.0.1".to_owned()],
            ..local_config()
        })
        .unwrap();
        let v = get_url(&only_local, &format!("http://{addr}/"))
            .await
            .unwrap();
        assert_eq!(v["body"], "hello");
    }

    #[tokio::test]
    async fn body_truncated_at_max_bytes() {
        let addr = serve().await;
        let tool = HttpGet::new(HttpGetConfig {
            max_bytes: 1000,
            ..local_config()
        })
        .unwrap();
        let v = get_url(&tool, &format!("http://{addr}/big")).await.unwrap();
        assert_eq!(v["truncated"], true);
        assert_eq!(v["body"].as_str().unwrap().len(), 1000);

        // A multi-byte character cut in half is dropped, not mangled.
        let tool = HttpGet::new(HttpGetConfig {
            max_bytes: 101,
            ..local_config()
        })
        .unwrap();
        let v = get_url(&tool, &format!("http://{addr}/utf8"))
            .await
            .unwrap();
        assert_eq!(v["truncated"], true);
        assert_eq!(v["body"], "é".repeat(50));

        // Exactly at the limit is not truncated.
        let tool = HttpGet::new(HttpGetConfig {
            max_bytes: 10_000,
            ..local_config()
        })
        .unwrap();
        let v = get_url(&tool, &format!("http://{addr}/big")).await.unwrap();
        assert_eq!(v["truncated"], false);
        assert_eq!(v["body"].as_str().unwrap().len(), 10_000);
    }

    #[tokio::test]
    async fn redirects_are_checked() {
        let addr = serve().await;
        let tool = HttpGet::new(HttpGetConfig {
            deny_hosts: vec!["denied.example".to_owned()],
            max_redirects: 3,
            ..local_config()
        })
        .unwrap();
        let msg = failed(get_url(&tool, &format!("http://{addr}/to-denied")).await);
        assert!(msg.contains("redirect refused"), "{msg}");
        assert!(msg.contains("deny list"), "{msg}");

        let msg = failed(get_url(&tool, &format!("http://{addr}/to-ftp")).await);
        assert!(msg.contains("only http and https"), "{msg}");

        let msg = failed(get_url(&tool, &format!("http://{addr}/loop")).await);
        assert!(msg.contains("too many redirects"), "{msg}");
    }

    #[test]
    fn redirect_targets_use_the_same_rules() {
        // What the redirect policy applies to each hop; private targets are
        // checked here rather than over the network.
        let config = HttpGetConfig::default();
        for target in [
            "http://10.0.0.1/",
            "http://169.254.169.254/",
            "http://[::1]/",
            "ftp://example.com/",
        ] {
            let url = Url::parse(target).unwrap();
            assert!(check_url(&url, &config).is_err(), "{target}");
        }
        let url = Url::parse("https://example.com/").unwrap();
        assert_eq!(check_url(&url, &config), Ok(()));
    }

    #[tokio::test]
    async fn timeout_is_reported() {
        let addr = serve().await;
        let tool = HttpGet::new(HttpGetConfig {
            timeout: Duration::from_secs(1),
            ..local_config()
        })
        .unwrap();
        let started = std::time::Instant::now();
        let msg = failed(get_url(&tool, &format!("http://{addr}/slow")).await);
        assert_eq!(msg, "the request timed out after 1 s");
        assert!(started.elapsed() < Duration::from_secs(3));
    }

    #[tokio::test]
    async fn resolver_filters_private_addresses() {
        let guarded = GuardedResolver {
            allow_private: false,
        };
        let err = match guarded.resolve("localhost".parse().unwrap()).await {
            Err(err) => err,
            Ok(_) => panic!("localhost must not resolve"),
        };
        assert!(err.to_string().contains("non-public"), "{err}");

        let open = GuardedResolver {
            allow_private: true,
        };
        let addrs: Vec<_> = match open.resolve("localhost".parse().unwrap()).await {
            Ok(addrs) => addrs.collect(),
            Err(err) => panic!("{err}"),
        };
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
    }

    #[test]
    fn address_classes() {
        let public = [
            "8.8.8.8",
            "1.1.1.1",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001::1",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ];
        for ip in public {
            assert!(is_public_ip(ip.parse().unwrap()), "{ip} should be public");
        }
        let private = [
            "0.0.0.0",
            "10.1.2.3",
            "100.64.0.1",
            "100.127.255.255",
            "127.0.0.1",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.168.0.1",
            "198.18.0.1",
            "224.0.0.251",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:10.0.0.1",
            "::ffff:127.0.0.1",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b:1::1",
            "2002:a00:1::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "2001::1",
            "100::1",
        ];
        for ip in private {
            assert!(!is_public_ip(ip.parse().unwrap()), "{ip} should be private");
        }
    }

    #[test]
    fn host_matching() {
        assert!(host_matches("example.com", None, "example.com"));
        assert!(host_matches("api.example.com", None, "Example.COM"));
        assert!(host_matches("api.example.com", None, ".example.com"));
        assert!(host_matches("api.example.com", None, "*.example.com"));
        assert!(host_matches("example.com", None, "example.com."));
        assert!(!host_matches("badexample.com", None, "example.com"));
        assert!(!host_matches("example.com.evil", None, "example.com"));
        assert!(!host_matches("example.com", None, ""));
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        assert!(host_matches("10.0.0.1", Some(ip), "10.0.0.1"));
        assert!(!host_matches("10.0.0.1", Some(ip), "0.1"));
        let v6: IpAddr = "::1".parse().unwrap();
        assert!(host_matches("::1", Some(v6), "[::1]"));
        assert!(host_matches("::1", Some(v6), "0:0:0:0:0:0:0:1"));
    }

    #[test]
    fn config_defaults_and_deserialize() {
        let config: HttpGetConfig =
            serde_json::from_value(json!({"deny_hosts": ["x.test"]})).unwrap();
        assert_eq!(config.deny_hosts, ["x.test"]);
        assert!(config.allow_hosts.is_empty());
        assert!(!config.allow_private);
        assert_eq!(config.max_bytes, 512 * 1024);
        assert_eq!(config.timeout, Duration::from_secs(15));
        assert_eq!(config.max_redirects, 5);
        let tool = HttpGet::new(config).unwrap();
        assert_eq!(tool.name(), "http_get");
        assert!(tool.idempotent());
        assert_eq!(tool.config().max_redirects, 5);
    }
}
