//! Tasks over HTTP: `GET/POST /v1/tasks`, `GET/DELETE /v1/tasks/{id}`,
//! `GET /v1/tasks/{id}/runs`, scoped to the caller like sessions (another
//! caller's task is a 404), lists as `{"object": "list", "data": [...]}`;
//! and `POST /hooks/tasks/{id}`, which fires a task from outside, signed.
//!
//! A task made here reports to one of the caller's sessions
//! (`session_id`); its runs' answers are stored there (read them with `GET
//! /v1/sessions/{id}/messages`). Made with `"hook": true`, its answer
//! carries `hook_secret`, shown this once: the secret is derived from the
//! key in `tasks.hooks_key_env` and a nonce stored with the task, so the
//! database never holds it. A hook request is signed with it:
//! `X-Switchboard-Signature: sha256=<hex HMAC-SHA256 of the body>`; its
//! body (at most `tasks.max_hook_body_bytes`) is handed to the run, and a
//! repeated request (the same `X-Switchboard-Delivery`, or without one the
//! same body) fires one run.

use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use hmac::{Hmac, Mac};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::caller::Caller;
use super::{ApiError, ApiState};
use crate::domain::{RunTrigger, SessionId, TaskId, TaskStatus, schedule};
use crate::store::StoreError;
use crate::store::tasks::{RunRow, TaskRow};
use crate::tools::ToolError;
use crate::tools::tasks::{Origin, TaskRequest};

/// Tasks and runs listed at most.
const LISTED: i64 = 200;

/// The header a hook request is signed in.
pub const SIGNATURE_HEADER: &str = "x-switchboard-signature";
/// The header naming a hook delivery (a retry sends the same).
pub const DELIVERY_HEADER: &str = "x-switchboard-delivery";

#[derive(Debug, Deserialize)]
pub struct TasksQuery {
    /// `active`, `paused`, `done`, `cancelled`; none: the live ones.
    #[serde(default)]
    status: Option<String>,
}

fn internal(err: StoreError) -> ApiError {
    ApiError::Internal(err.to_string())
}

fn task_id(path: Result<Path<i64>, PathRejection>) -> Result<TaskId, ApiError> {
    let Path(id) = path.map_err(|_| ApiError::NotFound("no task with that id".to_owned()))?;
    Ok(TaskId::new(id))
}

/// A task as the API shows it; times are Unix seconds.
fn task_json(task: &TaskRow) -> Value {
    let words = task.schedule().map_or_else(
        |_| task.kind.clone(),
        |schedule| schedule.describe(&task.timezone),
    );
    json!({
        "id": task.id.get(),
        "object": "task",
        "session_id": task.session_id.as_str(),
        "prompt": task.prompt,
        "schedule": {"kind": task.kind, "spec": task.spec, "description": words},
        "timezone": task.timezone,
        "status": task.status.as_str(),
        "background": task.background.0,
        "next_run_at": task.next_run_at.map(|at| at / 1000),
        "next_run": task.next_run_at.map(|at| schedule::words(at, &task.timezone)),
        "until": task.until_at.map(|at| at / 1000),
        "count": task.max_runs,
        "runs": task.runs,
        "failures": task.failures,
        "last_outcome": task.last_outcome.map(|outcome| outcome.as_str()),
        "last_run_at": task.last_run_at.map(|at| at / 1000),
        "created_at": task.created_at / 1000,
    })
}

fn run_json(run: &RunRow) -> Value {
    json!({
        "id": run.id,
        "object": "task.run",
        "task_id": run.task_id.get(),
        "trigger": run.trigger.as_str(),
        "status": run.status.as_str(),
        "due_at": run.due_at / 1000,
        "claimed_at": run.claimed_at / 1000,
        "finished_at": run.finished_at.map(|at| at / 1000),
        "latency_ms": run.finished_at.map(|at| at - run.claimed_at),
        "outcome": run.outcome.map(|outcome| outcome.as_str()),
        "turn": run.inbound_id,
    })
}

/// `GET /v1/tasks`.
pub async fn list(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<TasksQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|err| ApiError::BadRequest(err.body_text()))?;
    let status = query
        .status
        .as_deref()
        .map(|status| {
            status.parse::<TaskStatus>().map_err(|_| {
                ApiError::BadRequest(format!(
                    "unknown status `{status}`: use active, paused, done or cancelled"
                ))
            })
        })
        .transpose()?;
    let tasks = state
        .store
        .api()
        .tasks(caller.scope(), status, LISTED)
        .await
        .map_err(internal)?;
    let data: Vec<Value> = tasks.iter().map(task_json).collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

/// `GET /v1/tasks/{id}`.
pub async fn get(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<i64>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let task = visible(&state, &caller, task_id(path)?).await?;
    Ok(Json(task_json(&task)))
}

/// `GET /v1/tasks/{id}/runs`: newest first.
pub async fn runs(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<i64>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let task = visible(&state, &caller, task_id(path)?).await?;
    let runs = state
        .store
        .tasks()
        .runs(task.id, LISTED)
        .await
        .map_err(internal)?;
    let data: Vec<Value> = runs.iter().map(run_json).collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

/// `DELETE /v1/tasks/{id}`: cancels it (and stops a run in progress);
/// answers the task as it is now.
pub async fn cancel(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    path: Result<Path<i64>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    let task = visible(&state, &caller, task_id(path)?).await?;
    let tools = state.service.tasks();
    if tools
        .cancel(task.id, task.principal_id)
        .await
        .map_err(internal)?
        == crate::tools::tasks::Changed::Yes
    {
        state
            .service
            .runner()
            .stop(task.run_session(), crate::domain::StopCause::User)
            .await
            .map_err(internal)?;
    }
    let task = visible(&state, &caller, task.id).await?;
    Ok(Json(task_json(&task)))
}

async fn visible(state: &ApiState, caller: &Caller, id: TaskId) -> Result<TaskRow, ApiError> {
    state
        .store
        .api()
        .task(caller.scope(), id)
        .await
        .map_err(internal)?
        .ok_or_else(|| ApiError::NotFound(format!("no task with id {id}")))
}

/// `POST /v1/tasks`: `session_id` (one of the caller's sessions), `user`
/// (for a key acting for several), `hook` (true: answer a hook secret),
/// and the fields of `schedule_task` (`prompt`, one of `at`, `in`,
/// `every`, `cron`; `timezone`, `until`, `count`, `background`).
pub async fn create(
    State(state): State<Arc<ApiState>>,
    Extension(caller): Extension<Caller>,
    body: Result<Json<Value>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(mut body) = body?;
    let Some(fields) = body.as_object_mut() else {
        return Err(ApiError::BadRequest(
            "the body must be a JSON object".to_owned(),
        ));
    };
    let session = fields.remove("session_id");
    let user = fields.remove("user");
    let hook = fields.remove("hook").and_then(|hook| hook.as_bool()) == Some(true);
    let Some(session) = session.as_ref().and_then(Value::as_str) else {
        return Err(ApiError::BadRequest(
            "`session_id` (one of your sessions) is required: a task reports to a session"
                .to_owned(),
        ));
    };
    let request: TaskRequest =
        serde_json::from_value(body).map_err(|err| ApiError::BadRequest(err.to_string()))?;
    let sender = caller.sender(user.as_ref().and_then(Value::as_str))?;
    let origin = origin(&state, &caller, session, sender).await?;
    let secret_key = if hook { Some(hooks_key(&state)?) } else { None };
    let tools = state.service.tasks();
    let (id, _) = tools.schedule(&origin, &request).await.map_err(
        |(ToolError::InvalidArguments(why) | ToolError::Failed(why))| ApiError::BadRequest(why),
    )?;
    let mut answer = task_json(&visible(&state, &caller, id).await?);
    if let Some(key) = secret_key {
        let nonce = hex::encode(fastrand::u128(..).to_le_bytes());
        tools
            .store
            .tasks()
            .set_hook_nonce(id, &nonce)
            .await
            .map_err(internal)?;
        answer["hook_secret"] = json!(hook_secret(&key, id, &nonce));
        answer["hook_url"] = json!(format!("/hooks/tasks/{id}"));
    }
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

/// Where a task made through the API reports: the caller's session.
async fn origin(
    state: &ApiState,
    caller: &Caller,
    session: &str,
    sender: String,
) -> Result<Origin, ApiError> {
    let missing = || ApiError::NotFound(format!("no session with id {session}"));
    let id = SessionId::parse(session).map_err(|_| missing())?;
    let reachable = state
        .store
        .api()
        .session_reachable(caller.scope(), &id)
        .await
        .map_err(internal)?;
    let row = match reachable {
        true => state.store.sessions().get(&id).await.map_err(internal)?,
        false => None,
    }
    .ok_or_else(missing)?;
    Ok(Origin {
        session_id: row.id,
        principal: row.principal,
        platform: row.platform,
        account: row.account,
        chat_id: row.chat_id,
        thread_id: row.thread_id,
        sender_id: switchboard_contract::UserId::parse(sender)
            .map_err(|err| ApiError::BadRequest(err.to_string()))?,
        sender_name: None,
    })
}

/// The key hook secrets derive from.
fn hooks_key(state: &ApiState) -> Result<String, ApiError> {
    let env = &state.service.tasks().settings.hooks_key_env;
    std::env::var(env)
        .ok()
        .filter(|key| !key.is_empty())
        .ok_or_else(|| {
            ApiError::BadRequest(format!(
                "task hooks are off: set the environment variable {env} to a secret key"
            ))
        })
}

/// A task's hook secret: HMAC-SHA256 of its id and nonce under the key.
fn hook_secret(key: &str, id: TaskId, nonce: &str) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(format!("switchboard-task-hook:{id}:{nonce}").as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// `POST /hooks/tasks/{id}`: fires the task once per delivery, with the
/// body as the run's context. 202 when queued (or queued before), 401 for
/// a missing or wrong signature, 404 for no such hook, 409 for a task that
/// is not active, 413 for a body over the cap.
pub async fn hook(
    State(state): State<Arc<ApiState>>,
    path: Result<Path<i64>, PathRejection>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let id = task_id(path)?;
    let tools = state.service.tasks();
    if body.len() > tools.settings.max_hook_body_bytes {
        return Err(ApiError::TooLarge);
    }
    let no_hook = || ApiError::NotFound(format!("no hook for task {id}"));
    let key = hooks_key(&state).map_err(|_| no_hook())?;
    let nonce = tools
        .store
        .tasks()
        .hook_nonce(id)
        .await
        .map_err(internal)?
        .ok_or_else(no_hook)?;
    verify(&hook_secret(&key, id, &nonce), &headers, &body)?;
    let task = tools
        .store
        .tasks()
        .get(id)
        .await
        .map_err(internal)?
        .ok_or_else(no_hook)?;
    if task.status != TaskStatus::Active {
        return Err(ApiError::Conflict(format!(
            "task {id} is {}, not active",
            task.status
        )));
    }
    let delivery = headers
        .get(DELIVERY_HEADER)
        .and_then(|value| value.to_str().ok())
        .map_or_else(
            || hex::encode(Sha256::digest(&body)),
            |value| hex::encode(Sha256::digest(value.as_bytes())),
        );
    let context = String::from_utf8_lossy(&body);
    let queued = tools
        .fire(
            &task,
            RunTrigger::Hook,
            format!("hook:{delivery}"),
            Some(&context),
        )
        .await
        .map_err(internal)?;
    let run = if queued.is_some() {
        "queued"
    } else {
        "duplicate"
    };
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({"task_id": id.get(), "run": run})),
    )
        .into_response())
}

/// Checks `X-Switchboard-Signature: sha256=<hex>` against the body, in
/// constant time.
fn verify(secret: &str, headers: &HeaderMap, body: &[u8]) -> Result<(), ApiError> {
    let given = headers
        .get(SIGNATURE_HEADER)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("sha256="))
        .and_then(|value| hex::decode(value.trim()).ok())
        .ok_or(ApiError::BadSignature)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    mac.update(body);
    mac.verify_slice(&given).map_err(|_| ApiError::BadSignature)
}
