//! Tool rounds: running the calls of one model response, and completing a
//! round a crash cut short.
//!
//! Calls of one round run concurrently; each result is matched to its call by
//! id and returned in call order. Before a tool runs its call is checkpointed
//! as `running` with a request id derived from the stored assistant entry, and
//! after it as `done`/`failed`. Unknown tools, invalid arguments, tool errors,
//! timeouts and panics all become `{"success": false, "error": "…"}` results
//! the model sees ([`ToolCallError`]): nothing the model outputs can crash the
//! loop.
//!
//! A cacheable tool's call ([`crate::tools::cache`]) is first looked up in
//! the shared cache: a hit is the stored result text, byte for byte what the
//! live call gave, and its checkpoint is marked `cache_hit`; a live success
//! is stored for the next same call (not one with files: the cache keeps
//! text).
//!
//! Files a tool returns ([`crate::tools::ToolOutput`], an MCP server's
//! images) are taken into the media pipeline before the result is written:
//! the result text notes each under `files`, its entry refers to the blobs
//! (`MediaRef`s), and its checkpoint keeps them too, so a result reused
//! after a restart still carries them.

use crate::domain::{
    ApprovalKind, ApprovalStatus, ChatMessage, MediaRef, ToolCall, ToolCallStatus, canonical_json,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::future::join_all;
use serde_json::{Map, Value};
use tracing::Instrument;

use super::Agent;
use super::asking::{nonce, settled_result};
use super::live::LiveEvent;
use super::run::{InterruptedRound, LoopEnv};
use super::subagent::SubAgentRunner;
use super::wallet::Purse;
use crate::store::{Batch, StoreError, ToolCheckpoint, round_request_id, tool_media_json};
use crate::tools::approval::InDoubt;
use crate::tools::cache::{Caller, cache_key, ttl_ms};
use crate::tools::{ToolContext, ToolError, ToolOutput};

/// Why a tool call gave no result; the message is what the model sees.
#[derive(Debug, thiserror::Error)]
pub enum ToolCallError {
    #[error("unknown tool `{name}`; available tools: {available}")]
    UnknownTool { name: String, available: String },
    #[error("the arguments are not valid JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("the arguments must be a JSON object")]
    NotAnObject,
    /// The tool itself refused the arguments or failed.
    #[error("{0}")]
    Tool(ToolError),
    #[error("the tool did not finish within {} s", .0.as_secs_f32())]
    TimedOut(Duration),
    #[error("cancelled: the task was stopped before this tool finished")]
    Cancelled,
    #[error("the tool failed unexpectedly")]
    Panicked,
    /// Caught `running` after a restart, and not safe to run twice.
    #[error(
        "the gateway restarted while this tool was running; its outcome is unknown and it was \
         not retried"
    )]
    OutcomeUnknown,
}

impl ToolCallError {
    /// The failure's kind, as `switchboard_tool_calls_total` counts it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::UnknownTool { .. } => "unknown_tool",
            Self::NotJson(_) | Self::NotAnObject => "invalid_arguments",
            Self::Tool(ToolError::InvalidArguments(_)) => "invalid_arguments",
            Self::Tool(_) => "failed",
            Self::TimedOut(_) => "timeout",
            Self::Cancelled => "cancelled",
            Self::Panicked => "panicked",
            Self::OutcomeUnknown => "outcome_unknown",
        }
    }
}

/// Runs one round of tool calls, already checkpointed `running`,
/// concurrently; results come back in call order, one per call, each
/// carrying its call's id. A result is recorded as soon as its call ends
/// while others still run; the last one to end joins `pending`, the step's
/// next write, which follows at once.
pub(super) async fn run_round(
    agent: &Arc<Agent>,
    env: &Arc<LoopEnv>,
    purse: &Arc<Purse>,
    assistant_id: i64,
    calls: &[(usize, &ToolCall)],
    pending: &mut Batch,
) -> Result<Vec<ChatMessage>, StoreError> {
    let running = AtomicUsize::new(calls.len());
    let runs = calls.iter().map(|&(index, call)| {
        let span = tracing::info_span!("tool", call_id = %call.id, name = %call.name);
        let running = &running;
        async move {
            let request_id = round_request_id(assistant_id, index);
            let (result, finish) = run_started_call(agent, env, purse, request_id, call).await;
            if running.fetch_sub(1, Ordering::AcqRel) == 1 {
                return (result, Ok(Some(finish)));
            }
            (result, env.store.write(finish).await.map(|_| None))
        }
        .instrument(span)
    });
    let mut results = Vec::with_capacity(calls.len());
    let mut failure = None;
    for (result, recorded) in join_all(runs).await {
        match recorded {
            Ok(Some(finish)) => pending.extend(finish),
            Ok(None) => {}
            Err(err) => failure = Some(err),
        }
        results.push(result);
    }
    match failure {
        Some(err) => Err(err),
        None => Ok(results),
    }
}

/// What completing an interrupted round came to.
#[derive(Debug, Default)]
pub(super) struct Resumed {
    /// The results now known, in call order.
    pub results: Vec<ChatMessage>,
    /// Approvals still (or newly) waiting: the turn parks again.
    pub waiting: Vec<i64>,
    /// Whether calls of the client's own tools are still unanswered: the
    /// turn hands them to the client again.
    pub client_calls: bool,
}

/// Answers the unanswered calls of an interrupted (or parked) round from
/// their checkpoints: a finished call's stored result is reused; a call
/// that never started runs now; a call that waited for a person runs once
/// allowed, or gets the result its decision gives; a call caught `running`
/// is re-run with the same request id only if its tool is idempotent, and
/// otherwise is put to the person as a call in doubt (or, with
/// `tools.approval.in_doubt = "skip"` or nobody to ask, gets an "outcome
/// unknown" error result), so the history never holds a call without a
/// result.
pub(super) async fn resume_round(
    agent: &Arc<Agent>,
    env: &Arc<LoopEnv>,
    purse: &Arc<Purse>,
    round: &InterruptedRound,
) -> Result<Resumed, StoreError> {
    let mut resumed = Resumed::default();
    for (index, call) in round.calls.iter().enumerate() {
        if round.answered.contains(&call.id) {
            continue;
        }
        let request_id = round_request_id(round.assistant_id, index);
        let checkpoint = env
            .store
            .transcript()
            .tool_call_outcome(&request_id)
            .await?
            .map(|outcome| {
                let status = outcome.status.parse::<ToolCallStatus>().ok();
                (status, outcome.result, outcome.media)
            });
        let result = match checkpoint {
            Some((
                Some(status @ (ToolCallStatus::Done | ToolCallStatus::Failed)),
                Some(result),
                media,
            )) => {
                tracing::info!(call_id = %call.id, "recovery: reusing a finished tool result");
                let failed = status == ToolCallStatus::Failed;
                with_files(agent, env, call, result, failed, media).await
            }
            Some((Some(ToolCallStatus::Client), _, _)) => {
                resumed.client_calls = true;
                continue;
            }
            Some((Some(ToolCallStatus::Awaiting), _, _)) => {
                match decided(agent, env, purse, &request_id, call).await? {
                    Ok(result) => result,
                    Err(waiting) => {
                        resumed.waiting.push(waiting);
                        continue;
                    }
                }
            }
            Some(_running) => {
                let idempotent = agent
                    .toolset
                    .get(&call.name)
                    .is_some_and(|tool| tool.idempotent());
                if idempotent {
                    tracing::info!(call_id = %call.id, "recovery: re-running an idempotent tool");
                    run_call(agent, env, purse, request_id, call).await?
                } else if let Some(asked) = ask_in_doubt(env, &request_id, call).await? {
                    resumed.waiting.push(asked);
                    continue;
                } else {
                    tracing::warn!(call_id = %call.id, "recovery: tool outcome unknown, not retried");
                    let known = agent.toolset.get(&call.name).is_some();
                    env.metrics.tool_call(&call.name, known, "outcome_unknown");
                    let content =
                        canonical_json(&result_object(Err(ToolCallError::OutcomeUnknown)));
                    env.store
                        .transcript()
                        .finish_tool_call(&request_id, &content, true)
                        .await?;
                    ChatMessage::tool_result(&call.id, content, true)
                }
            }
            None => run_call(agent, env, purse, request_id, call).await?,
        };
        resumed.results.push(result);
    }
    Ok(resumed)
}

/// A call that waited for a person: run once allowed, else the result its
/// decision gives (recorded). `Err` holds the approval still pending.
async fn decided(
    agent: &Arc<Agent>,
    env: &Arc<LoopEnv>,
    purse: &Arc<Purse>,
    request_id: &str,
    call: &ToolCall,
) -> Result<Result<ChatMessage, i64>, StoreError> {
    let Some(approval) = env.store.approvals().of_request(request_id).await? else {
        // Never asked (nobody could be): refused, not run.
        let result = refused(call, "nobody could approve this call; it was not run");
        if let ChatMessage::Tool { content, .. } = &result {
            env.store
                .transcript()
                .finish_tool_call(request_id, content, true)
                .await?;
        }
        return Ok(Ok(result));
    };
    if approval.status == ApprovalStatus::Pending {
        return Ok(Err(approval.id));
    }
    match settled_result(&approval, env.policy.settings.timeout) {
        None => {
            tracing::info!(call_id = %call.id, approval_id = approval.id, "approved: running the call");
            Ok(Ok(
                run_call(agent, env, purse, request_id.to_owned(), call).await?
            ))
        }
        Some((content, is_error)) => {
            env.metrics
                .tool_call(&call.name, true, approval.status.as_str());
            env.store
                .transcript()
                .finish_tool_call(request_id, &content, is_error)
                .await?;
            Ok(Ok(tool_result(call, content, is_error)))
        }
    }
}

/// Puts a call in doubt to the person, when they can be asked and
/// `tools.approval.in_doubt` says so: the call is checkpointed `awaiting`
/// with a new approval, in one write. Returns the approval's id.
async fn ask_in_doubt(
    env: &LoopEnv,
    request_id: &str,
    call: &ToolCall,
) -> Result<Option<i64>, StoreError> {
    let Some(asker) = env.asker.as_ref() else {
        return Ok(None);
    };
    if env.policy.settings.in_doubt == InDoubt::Skip {
        return Ok(None);
    }
    tracing::warn!(call_id = %call.id, "recovery: tool outcome unknown; asking the user");
    let nonce = nonce();
    let mut batch = Batch::new();
    batch.await_tool_call(request_id);
    batch.ask(
        &asker.approval(env, call, ApprovalKind::InDoubt, &[], &nonce),
        request_id,
    );
    let ids = env.store.write_ids(batch).await?;
    Ok(ids.last().copied())
}

/// The error result of a call that is not run, saying `reason`.
pub fn refused(call: &ToolCall, reason: &str) -> ChatMessage {
    let content = canonical_json(&result_object(Err(ToolCallError::Tool(ToolError::Failed(
        reason.to_owned(),
    )))));
    tool_result(call, content, true)
}

fn tool_result(call: &ToolCall, content: String, is_error: bool) -> ChatMessage {
    ChatMessage::tool_result(&call.id, content, is_error)
}

/// The result of `call` with the files `media`, each set to show to the
/// agent's model as the next turn's replay of it will (an image to a
/// vision model, a note to another).
async fn with_files(
    agent: &Agent,
    env: &LoopEnv,
    call: &ToolCall,
    content: String,
    is_error: bool,
    mut media: Vec<MediaRef>,
) -> ChatMessage {
    if !media.is_empty()
        && let Err(err) = env.media.show(&agent.model, &mut media).await
    {
        tracing::warn!(error = %err, "a tool result's files could not be loaded");
    }
    ChatMessage::Tool {
        tool_call_id: call.id.clone(),
        content,
        is_error,
        media,
    }
}

/// A tool's outcome with its files taken into the media pipeline: the
/// object then notes each file under `files` (in place of its bytes), and
/// the files kept come beside it.
async fn take_files(
    env: &LoopEnv,
    outcome: Result<ToolOutput, ToolCallError>,
) -> (Result<Value, ToolCallError>, Vec<MediaRef>) {
    let output = match outcome {
        Ok(output) if !output.files.is_empty() => output,
        Ok(output) => return (Ok(output.value), Vec::new()),
        Err(err) => return (Err(err), Vec::new()),
    };
    let files = output
        .files
        .into_iter()
        .map(|file| (file.bytes, file.declared_type))
        .collect();
    let taken = env.media.take_tool_files(files).await;
    let mut fields = match output.value {
        Value::Object(fields) => fields,
        other => Map::from_iter([("result".to_owned(), other)]),
    };
    let notes = taken.notes.into_iter().map(Value::String).collect();
    fields.insert("files".to_owned(), Value::Array(notes));
    (Ok(Value::Object(fields)), taken.media)
}

/// The `running` checkpoint of a call.
fn checkpoint<'a>(env: &'a LoopEnv, request_id: &'a str, call: &'a ToolCall) -> ToolCheckpoint<'a> {
    ToolCheckpoint {
        request_id,
        session_id: &env.session_id,
        task_id: Some(env.task_id),
        scope: &env.scope,
        call_id: &call.id,
        name: &call.name,
        arguments: &call.arguments,
    }
}

/// Checkpoints one call `running`, then runs it.
async fn run_call(
    agent: &Arc<Agent>,
    env: &Arc<LoopEnv>,
    purse: &Arc<Purse>,
    request_id: String,
    call: &ToolCall,
) -> Result<ChatMessage, StoreError> {
    env.store
        .transcript()
        .start_tool_call(&checkpoint(env, &request_id, call))
        .await?;
    let (result, finish) = run_started_call(agent, env, purse, request_id, call).await;
    env.store.write(finish).await?;
    Ok(result)
}

/// Runs a call already checkpointed `running`; returns its result and the
/// write that records it.
async fn run_started_call(
    agent: &Arc<Agent>,
    env: &Arc<LoopEnv>,
    purse: &Arc<Purse>,
    request_id: String,
    call: &ToolCall,
) -> (ChatMessage, Batch) {
    let started = Instant::now();
    let cache = cache_slot(agent, env, call);
    let hit = match &cache {
        Some((key, _)) => match env.store.tool_cache().get(key).await {
            Ok(hit) => hit,
            Err(err) => {
                tracing::warn!(error = %err, "reading the tool cache failed; calling the tool");
                None
            }
        },
        None => None,
    };
    let cache_hit = hit.is_some();
    let (content, failed, media) = match hit {
        Some(content) => {
            env.metrics.tool_call(&call.name, true, "ok");
            (content, false, Vec::new())
        }
        None => {
            let outcome = execute(agent, env, purse, &request_id, call).await;
            let failed = outcome.is_err();
            let kind = outcome.as_ref().err().map_or("ok", ToolCallError::kind);
            let known = agent.toolset.get(&call.name).is_some();
            env.metrics.tool_call(&call.name, known, kind);
            let (outcome, media) = take_files(env, outcome).await;
            let content = canonical_json(&result_object(outcome));
            // A result with files is not cached: the cache keeps text.
            if let (Some((key, ttl)), false, true) = (&cache, failed, media.is_empty())
                && let Err(err) = env
                    .store
                    .tool_cache()
                    .put(key, &call.name, &content, *ttl)
                    .await
            {
                tracing::warn!(error = %err, "storing a tool result in the cache failed");
            }
            (content, failed, media)
        }
    };
    let content = agent.toolset.bounded_result(&call.name, content);
    let status = if failed {
        ToolCallStatus::Failed
    } else {
        ToolCallStatus::Done
    };
    env.publish(|| LiveEvent::ToolResult {
        id: call.id.clone(),
        name: call.name.clone(),
        is_error: failed,
    });
    let files = tool_media_json(&media).unwrap_or_else(|err| {
        tracing::warn!(error = %err, "a tool result's files could not be checkpointed");
        None
    });
    let mut finish = Batch::new();
    finish.finish_tool_call_with_files(&request_id, &content, failed, files);
    if cache_hit {
        finish.mark_cache_hit(&request_id);
    }
    tracing::info!(
        status = status.as_str(),
        cache_hit,
        duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "tool call"
    );
    let result = with_files(agent, env, call, content, failed, media).await;
    (result, finish)
}

/// The cache key and TTL (ms) of a call of a cacheable tool with valid
/// arguments; `None` for any other call.
fn cache_slot(agent: &Agent, env: &LoopEnv, call: &ToolCall) -> Option<(String, i64)> {
    let policy = agent.toolset.get(&call.name)?.cache_policy()?;
    let args: Value = serde_json::from_str(&call.arguments).ok()?;
    if !args.is_object() {
        return None;
    }
    let caller = Caller {
        principal_id: env.principal_id,
        session_id: &env.session_id,
    };
    Some((cache_key(&call.name, &args, policy, caller), ttl_ms(policy)))
}

/// Finds, validates and runs one call, containing every failure.
async fn execute(
    agent: &Arc<Agent>,
    env: &Arc<LoopEnv>,
    purse: &Arc<Purse>,
    request_id: &str,
    call: &ToolCall,
) -> Result<ToolOutput, ToolCallError> {
    let Some(tool) = agent.toolset.get(&call.name).cloned() else {
        return Err(ToolCallError::UnknownTool {
            name: call.name.clone(),
            available: agent.toolset.names().join(", "),
        });
    };
    let args: Value = serde_json::from_str(&call.arguments).map_err(ToolCallError::NotJson)?;
    if !args.is_object() {
        return Err(ToolCallError::NotAnObject);
    }
    let ctx = ToolContext {
        request_id: request_id.to_owned(),
        session_id: env.session_id.clone(),
        inbound_id: env.task_id,
        principal: env.principal_id,
        subagents: Some(Arc::new(SubAgentRunner::new(
            Arc::clone(agent),
            Arc::clone(env),
            Arc::clone(purse),
            request_id.to_owned(),
        ))),
        person: env.person.clone(),
    };
    let timeout = env.tool_timeout;
    // Spawned so a panicking tool is caught as a JoinError instead of
    // unwinding through the loop.
    let mut task = tokio::spawn(async move {
        tokio::time::timeout(timeout, tool.call_with_files(&ctx, args)).await
    });
    let joined = tokio::select! {
        joined = &mut task => joined,
        () = env.cancel.cancelled() => {
            task.abort();
            return Err(ToolCallError::Cancelled);
        }
    };
    match joined {
        Ok(Ok(result)) => result.map_err(ToolCallError::Tool),
        Ok(Err(_elapsed)) => Err(ToolCallError::TimedOut(timeout)),
        Err(join_error) => {
            tracing::error!(error = %join_error, "tool panicked");
            Err(ToolCallError::Panicked)
        }
    }
}

/// The object the model sees: the tool's fields plus `success`, or the
/// error's message.
fn result_object(outcome: Result<Value, ToolCallError>) -> Value {
    match outcome {
        Ok(Value::Object(mut fields)) => {
            fields.insert("success".to_owned(), Value::Bool(true));
            Value::Object(fields)
        }
        Ok(other) => {
            let mut fields = Map::new();
            fields.insert("success".to_owned(), Value::Bool(true));
            fields.insert("result".to_owned(), other);
            Value::Object(fields)
        }
        Err(error) => {
            let mut fields = Map::new();
            fields.insert("success".to_owned(), Value::Bool(false));
            fields.insert("error".to_owned(), Value::String(error.to_string()));
            Value::Object(fields)
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn shown(error: ToolCallError) -> String {
        canonical_json(&result_object(Err(error)))
    }

    #[test]
    fn a_tool_result_gains_success_true() {
        assert_eq!(
            canonical_json(&result_object(Ok(json!({"b": 1, "a": "x"})))),
            r#"{"a":"x","b":1,"success":true}"#
        );
        assert_eq!(
            canonical_json(&result_object(Ok(json!(42)))),
            r#"{"result":42,"success":true}"#
        );
    }

    #[test]
    fn every_failure_reads_as_before_to_the_model() {
        let cases = [
            (
                ToolCallError::UnknownTool {
                    name: "nope".to_owned(),
                    available: "calculator, http_get".to_owned(),
                },
                r#"{"error":"unknown tool `nope`; available tools: calculator, http_get","success":false}"#,
            ),
            (
                ToolCallError::NotAnObject,
                r#"{"error":"the arguments must be a JSON object","success":false}"#,
            ),
            (
                ToolCallError::Tool(ToolError::InvalidArguments("`x` is missing".to_owned())),
                r#"{"error":"invalid arguments: `x` is missing","success":false}"#,
            ),
            (
                ToolCallError::Tool(ToolError::Failed("boom".to_owned())),
                r#"{"error":"boom","success":false}"#,
            ),
            (
                ToolCallError::TimedOut(Duration::from_millis(1500)),
                r#"{"error":"the tool did not finish within 1.5 s","success":false}"#,
            ),
            (
                ToolCallError::Cancelled,
                r#"{"error":"cancelled: the task was stopped before this tool finished","success":false}"#,
            ),
            (
                ToolCallError::Panicked,
                r#"{"error":"the tool failed unexpectedly","success":false}"#,
            ),
            (
                ToolCallError::OutcomeUnknown,
                r#"{"error":"the gateway restarted while this tool was running; its outcome is unknown and it was not retried","success":false}"#,
            ),
        ];
        for (error, expected) in cases {
            assert_eq!(shown(error), expected);
        }
        let not_json = serde_json::from_str::<Value>("{").unwrap_err();
        let message = not_json.to_string();
        assert_eq!(
            shown(ToolCallError::NotJson(not_json)),
            format!(r#"{{"error":"the arguments are not valid JSON: {message}","success":false}}"#)
        );
    }
}
