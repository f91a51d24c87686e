//! One MCP server: its supervisor (connect, list tools, watch, restart with
//! backoff) and the calls its tools make.
//!
//! The supervisor is a task owned by the [`super::McpRegistry`]. It starts
//! the server (a child process speaking MCP on stdio, or a streamable HTTP
//! connection), lists its tools, then re-lists them every `refresh_secs`
//! (and at once when the server says its list changed). A server whose
//! connection closes (the process exited), which does not answer a listing
//! within `startup_timeout_secs` (hung) or which fails to start is dropped
//! (a child process is killed) and started again after the contract crate's
//! backoff, which starts from its base again once a server stayed up for a
//! refresh period. Meanwhile its tools stay listed, so sessions keep their prompt
//! prefix, and each call answers an error that says the server is
//! restarting; other tools are unaffected.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::ClientHandler;
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock,
    ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationCapability,
    FormElicitationCapability, ProgressNotificationParam,
};
use rmcp::service::{
    NotificationContext, Peer, RequestContext, RoleClient, RunningService, serve_client,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::TokioChildProcess;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Map, Value};
use switchboard_contract::backoff::{Backoff, Wait, wait};
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::elicit::Form;
use super::settings::{McpServerSettings, McpSettings, SEPARATOR};
use super::tool::McpTool;
use crate::tools::{AskPerson, Asked, ToolContext, ToolError, ToolFile, ToolOutput};

/// How a server is doing, as `switchboard tools` and the tests see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerStatus {
    pub name: String,
    /// Connected and answering.
    pub up: bool,
    /// Successful starts so far (a restart adds one).
    pub starts: u64,
    /// Tools listed (before the allow/deny lists).
    pub tools: usize,
    /// Tools it listed that are left out for their names (full name).
    pub misnamed: Vec<String>,
    /// Why it is down, when it is.
    pub error: Option<String>,
}

impl ServerStatus {
    /// `up`, `starting` (never started, first attempt under way) or `down`.
    #[must_use]
    pub fn state(&self) -> &'static str {
        if self.up {
            "up"
        } else if self.starts == 0 && self.error.as_deref() == Some(STARTING) {
            "starting"
        } else {
            "down"
        }
    }
}

/// Why a tool whose full name providers would refuse is left out.
pub const MISNAMED: &str = "its full name must be at most 64 letters, digits, `_` or `-`";

/// The down reason of a server whose first start is under way.
const STARTING: &str = "starting";

/// The part of a server its tools share: the live connection, if any, and
/// the calls in flight that someone can be asked for.
pub(super) struct Link {
    pub(super) server: String,
    peer: Mutex<Option<Peer<RoleClient>>>,
    down_reason: Mutex<String>,
    asking: Mutex<Asking>,
}

/// The calls in flight whose person a question (an elicitation) can go to.
#[derive(Default)]
struct Asking {
    next: u64,
    calls: Vec<(u64, InFlight)>,
}

/// A call in flight: whose it is, and a token cancelled when it ends (a
/// question about it is then dropped).
#[derive(Clone)]
struct InFlight {
    request_id: String,
    person: Arc<dyn AskPerson>,
    ended: CancellationToken,
}

/// Takes a call off [`Asking`] when it ends (or is dropped).
struct Registered<'a> {
    link: &'a Link,
    id: Option<u64>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if let (Some(id), Ok(mut asking)) = (self.id, self.link.asking.lock()) {
            asking.calls.retain(|(each, call)| {
                if *each == id {
                    call.ended.cancel();
                }
                *each != id
            });
        }
    }
}

impl Link {
    pub(super) fn new(server: &str) -> Self {
        Self {
            server: server.to_owned(),
            peer: Mutex::new(None),
            down_reason: Mutex::new(STARTING.to_owned()),
            asking: Mutex::new(Asking::default()),
        }
    }

    fn register(&self, ctx: &ToolContext) -> Registered<'_> {
        let id = ctx.person.as_ref().and_then(|person| {
            let mut asking = self.asking.lock().ok()?;
            asking.next += 1;
            let id = asking.next;
            let call = InFlight {
                request_id: ctx.request_id.clone(),
                person: Arc::clone(person),
                ended: CancellationToken::new(),
            };
            asking.calls.push((id, call));
            Some(id)
        });
        Registered { link: self, id }
    }

    /// The one call in flight a server's question can be about; `None`
    /// when there is none, or several (the protocol does not say which).
    fn asking_call(&self) -> Option<InFlight> {
        let asking = self.asking.lock().ok()?;
        match asking.calls.as_slice() {
            [(_, call)] => Some(call.clone()),
            _ => None,
        }
    }

    /// Calls `tool` (its name on the server) with `args`, for `ctx`'s
    /// person (whom the server may ask something meanwhile).
    pub(super) async fn call(
        &self,
        ctx: &ToolContext,
        tool: &str,
        args: Value,
    ) -> Result<ToolOutput, ToolError> {
        let _registered = self.register(ctx);
        let peer = self.peer.lock().map(|peer| peer.clone()).unwrap_or(None);
        let Some(peer) = peer else {
            let reason = self
                .down_reason
                .lock()
                .map(|reason| reason.clone())
                .unwrap_or_default();
            return Err(ToolError::Failed(format!(
                "the MCP server `{}` is not available ({reason}); it is being restarted, try \
                 again later",
                self.server
            )));
        };
        let arguments = match args {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        // Dropping this future (a timeout, `/stop`) tells the server with
        // `notifications/cancelled`.
        match peer.call_tool(params).await {
            Ok(result) => result_value(result),
            Err(err) => {
                tracing::warn!(server = %self.server, tool, error = %err, "MCP call failed");
                Err(ToolError::Failed(format!(
                    "the MCP server `{}` failed during the call ({err}); it is being restarted",
                    self.server
                )))
            }
        }
    }

    fn set_up(&self, peer: Peer<RoleClient>) {
        if let Ok(mut slot) = self.peer.lock() {
            *slot = Some(peer);
        }
    }

    fn set_down(&self, reason: &str) {
        if let Ok(mut slot) = self.peer.lock() {
            *slot = None;
        }
        if let Ok(mut slot) = self.down_reason.lock() {
            reason.clone_into(&mut slot);
        }
    }
}

/// What the model sees of a tool's result: its structured content when it
/// is an object, else its text as `result` (when every content block is
/// text or an image), else its content blocks as JSON as `content`.
/// Images are never sent as base64 text: each becomes a file returned
/// beside the object ([`ToolOutput::files`], shown to the model like a
/// user's photo), a block of `content` naming it (`{"type": "image",
/// "file": N}`); other binary payloads (audio, blob resources) are left out
/// of `content` with a note of their size. `isError` makes it an error
/// result with the text as the message.
fn result_value(result: CallToolResult) -> Result<ToolOutput, ToolError> {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.as_str()))
        .collect();
    let text = texts.join("\n");
    if result.is_error == Some(true) {
        return Err(ToolError::Failed(if text.is_empty() {
            "the tool reported an error".to_owned()
        } else {
            text
        }));
    }
    let mut files = Vec::new();
    let blocks: Vec<Value> = result
        .content
        .iter()
        .map(|block| block_value(block, &mut files))
        .collect();
    let value = match result.structured_content {
        Some(Value::Object(fields)) => Value::Object(fields),
        _ if texts.len() + files.len() == result.content.len() => {
            serde_json::json!({ "result": text })
        }
        _ => serde_json::json!({ "content": blocks }),
    };
    Ok(ToolOutput { value, files })
}

/// A content block as `content` shows it: an image whose data decodes
/// becomes the next of `files` and a block naming it; base64 payloads of
/// other blocks are replaced by a note of their length.
fn block_value(block: &ContentBlock, files: &mut Vec<ToolFile>) -> Value {
    if let Some(image) = block.as_image()
        && let Ok(bytes) = BASE64.decode(image.data.as_bytes())
    {
        files.push(ToolFile {
            bytes,
            declared_type: image.mime_type.clone(),
        });
        return serde_json::json!({"type": "image", "file": files.len()});
    }
    let mut value = serde_json::to_value(block).unwrap_or(Value::Null);
    strip_base64(&mut value);
    value
}

/// Replaces each `data` or `blob` string (base64, in MCP's image, audio and
/// resource contents) under `value` by a note of its length.
fn strip_base64(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            for (key, field) in fields.iter_mut() {
                match field {
                    Value::String(text) if key == "data" || key == "blob" => {
                        *field = Value::String(format!(
                            "[{} characters of base64 left out]",
                            text.len()
                        ));
                    }
                    other => strip_base64(other),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_base64),
        _ => {}
    }
}

/// One configured server and what it last listed.
pub struct McpServer {
    name: String,
    settings: McpServerSettings,
    pub(super) link: Arc<Link>,
    tools: RwLock<Arc<[Arc<McpTool>]>>,
    status: watch::Sender<ServerStatus>,
}

impl McpServer {
    pub(super) fn new(name: &str, settings: &McpServerSettings) -> Arc<Self> {
        let (status, _) = watch::channel(ServerStatus {
            name: name.to_owned(),
            up: false,
            starts: 0,
            tools: 0,
            misnamed: Vec::new(),
            error: Some(STARTING.to_owned()),
        });
        Arc::new(Self {
            name: name.to_owned(),
            settings: settings.clone(),
            link: Arc::new(Link::new(name)),
            tools: RwLock::new(Arc::from(Vec::new())),
            status,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn settings(&self) -> &McpServerSettings {
        &self.settings
    }

    /// The tools it last listed, sorted by name.
    pub fn tools(&self) -> Arc<[Arc<McpTool>]> {
        self.tools
            .read()
            .map(|tools| Arc::clone(&tools))
            .unwrap_or_else(|_| Arc::from(Vec::new()))
    }

    pub fn status(&self) -> ServerStatus {
        self.status.borrow().clone()
    }

    /// A receiver of its status changes.
    pub fn watch(&self) -> watch::Receiver<ServerStatus> {
        self.status.subscribe()
    }

    /// Runs the supervisor until `shutdown`.
    pub(super) async fn supervise(self: Arc<Self>, mcp: McpSettings, shutdown: CancellationToken) {
        let timeout = mcp.startup_timeout;
        let refresh = mcp.refresh;
        let mut retries = Backoff::new(mcp.restart_base, mcp.restart_max).retries();
        loop {
            let changed = Arc::new(Notify::new());
            let started = tokio::select! {
                started = tokio::time::timeout(timeout, self.connect(Arc::clone(&changed))) => started,
                () = shutdown.cancelled() => return,
            };
            let reason = match started {
                Ok(Ok(running)) => {
                    let up_since = tokio::time::Instant::now();
                    let reason = self
                        .serve(running, &changed, refresh, timeout, &shutdown)
                        .await;
                    // Only a server that stayed up for a refresh period
                    // starts the backoff again: one that dies right after
                    // every start keeps backing off.
                    if up_since.elapsed() >= refresh {
                        retries.reset();
                    }
                    reason
                }
                Ok(Err(reason)) => reason,
                Err(_elapsed) => format!("did not start within {} s", timeout.as_secs()),
            };
            if shutdown.is_cancelled() {
                return;
            }
            tracing::warn!(server = %self.name, reason = %reason, "MCP server down; restarting");
            self.link.set_down(&reason);
            self.status.send_modify(|status| {
                status.up = false;
                status.error = Some(reason.clone());
            });
            if wait(retries.next_delay(None), &shutdown).await == Wait::Cancelled {
                return;
            }
        }
    }

    /// Starts the server and lists its tools.
    async fn connect(
        &self,
        changed: Arc<Notify>,
    ) -> Result<RunningService<RoleClient, Listener>, String> {
        let listener = Listener {
            changed,
            link: Arc::clone(&self.link),
        };
        let running = if let Some(command) = &self.settings.command {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(&self.settings.args).env_clear().kill_on_drop(true);
            for name in std::iter::once("PATH").chain(self.settings.env.iter().map(String::as_str))
            {
                if let Some(value) = std::env::var_os(name) {
                    cmd.env(name, value);
                }
            }
            let (transport, _stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|err| format!("could not start `{command}`: {err}"))?;
            serve_client(listener, transport)
                .await
                .map_err(|err| format!("initialisation failed: {err}"))?
        } else if let Some(url) = &self.settings.url {
            let mut headers = HashMap::new();
            for (header, var) in &self.settings.headers {
                let value = std::env::var(var)
                    .map_err(|_| format!("the environment variable `{var}` is not set"))?;
                let name = HeaderName::try_from(header.as_str())
                    .map_err(|_| format!("`{header}` is not a valid header name"))?;
                let mut value = HeaderValue::try_from(value)
                    .map_err(|_| format!("the value of `{var}` is not a valid header value"))?;
                value.set_sensitive(true);
                headers.insert(name, value);
            }
            let config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(headers);
            serve_client(listener, StreamableHttpClientTransport::from_config(config))
                .await
                .map_err(|err| format!("initialisation failed: {err}"))?
        } else {
            return Err("neither `command` nor `url` is set".to_owned());
        };
        self.list(running.peer()).await?;
        Ok(running)
    }

    /// Watches a started server: re-lists its tools every `refresh` or when
    /// it says they changed, until it closes, hangs or `shutdown`. Returns
    /// why it stopped.
    async fn serve(
        &self,
        running: RunningService<RoleClient, Listener>,
        changed: &Notify,
        refresh: Duration,
        timeout: Duration,
        shutdown: &CancellationToken,
    ) -> String {
        let peer = running.peer().clone();
        let stop = running.cancellation_token();
        self.link.set_up(peer.clone());
        self.status.send_modify(|status| {
            status.up = true;
            status.starts += 1;
            status.error = None;
        });
        tracing::info!(server = %self.name, "MCP server started");
        let mut closed = Box::pin(running.waiting());
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + refresh, refresh);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let reason = loop {
            tokio::select! {
                quit = &mut closed => {
                    let reason = match quit {
                        Ok(quit) => format!("the connection closed ({quit:?})"),
                        Err(err) => format!("the connection failed ({err})"),
                    };
                    self.link.set_down(&reason);
                    return reason;
                }
                () = shutdown.cancelled() => {
                    stop.cancel();
                    let _ = closed.await;
                    return "shut down".to_owned();
                }
                _ = tick.tick() => {}
                () = changed.notified() => {}
            }
            match tokio::time::timeout(timeout, self.list(&peer)).await {
                Ok(Ok(())) => {}
                Ok(Err(reason)) => break reason,
                Err(_elapsed) => {
                    break format!(
                        "did not answer a tool listing within {} s",
                        timeout.as_secs()
                    );
                }
            }
        };
        // Alive but failing or hung: close it (a child process is killed).
        self.link.set_down(&reason);
        stop.cancel();
        let _ = tokio::time::timeout(timeout, closed).await;
        reason
    }

    /// Lists the server's tools and keeps them (sorted, the names the model
    /// can use only).
    async fn list(&self, peer: &Peer<RoleClient>) -> Result<(), String> {
        let listed = peer
            .list_all_tools()
            .await
            .map_err(|err| format!("listing tools failed: {err}"))?;
        let mut tools: Vec<Arc<McpTool>> = Vec::with_capacity(listed.len());
        let mut misnamed = Vec::new();
        for tool in listed {
            let full_name = format!("{}{SEPARATOR}{}", self.name, tool.name);
            if !valid_tool_name(&full_name) {
                tracing::warn!(
                    server = %self.name,
                    tool = %tool.name,
                    "MCP tool left out: {MISNAMED}"
                );
                misnamed.push(full_name);
                continue;
            }
            tools.push(Arc::new(McpTool::new(
                Arc::clone(&self.link),
                &self.settings,
                full_name,
                tool.name.to_string(),
                tool.description.as_deref().unwrap_or_default().to_owned(),
                Value::Object((*tool.input_schema).clone()),
            )));
        }
        tools.sort_by(|a, b| a.full_name().cmp(b.full_name()));
        let count = tools.len();
        let before = self.tools();
        let same = before.len() == tools.len()
            && before
                .iter()
                .zip(&tools)
                .all(|(old, new)| old.spec_ref() == new.spec_ref());
        if !same {
            if !before.is_empty() {
                tracing::info!(server = %self.name, tools = count, "MCP tool list changed");
            }
            if let Ok(mut slot) = self.tools.write() {
                *slot = Arc::from(tools);
            }
        }
        self.status.send_if_modified(|status| {
            let modified = status.tools != count || status.misnamed != misnamed;
            status.tools = count;
            status.misnamed = misnamed;
            modified
        });
        Ok(())
    }
}

/// Whether every provider accepts `name` as a tool name.
fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The client side's handler: notes that the server's tool list changed.
struct Listener {
    changed: Arc<Notify>,
    link: Arc<Link>,
}

impl ClientHandler for Listener {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }

    /// A call's progress: noted at DEBUG without its message.
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        tracing::debug!(server = %self.link.server, progress = params.progress, "MCP call progress");
    }

    /// A question the server asks during a call goes to the person the
    /// call is for, through the same path as `ask_user`'s; what cannot be
    /// asked (a URL to open, no single call in flight, nobody to ask) is
    /// declined.
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let server = &self.link.server;
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        else {
            tracing::info!(server = %server, "an MCP server asked the user to open a URL; declined");
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        let Some(call) = self.link.asking_call() else {
            tracing::info!(
                server = %server,
                "an MCP server asked a question outside a single call of a conversation; declined"
            );
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        let schema = serde_json::to_value(&requested_schema).unwrap_or(Value::Null);
        let form = Form::read(server, &message, &schema);
        // Dropped (and the question closed) when the call ends first: `/stop`,
        // its timeout, or the server giving the question up.
        let asked = tokio::select! {
            asked = call.person.ask(&call.request_id, server, &form.question, &form.choices) => asked,
            () = call.ended.cancelled() => Ok(Asked::Unanswered),
            () = context.ct.cancelled() => Ok(Asked::Unanswered),
        };
        Ok(match asked {
            Ok(Asked::Answer(answer)) => match form.content(&answer) {
                Ok(Some(content)) => {
                    ElicitResult::new(ElicitationAction::Accept).with_content(content)
                }
                Ok(None) => ElicitResult::new(ElicitationAction::Decline),
                Err(reason) => {
                    tracing::info!(server = %server, reason, "an answer did not fit the MCP server's form");
                    ElicitResult::new(ElicitationAction::Decline)
                }
            },
            Ok(Asked::Declined) => ElicitResult::new(ElicitationAction::Decline),
            Ok(Asked::Unanswered) => ElicitResult::new(ElicitationAction::Cancel),
            Err(err) => {
                tracing::warn!(server = %server, error = %err, "an MCP server's question could not be asked");
                ElicitResult::new(ElicitationAction::Cancel)
            }
        })
    }

    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation =
            Some(ElicitationCapability::new().with_form(FormElicitationCapability::default()));
        ClientConfig::new(capabilities, ClientConfig::default().client_info)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn results_keep_the_success_and_error_shape() {
        let text = CallToolResult::success(vec![ContentBlock::text("hi")]);
        assert_eq!(result_value(text), Ok(json!({"result": "hi"}).into()));
        let failed = CallToolResult::error(vec![ContentBlock::text("no such file")]);
        assert_eq!(
            result_value(failed),
            Err(ToolError::Failed("no such file".to_owned()))
        );
        let mut structured = CallToolResult::success(vec![ContentBlock::text("{}")]);
        structured.structured_content = Some(json!({"sum": 3}));
        assert_eq!(result_value(structured), Ok(json!({"sum": 3}).into()));
    }

    #[test]
    fn images_become_files_and_no_base64_reaches_the_text() {
        let png = b"\x89PNG\r\n\x1a\nrest".to_vec();
        let data = BASE64.encode(&png);
        let mixed = CallToolResult::success(vec![
            ContentBlock::text("a dot"),
            ContentBlock::image(data.clone(), "image/png"),
        ]);
        let output = result_value(mixed).expect("a result");
        assert_eq!(output.value, json!({"result": "a dot"}));
        assert_eq!(
            output.files,
            [ToolFile {
                bytes: png.clone(),
                declared_type: "image/png".to_owned()
            }]
        );
        // Audio is no file here: `content` keeps it, its base64 left out.
        let audio = CallToolResult::success(vec![
            ContentBlock::image(data.clone(), "image/png"),
            ContentBlock::audio("UklGRg==", "audio/wav"),
        ]);
        let output = result_value(audio).expect("a result");
        assert_eq!(output.files.len(), 1);
        assert_eq!(
            output.value,
            json!({"content": [
                {"type": "image", "file": 1},
                {"type": "audio", "mimeType": "audio/wav",
                 "data": "[8 characters of base64 left out]"},
            ]})
        );
        let text = output.value.to_string();
        assert!(
            !text.contains(&data) && !text.contains("UklGRg=="),
            "{text}"
        );
        // Data that is not base64 is no file, and not sent either.
        let broken = CallToolResult::success(vec![ContentBlock::image("%%%", "image/png")]);
        let output = result_value(broken).expect("a result");
        assert!(output.files.is_empty());
        assert_eq!(
            output.value["content"][0]["data"],
            "[3 characters of base64 left out]"
        );
    }

    #[test]
    fn tool_names_fit_every_provider() {
        assert!(valid_tool_name("fs__read_file"));
        assert!(!valid_tool_name("fs__read.file"));
        assert!(!valid_tool_name(&"a".repeat(65)));
    }
}
