//! A small MCP server written with `rmcp`, for the gateway's MCP tests: run
//! as a child process on stdio (the `fake_mcp` binary, [`fake_mcp_binary`])
//! or served over streamable HTTP on 127.0.0.1 inside the test
//! ([`serve_http`]).
//!
//! Tools: `echo {text}` (gives the text back, `repeat` times when the
//! call says so: a result of any size), `add {a, b}` (structured
//! `{"sum": …}`), `fail {}` (an `isError` result), `slow {secs}` (sleeps,
//! noting a cancellation), `crash {}` (exits the process mid-call), `freeze
//! {}` (stops the process with SIGSTOP: a hung server), `header {name}` (a
//! request header, over HTTP), `choose {question}` (asks the user to pick
//! a size, an elicitation, and answers with the action and content that
//! came back), `env
//! {name}` (the value of an environment variable, `""` when unset), `image
//! {}` (the text `a 4×3 gradient` and an image block of [`image_png`]). Every
//! call appends a line to the `log` file (`call NAME`, and `cancelled slow`
//! when a `slow` call is cancelled), so a test can count calls. Each line of
//! the `extra` file, if it exists, adds an echo-like tool of that name (a
//! tool list that changes). The binary takes them as `--log PATH` and
//! `--extra PATH`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ElicitRequestParams,
    ErrorData, JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The fake server; `log` and `extra` are the files described above.
#[derive(Debug, Clone, Default)]
pub struct FakeMcp {
    pub log: Option<PathBuf>,
    pub extra: Option<PathBuf>,
}

impl FakeMcp {
    /// Configured from the arguments `--log PATH` and `--extra PATH`.
    pub fn from_args(args: impl IntoIterator<Item = String>) -> Self {
        let mut server = Self::default();
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            match flag.as_str() {
                "--log" => server.log = args.next().map(PathBuf::from),
                "--extra" => server.extra = args.next().map(PathBuf::from),
                _ => {}
            }
        }
        server
    }

    fn note(&self, line: &str) {
        if let Some(path) = &self.log
            && let Ok(mut file) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
        {
            let _ = writeln!(file, "{line}");
        }
    }

    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            tool(
                "echo",
                "Echo the text back.",
                json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            ),
            tool(
                "add",
                "Add two numbers.",
                json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
            ),
            tool("fail", "Always fails.", json!({"type": "object"})),
            tool(
                "slow",
                "Sleep for `secs` seconds.",
                json!({"type": "object", "properties": {"secs": {"type": "number"}}}),
            ),
            tool(
                "crash",
                "Exit the server process.",
                json!({"type": "object"}),
            ),
            tool(
                "freeze",
                "Stop the server process.",
                json!({"type": "object"}),
            ),
            tool(
                "header",
                "Read a request header (HTTP only).",
                json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            ),
            tool(
                "choose",
                "Ask the user to choose a size (an elicitation) and say what came back.",
                json!({"type": "object", "properties": {"question": {"type": "string"}}}),
            ),
            tool(
                "env",
                "Read an environment variable.",
                json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            ),
            tool("image", "Draw a small picture.", json!({"type": "object"})),
        ];
        if let Some(extra) = self
            .extra
            .as_ref()
            .and_then(|path| std::fs::read_to_string(path).ok())
        {
            for name in extra.lines().map(str::trim).filter(|name| !name.is_empty()) {
                tools.push(tool(
                    name,
                    "An extra echo tool.",
                    json!({"type": "object", "properties": {"text": {"type": "string"}}}),
                ));
            }
        }
        tools
    }
}

fn tool(name: &str, description: &str, schema: Value) -> Tool {
    let schema: JsonObject = match schema {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    Tool::new(name.to_owned(), description.to_owned(), Arc::new(schema))
}

fn text(value: &str) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(value.to_owned())]).into()
}

impl ServerHandler for FakeMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        self.note(&format!("call {}", request.name));
        match request.name.as_ref() {
            "add" => {
                let number = |key: &str| args.get(key).and_then(Value::as_f64).unwrap_or(0.0);
                let sum = number("a") + number("b");
                let mut result = CallToolResult::success(vec![ContentBlock::text(sum.to_string())]);
                result.structured_content = Some(json!({ "sum": sum }));
                Ok(result.into())
            }
            "fail" => Ok(CallToolResult::error(vec![ContentBlock::text(
                "this tool always fails".to_owned(),
            )])
            .into()),
            "slow" => {
                let secs = args.get("secs").and_then(Value::as_f64).unwrap_or(30.0);
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs_f64(secs)) => Ok(text("slept")),
                    () = context.ct.cancelled() => {
                        self.note("cancelled slow");
                        Err(ErrorData::internal_error("cancelled", None))
                    }
                }
            }
            "crash" => std::process::exit(3),
            // Hung for good: a SIGCONT from elsewhere (the kernel continues
            // the stopped members of a process group it finds orphaned) only
            // stops it again.
            "freeze" => loop {
                let _ = std::process::Command::new("kill")
                    .args(["-STOP", &std::process::id().to_string()])
                    .status();
                std::thread::sleep(Duration::from_millis(10));
            },
            "header" => {
                let name = args.get("name").and_then(Value::as_str).unwrap_or_default();
                let value = context
                    .extensions
                    .get::<http::request::Parts>()
                    .and_then(|parts| parts.headers.get(name))
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or_default();
                Ok(text(value))
            }
            "choose" => {
                let message = args
                    .get("question")
                    .and_then(Value::as_str)
                    .unwrap_or("Which size?")
                    .to_owned();
                let schema = serde_json::from_value(json!({
                    "type": "object",
                    "properties": {"size": {"type": "string", "enum": ["small", "large"]}},
                    "required": ["size"],
                }))
                .map_err(|err| ErrorData::internal_error(err.to_string(), None))?;
                let asked = context
                    .peer
                    .create_elicitation(ElicitRequestParams::FormElicitationParams {
                        meta: None,
                        message,
                        requested_schema: schema,
                    })
                    .await
                    .map_err(|err| ErrorData::internal_error(err.to_string(), None))?;
                let action = serde_json::to_value(&asked.action).unwrap_or_default();
                let content = asked.content.unwrap_or(Value::Null);
                Ok(text(&format!(
                    "action={} content={content}",
                    action.as_str().unwrap_or("?")
                )))
            }
            "env" => {
                let name = args.get("name").and_then(Value::as_str).unwrap_or_default();
                Ok(text(&std::env::var(name).unwrap_or_default()))
            }
            "image" => {
                use base64::Engine as _;
                let data = base64::engine::general_purpose::STANDARD.encode(image_png());
                Ok(CallToolResult::success(vec![
                    ContentBlock::text("a 4×3 gradient".to_owned()),
                    ContentBlock::image(data, "image/png"),
                ])
                .into())
            }
            _ => {
                let said = args.get("text").and_then(Value::as_str).unwrap_or_default();
                // `repeat` (not in the schema): the text that many times, a
                // result as large as a test needs.
                let times = args
                    .get("repeat")
                    .and_then(Value::as_u64)
                    .and_then(|times| usize::try_from(times).ok())
                    .unwrap_or(1);
                Ok(text(&said.repeat(times)))
            }
        }
    }
}

/// The PNG the `image` tool returns: a 4×3 gradient, the same bytes every
/// time.
pub fn image_png() -> Vec<u8> {
    crate::media::gradient_png(4, 3, false)
}

/// Serves `server` over streamable HTTP on 127.0.0.1 until `stop`; returns
/// its endpoint URL.
pub async fn serve_http(server: FakeMcp, stop: CancellationToken) -> std::io::Result<String> {
    let service: StreamableHttpService<FakeMcp, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::default(),
        StreamableHttpServerConfig::default()
            .with_sse_keep_alive(None)
            .with_cancellation_token(stop.child_token()),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled_owned().await })
            .await;
    });
    Ok(format!("http://{addr}/mcp"))
}

/// The path of the `fake_mcp` binary, built (once per test process) into
/// the target folder the running test was built in.
///
/// # Panics
/// When it cannot be built.
pub fn fake_mcp_binary() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test's path");
        // target/<profile>/deps/<test>: the binary goes to target/<profile>.
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("the test runs from target/<profile>/deps");
        let target_dir = profile_dir.parent().expect("a target folder");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = std::process::Command::new(cargo);
        build
            .args(["build", "--quiet", "--bin", "fake_mcp", "--manifest-path"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .arg("--target-dir")
            .arg(target_dir);
        if profile_dir
            .file_name()
            .is_some_and(|name| name == "release")
        {
            build.arg("--release");
        }
        let status = build.status().expect("cargo runs");
        assert!(status.success(), "building fake_mcp failed");
        profile_dir.join("fake_mcp")
    })
    .clone()
}
