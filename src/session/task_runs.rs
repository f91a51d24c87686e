//! What a turn does differently when its message is a task's run: the
//! run's bookkeeping rides in the batch that ends the turn (the run's
//! status, the task's delivered count and failures in a row, the task done
//! or paused), a task paused for failing says so in its reply, a background
//! run's answer is relayed to the conversation its task reports to, and a
//! relay turn records and delivers that answer with no model call.

use crate::domain::{InboundId, Outcome, Scope};
use crate::store::tasks::{RunEnd, TaskRow};
use crate::store::{Batch, InboundRow, NewMessage, Store, StoreError};
use crate::tools::tasks::TaskSettings;

use super::texts;

/// The task run a turn answers.
pub struct TaskRun {
    pub task: TaskRow,
    pub run_id: i64,
}

impl TaskRun {
    /// The run `inbound` is, if it is one (one read, only then).
    ///
    /// # Errors
    /// A database failure.
    pub async fn of(store: &Store, inbound: &InboundRow) -> Result<Option<Self>, StoreError> {
        let Some(run_id) = inbound.task_run_id.filter(|_| inbound.relay.is_none()) else {
            return Ok(None);
        };
        Ok(store
            .tasks()
            .of_run(run_id)
            .await?
            .map(|task| Self { task, run_id }))
    }

    /// Whether this run is a background one (its own session, its own
    /// budget).
    #[must_use]
    pub fn is_background(&self) -> bool {
        self.task.background.0
    }

    /// What the turn's reply gains when ending with `outcome` pauses the
    /// task (its failures in a row reach the limit).
    #[must_use]
    pub fn pause_notice(&self, outcome: Outcome, settings: &TaskSettings) -> Option<String> {
        let failed = !matches!(outcome, Outcome::Answered | Outcome::BudgetExhausted);
        let limit = i64::from(settings.max_consecutive_failures);
        (failed && self.task.failures + 1 >= limit)
            .then(|| texts::task_paused(self.task.id, limit, outcome))
    }

    /// The run's bookkeeping, and for a background run the relay of
    /// `answer` to its conversation, for the batch that ends the turn.
    pub fn writes(&self, outcome: Outcome, answer: Option<&str>, settings: &TaskSettings) -> Batch {
        let delivered = answer.is_some();
        let mut batch = Batch::new();
        batch.finish_task_run(&RunEnd {
            run_id: self.run_id,
            outcome,
            delivered,
            max_failures: i64::from(settings.max_consecutive_failures),
        });
        if self.is_background()
            && let Some(answer) = answer
        {
            batch.relay_task_answer(&self.task, self.run_id, answer);
        }
        batch
    }
}

/// The entries a relay turn records in its conversation: the relay's
/// message (`[background task 7 finished]`) and the answer, as the
/// assistant's.
///
/// # Errors
/// The entry cannot be encoded.
pub fn relay_entries(
    inbound: &InboundRow,
    task: InboundId,
    answer: &str,
) -> Result<(Batch, NewMessage), StoreError> {
    let mut writes = Batch::new();
    writes.append_message(&NewMessage::from_wire(
        &inbound.session_id,
        Some(task),
        &Scope::top(),
        crate::domain::ChatMessage::user(inbound.text.clone()),
    ))?;
    let reply = NewMessage::from_wire(
        &inbound.session_id,
        Some(task),
        &Scope::top(),
        crate::domain::ChatMessage::Assistant {
            content: Some(answer.to_owned()),
            tool_calls: Vec::new(),
        },
    );
    Ok((writes, reply))
}
