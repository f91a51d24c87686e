//! Three real `switchboard serve` processes on one fresh PostgreSQL database
//! behave as one gateway: conversations routed at random, concurrent turns
//! of one session on two instances, a lease holder killed or frozen mid-turn,
//! an instance drained with SIGTERM, `/stop` and `/status` sent to other
//! instances than the one running the turn, a reply whose delivering
//! instance dies between failed platform attempts, and a streamed request to
//! another instance than the one running its turn.
//!
//! Every case checks the same invariants at the end: each message answered
//! exactly once to its own caller, no tool run twice, the history rows a
//! single instance would store, and no model or tool call left `running`.
//!
//! The suite needs PostgreSQL: it runs only when `TEST_DATABASE_URL` is set,
//! and each test prints a note and passes without it.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};
use sqlx::PgPool;
use switchboard_test_support::telegram::{self, FakeTelegram};
use switchboard_test_support::wait::within;
use tokio::task::JoinHandle;

use crate::helpers::{
    FakeLlm, FreshDatabase, Reply, ServeProcess, delegate_and_calculate, fresh_database,
    is_sub_agent, last_user_text,
};

/// Lease time-to-live of every instance, short so that takeovers happen
/// within a test.
const LEASE_TTL_SECS: &str = "2";
/// How often every instance sweeps for orphaned work.
const SWEEP_INTERVAL_SECS: &str = "1";
/// How long a draining instance gives its running turns.
const SHUTDOWN_GRACE_SECS: &str = "3";

/// A sanity bound, not a speed requirement: a dead or frozen holder's turn
/// is taken over after the lease TTL (2 s) plus one sweep (1 s); the rest is
/// margin for a loaded machine (three processes and a build sharing two
/// cores), the resumed turn's own model calls, and polling.
const TAKEOVER_BOUND: Duration = Duration::from_secs(2 + 1 + 30);

/// The longest any HTTP request may take; far past every bound above, so a
/// lost reply fails the test with a message instead of hanging it.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a process may take to exit after SIGTERM: the grace period
/// plus a wide margin.
const EXIT_BOUND: Duration = Duration::from_secs(3 + 30);

/// The cases run one at a time: each starts three gateway processes, and
/// several at once on a small machine would stretch every timing (the
/// multi-process approval cases of `approvals_cluster.rs` take it too).
pub(crate) static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Three instances on one fresh database, and a connection to it.
struct Cluster {
    _dir: tempfile::TempDir,
    db: PgPool,
    nodes: Vec<Option<ServeProcess>>,
    /// Dropped last: drops the database.
    _database: FreshDatabase,
}

impl Cluster {
    /// Starts three instances named `node-0` to `node-2` against `llm`;
    /// `None` (after a note) when no PostgreSQL is configured.
    async fn start(llm: &FakeLlm) -> Option<Self> {
        Self::start_with(llm, &[]).await
    }

    /// Like [`Cluster::start`], with more environment for every instance.
    async fn start_with(llm: &FakeLlm, extra: &[(&str, &str)]) -> Option<Self> {
        if std::env::var("TEST_DATABASE_URL").map_or(true, |url| url.is_empty()) {
            eprintln!("note: cluster tests need PostgreSQL; set TEST_DATABASE_URL to run them");
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let database = fresh_database(dir.path()).await;
        let mut nodes = Vec::new();
        // One after the other: the first applies the migrations.
        for index in 0..3 {
            nodes.push(Some(
                start_node(dir.path(), &database, llm, index, extra).await,
            ));
        }
        let db = PgPool::connect(&database).await.expect("connect");
        Some(Self {
            _dir: dir,
            db,
            nodes,
            _database: database,
        })
    }

    fn node(&self, index: usize) -> &ServeProcess {
        self.nodes[index].as_ref().expect("node running")
    }

    fn base(&self, index: usize) -> String {
        self.node(index).base_url().to_owned()
    }

    /// Takes a node out of the cluster (to kill or drain it).
    fn take(&mut self, index: usize) -> ServeProcess {
        self.nodes[index].take().expect("node running")
    }

    /// The instance named in the session's lease row.
    async fn holder(&self, session: &str) -> Option<usize> {
        let owner: Option<String> =
            sqlx::query_scalar("SELECT owner FROM session_leases WHERE session_id = $1")
                .bind(session)
                .fetch_optional(&self.db)
                .await
                .expect("lease row");
        owner.map(|owner| node_index(&owner))
    }

    /// The inbound row of the API message sent with `key`: (id, status).
    async fn inbound(&self, key: &str) -> Option<(i64, String)> {
        sqlx::query_as("SELECT id, status FROM inbound WHERE event_id = $1")
            .bind(key)
            .fetch_optional(&self.db)
            .await
            .expect("inbound row")
    }

    /// Waits (within [`TAKEOVER_BOUND`]) until the message sent with `key`
    /// is finished, and returns its id.
    async fn finished(&self, key: &str) -> i64 {
        let finished = within(TAKEOVER_BOUND, || async {
            self.inbound(key)
                .await
                .filter(|(_, status)| status != "pending" && status != "running")
                .map(|(id, _)| id)
        })
        .await;
        match finished {
            Some(id) => id,
            None => panic!(
                "{key} not finished within {TAKEOVER_BOUND:?}: {:?}, lease {:?}",
                self.inbound(key).await,
                self.leases().await
            ),
        }
    }

    async fn leases(&self) -> Vec<(String, String, i64, i64)> {
        sqlx::query_as("SELECT session_id, owner, expires_at, token FROM session_leases")
            .fetch_all(&self.db)
            .await
            .expect("leases")
    }

    /// The session's main history (no sub-agent rows): (role, content),
    /// oldest first.
    async fn history(&self, session: &str) -> Vec<(String, String)> {
        let rows: Vec<(String, Option<String>)> = sqlx::query_as(
            "SELECT role, content FROM messages WHERE session_id = $1 AND scope = '' ORDER BY id",
        )
        .bind(session)
        .fetch_all(&self.db)
        .await
        .expect("history");
        rows.into_iter()
            .map(|(role, content)| (role, content.unwrap_or_default()))
            .collect()
    }

    /// Stops every node (the woken `frozen` one finishes whatever it was
    /// doing) and checks that it wrote nothing after `before` and logged
    /// that it lost the lease.
    async fn stop_and_check_woken(&mut self, frozen: usize, before: &Rows) {
        let logs = self.stop_all().await;
        assert_eq!(
            &self.rows().await,
            before,
            "the woken instance wrote nothing"
        );
        assert!(
            logs[&frozen].contains("lease passed to another instance"),
            "node-{frozen} logged that it lost the lease:\n{}",
            logs[&frozen]
        );
    }

    /// What a turn writes: every message row (sub-agents' too), model
    /// call and tool call, with its status.
    async fn rows(&self) -> Rows {
        let messages = sqlx::query_as(
            "SELECT id, scope, role, COALESCE(content, '') FROM messages ORDER BY id",
        )
        .fetch_all(&self.db)
        .await
        .expect("messages");
        let usage = sqlx::query_as("SELECT id, status FROM usage ORDER BY id")
            .fetch_all(&self.db)
            .await
            .expect("usage");
        let tool_calls = sqlx::query_as(
            "SELECT request_id, status, COALESCE(result, '') FROM tool_calls ORDER BY request_id",
        )
        .fetch_all(&self.db)
        .await
        .expect("tool calls");
        Rows {
            messages,
            usage,
            tool_calls,
        }
    }

    /// How many main-history rows of each role the turn `task` stored.
    async fn roles_of_task(&self, task: i64) -> HashMap<String, i64> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT role, COUNT(*) FROM messages WHERE task_id = $1 AND scope = '' GROUP BY role",
        )
        .bind(task)
        .fetch_all(&self.db)
        .await
        .expect("roles");
        rows.into_iter().collect()
    }

    /// The invariants every case ends with: every message finished and
    /// answered exactly once, every reply handed out, no model or tool call
    /// left `running`, no tool call stored twice.
    async fn assert_settled(&self) {
        let settled = within(TAKEOVER_BOUND, || async {
            let unfinished: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM inbound WHERE status IN ('pending', 'running')",
            )
            .fetch_one(&self.db)
            .await
            .expect("count");
            let unsent: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE status <> 'sent'")
                    .fetch_one(&self.db)
                    .await
                    .expect("count");
            (unfinished == 0 && unsent == 0).then_some(())
        })
        .await;
        if settled.is_none() {
            let inbound: Vec<(i64, String, String)> =
                sqlx::query_as("SELECT id, event_id, status FROM inbound ORDER BY id")
                    .fetch_all(&self.db)
                    .await
                    .expect("rows");
            let outbox: Vec<(i64, String, i64)> =
                sqlx::query_as("SELECT inbound_id, status, attempts FROM outbox ORDER BY id")
                    .fetch_all(&self.db)
                    .await
                    .expect("rows");
            panic!("not settled: inbound {inbound:?} outbox {outbox:?}");
        }
        let replies: Vec<(String, i64)> = sqlx::query_as(
            "SELECT i.text, (SELECT COUNT(*) FROM outbox o WHERE o.inbound_id = i.id) \
             FROM inbound i WHERE i.status <> 'command' ORDER BY i.id",
        )
        .fetch_all(&self.db)
        .await
        .expect("rows");
        for (text, count) in &replies {
            assert_eq!(*count, 1, "{text:?} answered once");
        }
        for table in ["usage", "tool_calls"] {
            let running: i64 = sqlx::query_scalar(&format!(
                "SELECT COUNT(*) FROM {table} WHERE status = 'running'"
            ))
            .fetch_one(&self.db)
            .await
            .expect("count");
            assert_eq!(running, 0, "{table} rows left running");
        }
        let repeated: Vec<(Option<i64>, String, String, i64)> = sqlx::query_as(
            "SELECT task_id, scope, call_id, COUNT(*) FROM tool_calls \
             GROUP BY task_id, scope, call_id HAVING COUNT(*) > 1",
        )
        .fetch_all(&self.db)
        .await
        .expect("tool calls");
        assert!(repeated.is_empty(), "tool calls stored twice: {repeated:?}");
    }

    /// SIGTERMs every node still running, checks each exits cleanly, and
    /// returns their logs by node index.
    async fn stop_all(&mut self) -> HashMap<usize, String> {
        let mut logs = HashMap::new();
        for index in 0..self.nodes.len() {
            if let Some(node) = self.nodes[index].take() {
                node.terminate();
                let (status, log) = node.exited(EXIT_BOUND).await;
                assert!(
                    status.success(),
                    "node-{index} exits cleanly: {status}\n{log}"
                );
                logs.insert(index, log);
            }
        }
        logs
    }
}

/// A snapshot of the rows turns write.
#[derive(Debug, PartialEq, Eq)]
struct Rows {
    messages: Vec<(i64, String, String, String)>,
    usage: Vec<(i64, String)>,
    tool_calls: Vec<(String, String, String)>,
}

/// Starts instance `node-{index}` of the suite's settings against `llm`,
/// with `extra` environment on top (a later value of a variable wins).
pub(crate) async fn start_node(
    dir: &std::path::Path,
    database: &str,
    llm: &FakeLlm,
    index: usize,
    extra: &[(&str, &str)],
) -> ServeProcess {
    let base_url = llm.openai_base();
    let instance = format!("node-{index}");
    let mut env = vec![
        ("SWITCHBOARD__DATABASE__URL", database),
        ("SWITCHBOARD__LLM__BASE_URL", base_url.as_str()),
        ("SWITCHBOARD__LLM__RETRY_BASE_MS", "1"),
        ("SWITCHBOARD__RUNNER__LEASE_TTL_SECS", LEASE_TTL_SECS),
        (
            "SWITCHBOARD__RUNNER__SWEEP_INTERVAL_SECS",
            SWEEP_INTERVAL_SECS,
        ),
        (
            "SWITCHBOARD__SERVER__SHUTDOWN_GRACE_SECS",
            SHUTDOWN_GRACE_SECS,
        ),
        ("SWITCHBOARD__SERVER__INSTANCE_ID", instance.as_str()),
        ("SWITCHBOARD__API__REPLY_TIMEOUT_SECS", "90"),
        ("SWITCHBOARD__AGENT__TOOLS", "calculator,delegate"),
        // A delegation cut off by a kill is skipped (calls in doubt are
        // put to a person in tests/gateway/recovery.rs).
        ("SWITCHBOARD__TOOLS__APPROVAL__IN_DOUBT", "skip"),
        ("RUST_LOG", "warn"),
    ];
    env.extend_from_slice(extra);
    ServeProcess::start(dir, &env, true).await
}

/// The index of the node an instance id names.
fn node_index(owner: &str) -> usize {
    owner
        .strip_prefix("node-")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("an instance id of this suite: {owner}"))
}

/// One HTTP answer from the completions endpoint.
#[derive(Debug)]
struct Answer {
    status: u16,
    session: Option<String>,
    retry_after: Option<String>,
    body: Value,
}

impl Answer {
    fn text(&self) -> String {
        self.body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_else(|| panic!("a reply: {} {}", self.status, self.body))
            .to_owned()
    }

    /// The reply text of a 200.
    fn ok(&self) -> String {
        assert_eq!(self.status, 200, "answered: {}", self.body);
        self.text()
    }
}

/// Sends one user message to `base`, in `session` when given, with an
/// Idempotency-Key when given.
async fn post(
    base: &str,
    session: Option<&str>,
    key: Option<&str>,
    text: &str,
) -> Result<Answer, reqwest::Error> {
    let mut request = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .timeout(REQUEST_TIMEOUT)
        .json(&json!({"messages": [{"role": "user", "content": text}]}));
    if let Some(session) = session {
        request = request.header("X-Session-Id", session);
    }
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    let response = request.send().await?;
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (session, retry_after) = (header("x-session-id"), header("retry-after"));
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    Ok(Answer {
        status,
        session,
        retry_after,
        body,
    })
}

/// [`post`] in a task of its own.
fn send(
    base: &str,
    session: &str,
    key: Option<&str>,
    text: &str,
) -> JoinHandle<Result<Answer, reqwest::Error>> {
    let (base, session, key, text) = (
        base.to_owned(),
        session.to_owned(),
        key.map(str::to_owned),
        text.to_owned(),
    );
    tokio::spawn(async move { post(&base, Some(&session), key.as_deref(), &text).await })
}

/// Opens a session with a command (no model call) and returns its id.
async fn open_session(base: &str) -> String {
    let answer = post(base, None, None, "/help").await.expect("sent");
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.session.expect("session header")
}

fn echo(body: &Value) -> Reply {
    Reply::Text(format!("echo: {}", last_user_text(body)))
}

/// Whether the model has been asked, by the top agent (`sub_agent` false)
/// or by a sub-agent, about `job`.
fn asked(llm: &FakeLlm, job: &str, sub_agent: bool) -> bool {
    llm.requests().iter().any(|request| {
        let body = request.json();
        is_sub_agent(&body) == sub_agent && last_user_text(&body).contains(job)
    })
}

/// Waits until the model has been asked about `job` (see [`asked`]).
async fn model_asked(llm: &FakeLlm, job: &str, sub_agent: bool) {
    let seen = within(TAKEOVER_BOUND, || {
        std::future::ready(asked(llm, job, sub_agent).then_some(()))
    })
    .await;
    assert!(seen.is_some(), "the model was asked about {job}");
}

/// Each delegated sub-task started exactly once: a non-idempotent tool never
/// runs twice.
fn assert_delegated_once(llm: &FakeLlm, jobs: &[&str]) {
    let mut starts: HashMap<String, usize> = HashMap::new();
    for request in llm.requests() {
        let body = request.json();
        let messages = body["messages"].as_array().expect("messages");
        if is_sub_agent(&body) && messages.len() == 2 {
            *starts.entry(last_user_text(&body)).or_default() += 1;
        }
    }
    for job in jobs {
        let task = format!("sub-task for {job}");
        assert!(
            starts.get(&task).is_some_and(|n| *n <= 1),
            "{task} started at most once: {starts:?}"
        );
    }
    for (task, count) in &starts {
        assert_eq!(*count, 1, "{task} started {count} times");
    }
}

/// The main-history rows of one tool turn, as a single instance stores them:
/// the message, the assistant's tool calls, the two results, the answer.
fn assert_tool_turn_rows(roles: &HashMap<String, i64>) {
    let expected: HashMap<String, i64> = [("user", 1), ("assistant", 2), ("tool", 2)]
        .into_iter()
        .map(|(role, n)| (role.to_owned(), n))
        .collect();
    assert_eq!(roles, &expected, "rows of the tool turn");
}

/// Case 1: each turn of several conversations goes to a random instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_routed_at_random_get_their_own_replies() {
    let _serial = SERIAL.lock().await;
    let llm = FakeLlm::start_with_delay(echo, Duration::from_millis(50)).await;
    let Some(mut cluster) = Cluster::start(&llm).await else {
        return;
    };
    const CONVERSATIONS: usize = 4;
    const TURNS: usize = 4;
    let bases: Vec<String> = (0..3).map(|i| cluster.base(i)).collect();
    let mut conversations = Vec::new();
    for conversation in 0..CONVERSATIONS {
        let bases = bases.clone();
        conversations.push(tokio::spawn(async move {
            let mut session: Option<String> = None;
            let mut route = Vec::new();
            for turn in 0..TURNS {
                let node = fastrand::usize(..bases.len());
                route.push(node);
                let text = format!("conversation {conversation} turn {turn}");
                let answer = post(&bases[node], session.as_deref(), None, &text)
                    .await
                    .expect("sent");
                assert_eq!(
                    answer.ok(),
                    format!("echo: {text}"),
                    "{text} on node-{node} (route {route:?})"
                );
                session = Some(answer.session.expect("session header"));
            }
            (session.expect("a session"), route)
        }));
    }
    for (conversation, task) in conversations.into_iter().enumerate() {
        let (session, route) = task.await.expect("conversation");
        let history = cluster.history(&session).await;
        let expected: Vec<(String, String)> = (0..TURNS)
            .flat_map(|turn| {
                let text = format!("conversation {conversation} turn {turn}");
                [
                    ("user".to_owned(), text.clone()),
                    ("assistant".to_owned(), format!("echo: {text}")),
                ]
            })
            .collect();
        assert_eq!(
            history, expected,
            "conversation {conversation}, route {route:?}"
        );
    }
    cluster.assert_settled().await;
    cluster.stop_all().await;
}

/// Case 2: two turns of one session at once on two instances.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_turns_of_one_session_on_two_instances_do_not_interleave() {
    let _serial = SERIAL.lock().await;
    let llm = FakeLlm::start_with_delay(echo, Duration::from_millis(500)).await;
    let Some(mut cluster) = Cluster::start(&llm).await else {
        return;
    };
    let opening = post(&cluster.base(0), None, None, "opening")
        .await
        .expect("sent");
    assert_eq!(opening.ok(), "echo: opening");
    let session = opening.session.expect("session header");

    let alpha = send(&cluster.base(1), &session, None, "alpha");
    let beta = send(&cluster.base(2), &session, None, "beta");
    let alpha = alpha.await.expect("task").expect("sent");
    let beta = beta.await.expect("task").expect("sent");
    assert_eq!(alpha.ok(), "echo: alpha");
    assert_eq!(beta.ok(), "echo: beta");

    assert_eq!(
        llm.peak_concurrency_per_session(),
        1,
        "one model call at a time for the session, across instances"
    );
    let history = cluster.history(&session).await;
    let pair = |text: &str| {
        vec![
            ("user".to_owned(), text.to_owned()),
            ("assistant".to_owned(), format!("echo: {text}")),
        ]
    };
    let (first, second) = if history.get(2).is_some_and(|(_, text)| text == "alpha") {
        ("alpha", "beta")
    } else {
        ("beta", "alpha")
    };
    let expected: Vec<(String, String)> = [pair("opening"), pair(first), pair(second)].concat();
    assert_eq!(history, expected, "each message followed by its own answer");
    cluster.assert_settled().await;
    cluster.stop_all().await;
}

/// When in a turn a test strikes the lease holder.
#[derive(Debug, Clone, Copy)]
enum Moment {
    /// During the turn's first model call.
    FirstModelCall,
    /// During the tool round: the delegated sub-agent's model call.
    ToolRound,
}

/// Waits for `moment` in the turn of `job`.
async fn reached(llm: &FakeLlm, job: &str, moment: Moment) {
    match moment {
        Moment::FirstModelCall => model_asked(llm, job, false).await,
        Moment::ToolRound => model_asked(llm, &format!("sub-task for {job}"), true).await,
    }
}

/// Case 3: the lease holder is killed at `moment`; another instance resumes
/// the turn by itself, and a retry of the request elsewhere gets the reply.
async fn kill_the_holder(moment: Moment) {
    let _serial = SERIAL.lock().await;
    let llm = FakeLlm::start_with_delay(delegate_and_calculate, Duration::from_millis(700)).await;
    let Some(mut cluster) = Cluster::start(&llm).await else {
        return;
    };
    let session = open_session(&cluster.base(0)).await;
    let caller = send(&cluster.base(0), &session, Some("kill-job"), "kill-job");

    reached(&llm, "kill-job", moment).await;
    let holder = cluster.holder(&session).await.expect("a lease holder");
    cluster.take(holder).kill().await;
    let killed = caller.await.expect("task");
    if holder == 0 {
        assert!(
            killed.as_ref().map_or(true, |a| a.status != 200),
            "the killed instance's caller got no reply: {killed:?}"
        );
    }

    // No new message: the sweep of a survivor resumes the turn.
    let inbound_id = cluster.finished("kill-job").await;
    let taker = cluster.holder(&session).await.expect("a lease holder");
    assert_ne!(taker, holder, "another instance finished the turn");

    // A retry with the same key, on a survivor, gets the stored reply.
    let survivor = (0..3).find(|i| *i != holder).expect("a survivor");
    let retry = post(
        &cluster.base(survivor),
        Some(&session),
        Some("kill-job"),
        "kill-job",
    )
    .await
    .expect("sent");
    assert_eq!(retry.ok(), "done: kill-job");
    assert_eq!(retry.body["id"], format!("chatcmpl-{inbound_id}"));
    if holder != 0 {
        assert_eq!(killed.expect("answered").ok(), "done: kill-job");
    }

    cluster.assert_settled().await;
    assert_delegated_once(&llm, &["kill-job"]);
    assert_tool_turn_rows(&cluster.roles_of_task(inbound_id).await);
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_in_a_model_call_has_its_turn_resumed_elsewhere() {
    kill_the_holder(Moment::FirstModelCall).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_in_a_tool_round_has_its_turn_resumed_elsewhere() {
    kill_the_holder(Moment::ToolRound).await;
}

/// Case 4: the lease holder is frozen at `moment` past its lease; another
/// instance takes the turn over, and the frozen one, let go on, writes
/// nothing.
async fn freeze_the_holder(moment: Moment) {
    let _serial = SERIAL.lock().await;
    let llm = FakeLlm::start_with_delay(delegate_and_calculate, Duration::from_millis(1500)).await;
    let Some(mut cluster) = Cluster::start(&llm).await else {
        return;
    };
    let session = open_session(&cluster.base(0)).await;
    let caller = send(&cluster.base(0), &session, Some("pause-job"), "pause-job");

    // Frozen while a model call is in flight (no database write open).
    reached(&llm, "pause-job", moment).await;
    let frozen = cluster.holder(&session).await.expect("a lease holder");
    cluster.node(frozen).pause();

    let inbound_id = cluster.finished("pause-job").await;
    let taker = cluster.holder(&session).await.expect("a lease holder");
    assert_ne!(taker, frozen, "another instance finished the turn");
    let before = cluster.rows().await;
    cluster.node(frozen).resume();

    // The caller (waiting on node-0, frozen or not) gets the reply.
    let answer = caller.await.expect("task").expect("sent");
    assert_eq!(answer.ok(), "done: pause-job");

    cluster.stop_and_check_woken(frozen, &before).await;
    cluster.assert_settled().await;
    assert_delegated_once(&llm, &["pause-job"]);
    assert_tool_turn_rows(&cluster.roles_of_task(inbound_id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_frozen_in_a_model_call_loses_its_turn_and_writes_nothing_after_waking() {
    freeze_the_holder(Moment::FirstModelCall).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_frozen_in_a_tool_round_loses_its_turn_and_writes_nothing_after_waking() {
    freeze_the_holder(Moment::ToolRound).await;
}

/// Case 5: SIGTERM with a turn running and a message queued on the same
/// instance: both callers get an answer, the queued message runs elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_instance_finishes_its_turn_and_hands_its_queue_over() {
    let _serial = SERIAL.lock().await;
    let llm = FakeLlm::start_with_delay(echo, Duration::from_secs(2)).await;
    let Some(mut cluster) = Cluster::start(&llm).await else {
        return;
    };
    let session = open_session(&cluster.base(0)).await;
    let first = send(&cluster.base(0), &session, Some("first"), "first");
    model_asked(&llm, "first", false).await;
    assert_eq!(
        cluster.holder(&session).await,
        Some(0),
        "the instance that received the message runs it"
    );
    let second = send(&cluster.base(0), &session, Some("second"), "second");
    let queued = within(TAKEOVER_BOUND, || async { cluster.inbound("second").await }).await;
    assert_eq!(
        queued.map(|(_, status)| status).as_deref(),
        Some("pending"),
        "the second message waits"
    );

    let drained = cluster.take(0);
    let base = drained.base_url().to_owned();
    drained.terminate();
    // While it drains, it is not ready and refuses new requests, if it
    // answers at all (its listener may already be closed).
    let http = reqwest::Client::new();
    match http.get(format!("{base}/readyz")).send().await {
        Ok(ready) => assert_eq!(ready.status().as_u16(), 503, "/readyz while draining"),
        Err(err) => eprintln!("note: /readyz while draining not reached: {err}"),
    }
    match post(&base, Some(&session), None, "too late").await {
        Ok(refused) => {
            assert_eq!(refused.status, 503, "a new request while draining");
            assert!(refused.retry_after.is_some(), "with Retry-After");
        }
        Err(err) => eprintln!("note: a new request while draining not reached: {err}"),
    }

    let first = first
        .await
        .expect("task")
        .expect("an answer, not a timeout");
    assert_eq!(first.ok(), "echo: first", "the running turn finished");
    let second = second
        .await
        .expect("task")
        .expect("an answer, not a timeout");
    let (status, logs) = drained.exited(EXIT_BOUND).await;
    assert!(status.success(), "node-0 exits cleanly: {status}\n{logs}");

    // No new message: another instance answers the queued one.
    let second_id = cluster.finished("second").await;
    let taker = cluster.holder(&session).await.expect("a lease holder");
    assert_ne!(taker, 0, "another instance ran the queued message");
    eprintln!(
        "the queued message's caller on node-0 got {}",
        second.status
    );
    if second.status == 200 {
        assert_eq!(second.text(), "echo: second");
    } else {
        assert_eq!(second.status, 503, "after the grace: {}", second.body);
        assert!(second.retry_after.is_some(), "with Retry-After");
        let retry = post(&cluster.base(1), Some(&session), Some("second"), "second")
            .await
            .expect("sent");
        assert_eq!(retry.ok(), "echo: second");
        assert_eq!(retry.body["id"], format!("chatcmpl-{second_id}"));
    }

    let history = cluster.history(&session).await;
    let expected: Vec<(String, String)> = ["first", "second"]
        .into_iter()
        .flat_map(|text| {
            [
                ("user".to_owned(), text.to_owned()),
                ("assistant".to_owned(), format!("echo: {text}")),
            ]
        })
        .collect();
    assert_eq!(history, expected);
    cluster.assert_settled().await;
    cluster.stop_all().await;
}

/// Case 6: `/status` and `/stop` sent to instances other than the one
/// running the turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_status_reach_a_turn_running_on_another_instance() {
    let _serial = SERIAL.lock().await;
    let llm = FakeLlm::start_with_delay(echo, Duration::from_secs(5)).await;
    let Some(mut cluster) = Cluster::start(&llm).await else {
        return;
    };
    let session = open_session(&cluster.base(0)).await;
    let caller = send(&cluster.base(0), &session, Some("long"), "take your time");
    model_asked(&llm, "take your time", false).await;
    let runner = cluster.holder(&session).await.expect("a lease holder");
    let (asked_status, asked_stop) = ((runner + 1) % 3, (runner + 2) % 3);

    let status = post(&cluster.base(asked_status), Some(&session), None, "/status")
        .await
        .expect("sent");
    assert!(
        status.ok().contains("a task is running"),
        "/status on node-{asked_status}: {}",
        status.body
    );
    let stop = post(&cluster.base(asked_stop), Some(&session), None, "/stop")
        .await
        .expect("sent");
    assert_eq!(stop.ok(), "Stopping the running task.");

    let stopped = caller.await.expect("task").expect("sent");
    // A stopped turn is an HTTP error (409) naming its turn, whose
    // message is what a chat platform shows.
    assert_eq!(stopped.status, 409, "{}", stopped.body);
    assert_eq!(stopped.body["error"]["code"], "cancelled");
    assert_eq!(stopped.body["error"]["message"], "Stopped, as you asked.");
    let inbound_id = cluster.finished("long").await;
    let outcome: Option<String> = sqlx::query_scalar("SELECT outcome FROM inbound WHERE id = $1")
        .bind(inbound_id)
        .fetch_one(&cluster.db)
        .await
        .expect("outcome");
    assert_eq!(outcome.as_deref(), Some("cancelled"));
    let idle = post(&cluster.base(asked_stop), Some(&session), None, "/stop")
        .await
        .expect("sent");
    assert_eq!(idle.ok(), "Nothing is running.");

    // As on a single instance: a cancelled turn keeps its message and
    // stores no answer (the stop notice goes to the caller only).
    assert_eq!(
        cluster.history(&session).await,
        vec![("user".to_owned(), "take your time".to_owned())]
    );
    cluster.assert_settled().await;
    cluster.stop_all().await;
}

/// Case 5, the part a load balancer sees: while an instance drains (a slow
/// turn keeps it draining), `/readyz` answers 503 and a new API request gets
/// 503 with `Retry-After`, so that clients go to another instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_instance_answers_readyz_and_new_requests_with_503() {
    let _serial = SERIAL.lock().await;
    // Shorter than the grace period, so the running turn's caller gets its
    // reply (a caller still waiting when the grace ends gets 503: case 5).
    let llm = FakeLlm::start_with_delay(echo, Duration::from_secs(2)).await;
    let Some(mut cluster) = Cluster::start(&llm).await else {
        return;
    };
    let session = open_session(&cluster.base(0)).await;
    let running = send(&cluster.base(0), &session, Some("slow"), "slow");
    model_asked(&llm, "slow", false).await;

    let drained = cluster.take(0);
    let base = drained.base_url().to_owned();
    drained.terminate();
    // The turn keeps the instance draining for seconds; wait until it has
    // begun (the signal is asynchronous) by polling until it stops being
    // ready, and require an answer, not a refused connection.
    let http = reqwest::Client::new();
    let not_ready = within(TAKEOVER_BOUND, || async {
        match http.get(format!("{base}/readyz")).send().await {
            Ok(ready) if ready.status().as_u16() == 503 => Some(Ok(())),
            Ok(_) => None,
            Err(err) => Some(Err(format!("{err:?}"))),
        }
    })
    .await;
    assert_eq!(
        not_ready,
        Some(Ok(())),
        "/readyz answers 503 while the instance drains"
    );
    let refused = post(&base, Some(&session), None, "too late")
        .await
        .expect("a new request is answered while the instance drains");
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(refused.retry_after.is_some(), "with Retry-After");

    assert_eq!(
        running.await.expect("task").expect("sent").ok(),
        "echo: slow"
    );
    let (status, logs) = drained.exited(EXIT_BOUND).await;
    assert!(status.success(), "node-0 exits cleanly: {status}\n{logs}");
    cluster.assert_settled().await;
    cluster.stop_all().await;
}

/// Case 7: a reply whose platform fails is retried by the instance that
/// claimed it; when that instance dies between attempts, another one takes
/// the claim over once it expires and the reply is delivered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_whose_deliverer_dies_is_delivered_once_by_another_instance() {
    let _serial = SERIAL.lock().await;
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::start(echo).await;
    let api_url = telegram.url().to_string();
    let Some(mut cluster) = Cluster::start_with(
        &llm,
        &[
            ("SWITCHBOARD__TELEGRAM__TOKEN_ENV", "SB_CLUSTER_TG_TOKEN"),
            ("SB_CLUSTER_TG_TOKEN", telegram::TOKEN),
            ("SWITCHBOARD__TELEGRAM__API_URL", api_url.as_str()),
            ("SWITCHBOARD__TELEGRAM__POLL_TIMEOUT_SECS", "1"),
        ],
    )
    .await
    else {
        return;
    };
    // Telegram fails the first two attempts (a server error: transient).
    let bad_gateway = json!({"ok": false, "error_code": 502, "description": "Bad Gateway"});
    telegram.script("sendMessage", 502, bad_gateway.clone());
    telegram.script("sendMessage", 502, bad_gateway);
    telegram.push(json!({"update_id": 1, "message": {
        "message_id": 10, "date": 1_700_000_000,
        "chat": {"id": 777, "type": "private", "first_name": "Ada"},
        "from": {"id": 777, "is_bot": false, "first_name": "Ada"},
        "text": "hello cluster"
    }}));

    // The first attempt failed; its instance waits before the next one.
    telegram
        .wait_for("a first delivery attempt", || {
            !telegram.calls("sendMessage").is_empty()
        })
        .await;
    let claimed_by: Option<String> =
        sqlx::query_scalar("SELECT claimed_by FROM outbox WHERE status = 'pending'")
            .fetch_one(&cluster.db)
            .await
            .expect("a pending reply");
    let deliverer = node_index(&claimed_by.expect("a claimed reply"));
    cluster.take(deliverer).kill().await;

    let delivered = within(TAKEOVER_BOUND, || {
        std::future::ready((!telegram.sent().is_empty()).then_some(()))
    })
    .await;
    assert!(
        delivered.is_some(),
        "delivered by another instance: calls {:?}",
        telegram.calls("sendMessage")
    );
    cluster.assert_settled().await;
    let sent = telegram.sent();
    assert_eq!(sent.len(), 1, "delivered once: {sent:?}");
    assert_eq!(sent[0].chat_id, 777);
    assert!(sent[0].text.contains("echo: hello cluster"), "{sent:?}");
    assert_eq!(llm.requests().len(), 1, "the turn ran once");
    let (claimed_by, attempts): (Option<String>, i64) =
        sqlx::query_as("SELECT claimed_by, attempts FROM outbox")
            .fetch_one(&cluster.db)
            .await
            .expect("the reply");
    eprintln!(
        "deliverer node-{deliverer} killed; row now {claimed_by:?}, {attempts} attempts, {} calls",
        telegram.calls("sendMessage").len()
    );
    if let Some(owner) = claimed_by {
        assert_ne!(
            node_index(&owner),
            deliverer,
            "another instance delivered it"
        );
    }
    cluster.stop_all().await;
}

/// The content deltas of a streamed completion sent to `base`.
async fn stream_deltas(base: &str, session: &str, key: &str, text: &str) -> Vec<String> {
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .timeout(REQUEST_TIMEOUT)
        .header("X-Session-Id", session)
        .header("Idempotency-Key", key)
        .json(&json!({"stream": true, "messages": [{"role": "user", "content": text}]}))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status().as_u16(), 200);
    let body = response.text().await.expect("body");
    let data: Vec<&str> = body
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{body}");
    data.iter()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter_map(|chunk| {
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .filter(|text| !text.is_empty())
                .map(str::to_owned)
        })
        .collect()
}

#[tokio::test]
async fn a_streamed_request_to_another_instance_than_the_turns_gets_the_whole_reply() {
    let _serial = SERIAL.lock().await;
    let llm = FakeLlm::start(echo).await;
    let Some(mut cluster) = Cluster::start(&llm).await else {
        return;
    };
    let session = open_session(&cluster.base(0)).await;
    // Node 0 runs the first turn, held in its model's stream after the
    // first delta, so it still holds the session when the second message
    // reaches node 1: node 0 runs that turn too, once the first is done.
    llm.hold_streams();
    let first = {
        let (base, session) = (cluster.base(0), session.clone());
        tokio::spawn(async move { stream_deltas(&base, &session, "first-key", "first").await })
    };
    model_asked(&llm, "first", false).await;
    let second = {
        let (base, session) = (cluster.base(1), session.clone());
        tokio::spawn(async move { stream_deltas(&base, &session, "second-key", "second").await })
    };
    let recorded = within(TAKEOVER_BOUND, || async {
        cluster.inbound("second-key").await.map(|_| ())
    })
    .await;
    assert!(recorded.is_some(), "the second message was recorded");
    assert_eq!(cluster.holder(&session).await, Some(0));
    llm.release_streams();

    let first = first.await.expect("task");
    let second = second.await.expect("task");
    assert_eq!(first.concat(), "echo: first");
    assert!(
        first.len() > 1,
        "streamed live where the turn ran: {first:?}"
    );
    assert_eq!(
        second,
        ["echo: second"],
        "no live text on another instance; the reply whole at the end"
    );
    let asked_second = llm
        .requests()
        .iter()
        .map(|request| request.json())
        .find(|body| last_user_text(body) == "second")
        .expect("the model was asked about the second message");
    assert!(
        asked_second.get("stream").is_none(),
        "a turn nobody follows where it runs is not streamed: {asked_second}"
    );
    cluster.assert_settled().await;
    cluster.stop_all().await;
}

#[tokio::test]
async fn a_recurring_task_fires_once_per_due_time_while_instances_are_killed_and_restarted() {
    let _serial = SERIAL.lock().await;
    let telegram = FakeTelegram::start().await;
    let llm = FakeLlm::start(crate::tasks::planner).await;
    let api_url = telegram.url().to_string();
    let extra = [
        ("SWITCHBOARD__TELEGRAM__TOKEN_ENV", "SB_CLUSTER_TG_TOKEN"),
        ("SB_CLUSTER_TG_TOKEN", telegram::TOKEN),
        ("SWITCHBOARD__TELEGRAM__API_URL", api_url.as_str()),
        ("SWITCHBOARD__TELEGRAM__POLL_TIMEOUT_SECS", "1"),
        (
            "SWITCHBOARD__AGENT__TOOLS",
            "calculator,schedule_task,list_tasks,cancel_task",
        ),
        ("SWITCHBOARD__TASKS__MIN_INTERVAL_SECS", "1"),
    ];
    let Some(mut cluster) = Cluster::start_with(&llm, &extra).await else {
        return;
    };
    let args = json!({"prompt": "Ping", "every": "2s"});
    telegram.push(json!({"update_id": 1, "message": {
        "message_id": 10, "date": 1_700_000_000,
        "chat": {"id": 777, "type": "private", "first_name": "Ada"},
        "from": {"id": 777, "is_bot": false, "first_name": "Ada"},
        "text": format!("schedule {args}")
    }}));
    let runs_sent = || {
        telegram
            .sent()
            .iter()
            .filter(|m| m.text.contains("done: [scheduled task 1] Ping"))
            .count()
    };
    let fired = within(TAKEOVER_BOUND, || {
        std::future::ready((runs_sent() >= 1).then_some(()))
    })
    .await;
    assert!(fired.is_some(), "the first run: {:?}", telegram.sent());

    // Kill an instance, run on two, restart it, kill another.
    cluster.take(1).kill().await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    cluster.nodes[1] =
        Some(start_node(cluster._dir.path(), &cluster._database, &llm, 1, &extra).await);
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.take(2).kill().await;
    tokio::time::sleep(Duration::from_secs(5)).await;

    // Stop the schedule, then let what was claimed finish.
    sqlx::query("UPDATE tasks SET status = 'paused' WHERE id = 1")
        .execute(&cluster.db)
        .await
        .expect("paused");
    let settled = within(TAKEOVER_BOUND, || async {
        let open: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM task_runs WHERE status = 'queued'")
                .fetch_one(&cluster.db)
                .await
                .expect("count");
        (open == 0).then_some(())
    })
    .await;
    assert!(settled.is_some(), "every claimed run finished");
    telegram.settled().await;

    let runs: Vec<(i64, String)> =
        sqlx::query_as("SELECT due_at, status FROM task_runs ORDER BY due_at")
            .fetch_all(&cluster.db)
            .await
            .expect("runs");
    let done = runs.iter().filter(|(_, status)| status == "done").count();
    assert!(done >= 4, "runs kept coming through the kills: {runs:?}");
    assert_eq!(runs.len(), done, "none failed or missed: {runs:?}");
    assert_eq!(runs_sent(), done, "each run delivered once: {runs:?}");
    let per_run: Vec<i64> = sqlx::query_scalar(
        "SELECT COUNT(o.id) FROM task_runs r LEFT JOIN outbox o ON o.inbound_id = r.inbound_id \
         GROUP BY r.id",
    )
    .fetch_all(&cluster.db)
    .await
    .expect("replies");
    assert!(
        per_run.iter().all(|n| *n == 1),
        "one reply per run: {per_run:?}"
    );
    cluster.stop_all().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_frozen_holding_a_task_run_loses_it_and_writes_nothing_after_waking() {
    let _serial = SERIAL.lock().await;
    let llm = FakeLlm::start_with_delay(crate::tasks::planner, Duration::from_millis(1500)).await;
    let extra = [("SWITCHBOARD__TASKS__MIN_INTERVAL_SECS", "1")];
    let Some(mut cluster) = Cluster::start_with(&llm, &extra).await else {
        return;
    };
    let session = open_session(&cluster.base(0)).await;
    let made = reqwest::Client::new()
        .post(format!("{}/v1/tasks", cluster.base(0)))
        .json(&json!({"session_id": session, "prompt": "Frozen run", "in": "1s"}))
        .send()
        .await
        .expect("sent");
    assert_eq!(made.status(), 201);
    let asked = |llm: &FakeLlm| {
        llm.requests()
            .iter()
            .filter(|r| last_user_text(&r.json()).starts_with("[scheduled task 1]"))
            .count()
    };
    let started = within(TAKEOVER_BOUND, || {
        std::future::ready((asked(&llm) >= 1).then_some(()))
    })
    .await;
    assert!(started.is_some(), "the run's model call");

    // Frozen in the run's model call, past its lease: another instance
    // takes the run's turn over and finishes it.
    let frozen = cluster.holder(&session).await.expect("a lease holder");
    cluster.node(frozen).pause();
    let done = within(TAKEOVER_BOUND, || async {
        let done: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM task_runs WHERE task_id = 1 AND status = 'done'",
        )
        .fetch_one(&cluster.db)
        .await
        .expect("count");
        (done == 1).then_some(())
    })
    .await;
    assert!(done.is_some(), "the run finished elsewhere");
    let taker = cluster.holder(&session).await.expect("a lease holder");
    assert_ne!(taker, frozen, "another instance finished the run");
    let before = cluster.rows().await;
    cluster.node(frozen).resume();
    cluster.stop_and_check_woken(frozen, &before).await;
    let answers: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM messages WHERE role = 'assistant' \
         AND content LIKE 'done: [scheduled task 1]%'",
    )
    .fetch_one(&cluster.db)
    .await
    .expect("answers");
    assert_eq!(answers, 1, "the run's answer is stored once");
    let runs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM task_runs")
        .fetch_one(&cluster.db)
        .await
        .expect("runs");
    assert_eq!(runs, 1, "one run of a one-off task");
    cluster.assert_settled().await;
}
