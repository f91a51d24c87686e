//! Every text the gateway itself writes to a chat: command answers, the
//! pairing greeting, and the replies that end a turn without a model answer.
//! Kept together so their wording is reviewed (and translated) in one place;
//! the tests in `tests/gateway` pin them byte for byte.

use crate::domain::{Outcome, TaskId, TaskStatus};
use crate::store::tasks::TaskRow;
use std::borrow::Cow;
use std::fmt::Write as _;

use super::access::Decision;
use super::link::CODE_TTL;
use super::turn::TurnOutcome;
use crate::domain::SessionId;
use crate::llm::ModelFailure;
use crate::session::settings::DmSessions;
use crate::store::{MemoryEntry, PairingRequest, SessionRow, SessionSummary, UsageSummary};

/// The help text listing the commands.
pub const HELP: &str = "Commands:\n\
    /help: this list\n\
    /new: start a fresh conversation in this chat\n\
    /status: show this conversation's id, model and token use\n\
    /stop: stop the task that is running\n\
    /compact: summarise older messages to free up context\n\
    /sessions: list your recent conversations; /resume ID: continue one here\n\
    /title TEXT: name this conversation\n\
    /model [NAME]: show or switch this conversation's model\n\
    /usage: your tokens today and the share read from the provider cache\n\
    /retry: answer your last message again; /undo: forget the last exchange\n\
    /link: get a code to link another account; /link CODE: link this account\n\
    /unlink: detach this account from the others\n\
    /memory: what I remember about you; /memory forget N, /memory clear: remove it\n\
    /tasks: your reminders and scheduled tasks; /tasks cancel|pause|resume|run ID\n\
    /timezone [ZONE]: the time zone your tasks' times are in; /stop ID: stop a background task\n\
    Anything else goes to the assistant.";

/// The answer to identity commands sent in a group chat.
pub const DIRECT_ONLY: &str = "Please send this command in a direct chat with me.";

/// The answer to `/undo` and `/retry` while a turn runs.
pub const BUSY: &str = "A reply is still being written; wait for it (or /stop it) first.";

pub const NOTHING_TO_RETRY: &str = "Nothing to retry yet.";
pub const NOTHING_TO_UNDO: &str = "Nothing to undo.";
pub const UNDONE: &str = "Removed your last message and its answer from this conversation (they \
    stay in the stored history).";

pub const STOPPING: &str = "Stopping the running task.";
pub const NOTHING_RUNNING: &str = "Nothing is running.";

pub const NO_CONVERSATION: &str = "No conversation yet.";
pub const NO_CONVERSATIONS: &str = "No conversations yet.";
pub const RESUME_USAGE: &str = "Usage: /resume ID (see /sessions).";
pub const NO_TITLE: &str = "No title yet. Set one with /title TEXT.";

pub const NOT_LINKED: &str = "This account is not linked to any other.";
pub const UNLINKED: &str = "Unlinked: this account has its own conversations again.";
/// The answer to a `/link CODE` that linked, by how direct chats map to
/// sessions.
pub fn linked(dm_sessions: DmSessions) -> &'static str {
    match dm_sessions {
        DmSessions::Shared => {
            "Linked: this account now shares its conversations with the account that made the \
             code."
        }
        DmSessions::PerPlatform => {
            "Linked with the account that made the code: you count as one person now, for \
             access, /usage and the daily spending limit, and /sessions lists the conversations \
             of both accounts. Each direct chat keeps a conversation of its own here, so this \
             chat goes on with its own; /resume ID continues one of the others here."
        }
    }
}
pub const ALREADY_LINKED: &str = "This account is already linked to that one.";
pub const LINK_RATE_LIMITED: &str =
    "Too many wrong codes. Please wait a few minutes and try again.";
pub const NOT_A_LINK_CODE: &str =
    "That is not a link code: it has 8 letters and digits. Get one with /link.";
pub const LINK_CODE_REFUSED: &str =
    "That code is wrong, expired or already used. Get a new one with /link.";
/// The outbox's copy of a `/link` answer (the code itself is not stored).
pub const LINK_CODE_STORED: &str = "A link code was sent to this chat. Codes are not stored, so \
    if it did not arrive, send /link for a new one.";
/// The text recorded for a `/link CODE` message in place of the code.
pub const LINK_REDEEM_STORED: &str = "/link (code not stored)";

pub const ADMINS_ONLY: &str = "Only an admin can answer pairing requests, in a direct chat.";
pub const DECIDE_USAGE: &str = "Usage: /approve CODE or /deny CODE.";
pub const NO_PAIRING_REQUEST: &str = "No pairing request awaits a decision with that code.";

/// Shown when the model returns nothing at all.
pub const EMPTY_REPLY: &str = "(The model returned an empty reply.)";

/// The result of a call of the API client's own tool that the client's
/// next request did not answer (it sent a new message instead).
pub const NO_CLIENT_RESULT: &str = "the client sent no result for this call; it may not have run";

/// The reply to a turn whose writes the database refused. The message
/// itself was recorded before the turn began; whether the exchange reached
/// the conversation is not known here, so the text promises neither.
pub const STORE_FAILED: &str = "Sorry, this message was not answered: something went wrong \
    while storing the conversation (a database error; the details are in the gateway's log). \
    Please send it again in a moment.";

/// The reply to a turn whose model call failed, by what the failure means.
pub fn model_failure(failure: ModelFailure) -> &'static str {
    match failure {
        ModelFailure::Unreachable => {
            "Sorry, the model could not be reached, so this message was not answered. Please \
             try again in a moment."
        }
        ModelFailure::Endpoint => {
            "Sorry, this message was not answered: the model endpoint is misconfigured (the \
             provider has nothing at the address the gateway calls). Please tell the operator \
             of this assistant; trying again will not help until it is fixed."
        }
        ModelFailure::Credentials => {
            "Sorry, this message was not answered: the model provider refused the gateway's \
             API key (missing, wrong or without access). Please tell the operator of this \
             assistant; trying again will not help until the key is fixed."
        }
        ModelFailure::Busy => {
            "Sorry, the model provider is rate-limiting or overloaded right now, so this \
             message was not answered. Please try again later."
        }
        ModelFailure::BadRequest => {
            "Sorry, the model provider refused this request, so this message was not answered \
             (the conversation may be too long for the model: /compact or /new helps then). If \
             it keeps happening, please tell the operator of this assistant."
        }
        ModelFailure::ProviderFailed => {
            "Sorry, the model provider failed to answer, so this message was not answered. \
             Please try again in a moment."
        }
    }
}

/// The reply that ends a turn: the model's answer, or what stopped it.
pub fn turn_reply(outcome: &TurnOutcome) -> Cow<'_, str> {
    match outcome {
        TurnOutcome::Answered { text, .. } if text.trim().is_empty() => EMPTY_REPLY.into(),
        TurnOutcome::Answered { text, .. } => text.as_str().into(),
        TurnOutcome::Compacted => {
            "Older messages were summarised; the full history stays stored.".into()
        }
        TurnOutcome::NothingToCompact => "The conversation is too short to compact.".into(),
        TurnOutcome::CompactionFailed => "Compaction failed; the conversation is unchanged.".into(),
        TurnOutcome::CompactionOverSpend => "Compacting needs a model call, and today's spending \
            limit is reached (it resets at 00:00 UTC)."
            .into(),
        TurnOutcome::ModelError { failure } => model_failure(*failure).into(),
        TurnOutcome::StoreFailed => STORE_FAILED.into(),
        TurnOutcome::TimeLimit { secs } => {
            format!("Stopped: this task ran longer than its {secs}-second limit.").into()
        }
        TurnOutcome::Interrupted => "Stopped to handle your newer message.".into(),
        TurnOutcome::Cancelled => "Stopped, as you asked.".into(),
        TurnOutcome::TokenLimit { reason } | TurnOutcome::NoProgress { reason } => {
            format!("Stopped: {reason}. Ask again to continue.").into()
        }
        TurnOutcome::SpendLimit { reason } => format!("Stopped: {reason}.").into(),
        TurnOutcome::BudgetExhausted => {
            "Sorry, this task used up its step budget before an answer was ready.".into()
        }
        TurnOutcome::MediaRefused { reply } => reply.as_str().into(),
        TurnOutcome::ClientTools { text } => text.as_str().into(),
    }
}

/// Told with the reply of a task's run that paused it: it failed `limit`
/// times in a row, the last time with `outcome`.
pub fn task_paused(task: TaskId, limit: i64, outcome: Outcome) -> String {
    format!(
        "Task {task} is paused: its last {limit} runs failed (the last one: {}). Resume it with \
         /tasks resume {task}.",
        outcome.as_str().replace('_', " ")
    )
}

/// How `/tasks` is used.
pub const TASKS_USAGE: &str = "Use /tasks to list your tasks, or /tasks cancel ID, /tasks pause \
    ID, /tasks resume ID, /tasks run ID.";

/// `/tasks` with no live task.
pub const NO_TASKS: &str = "You have no scheduled tasks. Ask me to remind you of something, or \
    to do something every day.";

/// A task id that is not one of the sender's (here).
pub fn no_such_task(id: &str) -> String {
    format!("You have no task {id} here; /tasks lists yours.")
}

/// `/tasks cancel|pause|resume ID` done.
pub fn task_changed(task: TaskId, verb: &str) -> String {
    format!("Task {task} is {}.", past(verb))
}

fn past(verb: &str) -> &'static str {
    match verb.to_ascii_lowercase().as_str() {
        "cancel" => "cancelled",
        "pause" => "paused",
        _ => "resumed",
    }
}

/// `/tasks cancel|pause|resume ID` on a task that cannot change so.
pub fn task_not_live(task: TaskId, verb: &str) -> String {
    format!(
        "Task {task} cannot be {} now (it is finished, cancelled, or already so).",
        past(verb)
    )
}

/// `/tasks run ID`: the run is queued (or was, by the same request).
pub fn task_fired(task: TaskId, queued: bool) -> String {
    if queued {
        format!("Task {task} runs now; its answer comes here.")
    } else {
        format!("Task {task} is already running.")
    }
}

/// `/stop ID` when the task has no run in progress.
pub fn task_not_running(task: TaskId) -> String {
    format!("Task {task} is not running.")
}

/// One task in `/tasks`: id, schedule, next run, last outcome, progress.
pub fn task_line(task: &TaskRow, timezone: &str, progress: Option<&str>) -> String {
    let schedule = task
        .schedule()
        .map_or_else(|_| task.kind.clone(), |s| s.describe(timezone));
    let mut line = format!("{}: {schedule}", task.id);
    if task.status == TaskStatus::Paused {
        line.push_str(" (paused)");
    }
    if let Some(next) = task
        .next_run_at
        .filter(|_| task.status == TaskStatus::Active)
    {
        let _ = write!(
            line,
            "; next {}",
            crate::domain::schedule::words(next, timezone)
        );
    }
    if let Some(outcome) = task.last_outcome {
        let _ = write!(line, "; last {}", outcome.as_str().replace('_', " "));
    }
    if let Some(progress) = progress {
        let _ = write!(line, "; {progress}");
    }
    let prompt: String = task.prompt.chars().take(80).collect();
    let _ = write!(line, "\n   {prompt}");
    line
}

/// A background run in progress, in `/tasks`.
pub fn task_progress(used: u32, budget: u32) -> String {
    format!("running, {used} of {budget} model calls used")
}

/// `/tasks`: the lines of [`task_line`].
pub fn task_list(lines: &[String]) -> String {
    if lines.is_empty() {
        return NO_TASKS.to_owned();
    }
    format!("Your tasks:\n{}", lines.join("\n"))
}

/// `/timezone`.
pub fn timezone(set: Option<&str>, default: &str) -> String {
    match set {
        Some(zone) => format!("Your time zone is {zone}. Change it with /timezone ZONE."),
        None => format!(
            "You have set no time zone, so {default} is used. Set yours with /timezone ZONE \
             (for example /timezone Europe/Paris)."
        ),
    }
}

/// `/timezone ZONE` with a name that is no time zone.
pub fn unknown_timezone(zone: &str) -> String {
    format!(
        "{zone} is not a time zone I know; use an IANA name such as Europe/Paris or America/New_York."
    )
}

/// `/timezone ZONE` done.
pub fn timezone_set(zone: &str, now: &str) -> String {
    format!("Your time zone is now {zone} (it is {now} there).")
}

/// The greeting of an unknown direct-chat sender, with its pairing code.
pub fn pairing_requested(code: &str) -> String {
    format!(
        "Hello! I can only talk with people the owner approved. Your pairing code is {code}: \
         ask the owner to approve it. If you already talk with me on another account, send \
         /link CODE here with a code from /link there."
    )
}

/// The answer to `/approve CODE` or `/deny CODE` that found its request.
pub fn pairing_decided(decision: Decision, request: &PairingRequest) -> String {
    format!(
        "{} {}:{}.",
        match decision {
            Decision::Approve => "Approved",
            Decision::Deny => "Denied",
        },
        request.platform,
        request.user_id
    )
}

/// The `/link` answer, holding the code.
pub fn link_code(code: &str, dm_sessions: DmSessions) -> String {
    let purpose = match dm_sessions {
        DmSessions::Shared => "to share your conversations there",
        DmSessions::PerPlatform => "to count as one person on both (conversations stay per chat)",
    };
    format!(
        "Your link code: {code}\nWithin {} minutes, send /link {code} from your other account, \
         in a direct chat with me, {purpose}. It works once; keep it private.",
        CODE_TTL.as_secs() / 60,
    )
}

/// The `/memory` answer while `memory.enabled` is off.
pub const MEMORY_OFF: &str = "Long-term memory is turned off on this assistant.";
/// The answer to a `/memory` with an argument it does not know.
pub const MEMORY_USAGE: &str = "Usage: /memory (list what I remember about you), /memory forget \
    N (remove fact N of that list), /memory clear (remove everything).";

/// The `/memory` answer: the facts numbered from 1, oldest first.
pub fn memory_list(facts: &[MemoryEntry], max_entries: u32) -> String {
    if facts.is_empty() {
        return "I remember nothing about you yet. Ask me to remember something (\"remember \
                that I prefer metric units\") and new conversations will know it."
            .to_owned();
    }
    let mut text = format!(
        "What I remember about you ({} of at most {max_entries}):",
        facts.len()
    );
    for (number, fact) in facts.iter().enumerate() {
        // Writing to a `String` cannot fail.
        let _ = write!(text, "\n{}. {}", number + 1, fact.text);
    }
    text.push_str(
        "\nRemove one with /memory forget N, all with /memory clear. Changes reach new \
         conversations (/new); this one keeps what it started with.",
    );
    text
}

/// The answer to `/memory forget N` that removed `text`.
pub fn memory_forgotten(text: &str) -> String {
    format!(
        "Forgotten: {text}\nNew conversations (/new) will not know it; this one keeps what it \
         started with."
    )
}

/// The answer to `/memory forget N` when there is no fact `N` among `count`.
pub fn no_such_fact(number: &str, count: usize) -> String {
    match count {
        0 => "I remember nothing about you, so there is nothing to forget.".to_owned(),
        1 => format!("There is no fact {number}: I remember one thing about you (see /memory)."),
        _ => format!(
            "There is no fact {number}: give a number from 1 to {count}, as /memory lists them."
        ),
    }
}

/// The answer to `/memory clear` that removed `removed` facts.
pub fn memory_cleared(removed: u64) -> String {
    match removed {
        0 => "I remembered nothing about you; there was nothing to clear.".to_owned(),
        1 => "Cleared: I no longer remember the one fact I kept about you (in new \
              conversations; this one keeps what it started with)."
            .to_owned(),
        _ => format!(
            "Cleared: I no longer remember the {removed} facts I kept about you (in new \
             conversations; this one keeps what it started with)."
        ),
    }
}

pub fn new_conversation(session_id: &SessionId) -> String {
    format!("Started a new conversation ({session_id}).")
}

/// The `/status` answer. `running` is the model calls the running task has
/// left, if one runs; `max_iterations` what each message may use.
pub fn status(session: Option<&SessionRow>, running: Option<u32>, max_iterations: u32) -> String {
    let budget = match running {
        Some(left) => format!("a task is running; {left} model calls left"),
        None => format!("idle; each message may use {max_iterations} model calls"),
    };
    match session {
        Some(session) => format!(
            "Conversation {}\nModel: {}\nBudget: {budget}\nTokens: {} in ({} from cache), {} out",
            session.id,
            session.model,
            session.totals.input_tokens,
            session.totals.cache_read_tokens,
            session.totals.output_tokens
        ),
        None => NO_CONVERSATION.to_owned(),
    }
}

pub fn title(title: &str) -> String {
    format!("Title: {title}\nChange it with /title TEXT.")
}

pub fn title_set(title: &str) -> String {
    format!("Title set: {title}")
}

pub fn model(current: &str, models: &[String]) -> String {
    format!(
        "Model: {current}\nAvailable: {}\nSwitch with /model NAME.",
        models.join(", ")
    )
}

pub fn model_switched(name: &str) -> String {
    format!("This conversation now uses {name}.")
}

pub fn unknown_model(models: &[String]) -> String {
    format!("Unknown model. Available: {}", models.join(", "))
}

pub fn unknown_command(name: &str) -> String {
    format!("Unknown command /{name}.\n\n{HELP}")
}

pub fn not_a_session_id(id: &str) -> String {
    format!("{id} is not a conversation id; /sessions lists yours.")
}

pub fn resumed(session_id: &SessionId, title: Option<&str>) -> String {
    let title = match title {
        Some(title) => format!(" ({title})"),
        None => String::new(),
    };
    format!("Resumed conversation {}{title}.", short_id(session_id))
}

pub fn no_session_with_prefix(prefix: &str) -> String {
    format!("No conversation of yours starts with {prefix}; /sessions lists them.")
}

pub fn ambiguous_prefix(prefix: &str) -> String {
    format!("More than one conversation starts with {prefix}; give more of the id.")
}

/// The `/sessions` answer.
pub fn sessions(sessions: &[SessionSummary], current: &SessionId, now: i64) -> String {
    if sessions.is_empty() {
        return NO_CONVERSATIONS.to_owned();
    }
    let mut text = "Your recent conversations:".to_owned();
    for session in sessions {
        let label = session
            .title
            .clone()
            .or_else(|| session.first_text.as_deref().map(first_words))
            .unwrap_or_else(|| "(empty)".to_owned());
        let marker = if session.id == *current {
            " (this chat)"
        } else {
            ""
        };
        // Writing to a `String` cannot fail.
        let _ = write!(
            text,
            "\n{}  {label}  [{}, {}]{marker}",
            short_id(&session.id),
            session.platform,
            ago(now.saturating_sub(session.updated_at))
        );
    }
    text.push_str("\nContinue one here with /resume ID.");
    text
}

/// The `/usage` answer: `cost` in nano-dollars when prices are known,
/// `daily_usd` the principal's cap (0: none).
pub fn usage(summary: &UsageSummary, cost: Option<i64>, daily_usd: f64) -> String {
    let usage = &summary.usage;
    // Input tokens include cached ones (see `Usage`).
    let cached_percent = usage
        .cache_read_tokens
        .saturating_mul(100)
        .checked_div(usage.input_tokens)
        .unwrap_or(0);
    let cost = match cost {
        // Far below 2^52 nano-dollars, so the conversion is exact.
        Some(nanos) => format!(
            "about ${:.4} (estimated from the price table)",
            nanos as f64 / 1e9
        ),
        None => "cost unknown (no prices configured for these models)".to_owned(),
    };
    let limit = if daily_usd > 0.0 {
        format!(" Daily limit: ${daily_usd:.2}.")
    } else {
        String::new()
    };
    format!(
        "Today (UTC): {} model calls, {} input tokens ({cached_percent}% read from the \
         provider cache), {} output tokens, {cost}.{limit}",
        summary.calls, usage.input_tokens, usage.output_tokens
    )
}

/// The first eight characters of a session id, enough to tell sessions apart.
fn short_id(id: &SessionId) -> &str {
    let id = id.as_str();
    id.get(..8).unwrap_or(id)
}

/// Up to six words of a message, on one line.
fn first_words(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut label = words.iter().take(6).copied().collect::<Vec<_>>().join(" ");
    if words.len() > 6 {
        label.push('…');
    }
    label
}

/// A duration in milliseconds as "5 min ago".
fn ago(ms: i64) -> String {
    let minutes = ms / 60_000;
    match minutes {
        i64::MIN..=0 => "just now".to_owned(),
        1..=59 => format!("{minutes} min ago"),
        60..=1439 => format!("{} h ago", minutes / 60),
        _ => format!("{} days ago", minutes / 1440),
    }
}

/// A press of a button that names no open question of ours.
pub const BUTTON_UNKNOWN: &str = "This button is no longer valid.";
/// The presser decided.
pub const DECIDED: &str = "Done.";
/// Someone decided first, or the question expired.
pub const ALREADY_DECIDED: &str = "This was already decided.";
/// A press by someone who may not decide.
pub const NOT_YOURS_TO_DECIDE: &str = "Only the person who asked (or an admin) can decide this.";
/// A requester's decision on what the admins decide.
pub const ADMINS_DECIDE: &str = "Only an admin can decide this one; they have been asked.";
/// `/allow` or `/reject` without a number.
pub const APPROVAL_USAGE: &str =
    "Say which request: /allow N (once), /allow N chat (for this conversation) or /reject N.";
/// `/allow N` for no waiting request N.
pub const NO_SUCH_APPROVAL: &str = "There is no such request waiting.";

/// A message that answered the agent's question.
pub const ANSWER_TAKEN: &str = "Thanks, the agent goes on with your answer.";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::run::LoopEnd;

    #[test]
    fn an_empty_answer_is_replaced_by_a_note() {
        let outcome = TurnOutcome::Answered {
            text: " \n".to_owned(),
            end: LoopEnd::Answered,
        };
        assert_eq!(turn_reply(&outcome), EMPTY_REPLY);
    }

    #[test]
    fn limit_replies_carry_the_limit_wording() {
        let outcome = TurnOutcome::TokenLimit {
            reason: "the task used more than its 10 tokens".to_owned(),
        };
        assert_eq!(
            turn_reply(&outcome),
            "Stopped: the task used more than its 10 tokens. Ask again to continue."
        );
        assert_eq!(
            turn_reply(&TurnOutcome::TimeLimit { secs: 30 }),
            "Stopped: this task ran longer than its 30-second limit."
        );
    }

    #[test]
    fn session_labels_keep_six_words() {
        assert_eq!(first_words("one two  three"), "one two three");
        assert_eq!(first_words("a b c d e f g"), "a b c d e f…");
    }

    #[test]
    fn ages_read_in_the_largest_whole_unit() {
        assert_eq!(ago(-5), "just now");
        assert_eq!(ago(5 * 60_000), "5 min ago");
        assert_eq!(ago(3 * 3_600_000), "3 h ago");
        assert_eq!(ago(2 * 86_400_000), "2 days ago");
    }
}
