//! A tool's own question (an MCP server's elicitation) put to the person a
//! turn answers, while the call that asked waits for it.
//!
//! The question is an approval of kind `question`, as `ask_user`'s: posted
//! at once (the scheduler's deliverer sends it), with its choices as
//! buttons, and answered by a button, the person's next message, or the
//! API. Unlike `ask_user` the turn does not park: the server holds its
//! request open on its connection, so the call — and its worker — waits,
//! reading the approval until it is settled or expires (at the latest when
//! the call would time out). Its `request_id` is the call's own with
//! `:ask:` and a nonce after it, so it is never taken for the call's
//! checkpoint (a call in doubt is asked about under the checkpoint's).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;

use super::notices;
use crate::agent::asking::{Asker, nonce};
use crate::domain::{ApprovalKind, ApprovalStatus, InboundId, SessionId, canonical_json, now_ms};
use crate::store::{Batch, Decision, NewApproval, OutboxRow, Store, StoreError};
use crate::tools::approval::{ApprovalPolicy, Approver};
use crate::tools::tasks::TaskWake;
use crate::tools::{AskPerson, Asked, ToolError};

/// How often a waiting call reads its question's row.
const POLL: Duration = Duration::from_millis(200);

/// Asks the person of one turn.
#[derive(Debug)]
pub struct PersonAsker {
    pub store: Store,
    pub asker: Arc<Asker>,
    pub policy: Arc<ApprovalPolicy>,
    pub session_id: SessionId,
    pub inbound_id: InboundId,
    /// Where the question is handed for sending.
    pub wake: Arc<TaskWake>,
    /// The call's time limit: the question expires by then.
    pub within: Duration,
}

#[async_trait]
impl AskPerson for PersonAsker {
    async fn ask(
        &self,
        request_id: &str,
        asker: &str,
        question: &str,
        choices: &[String],
    ) -> Result<Asked, ToolError> {
        let id = self
            .post(request_id, asker, question, choices)
            .await
            .map_err(|err| ToolError::Failed(format!("the question could not be asked: {err}")))?;
        let mut open = Open {
            store: self.store.clone(),
            id: Some(id),
        };
        let asked = self.answer_of(id).await;
        open.id = None;
        asked
    }
}

/// A question still open when its call ends without an answer (`/stop`,
/// the call's timeout): closed as stopped, so a later tap or message
/// does not answer a call that is gone.
struct Open {
    store: Store,
    id: Option<i64>,
}

impl Drop for Open {
    fn drop(&mut self) {
        let (Some(id), Ok(runtime)) = (self.id, tokio::runtime::Handle::try_current()) else {
            return;
        };
        let store = self.store.clone();
        runtime.spawn(async move {
            let closed = Decision {
                status: ApprovalStatus::Stopped,
                answer: None,
                by: "switchboard",
                via: "stop",
            };
            if let Err(err) = store.approvals().decide(id, &closed).await {
                tracing::warn!(approval_id = id, error = %err, "an abandoned question was not closed");
            }
        });
    }
}

impl PersonAsker {
    /// Reads question `id` until it is settled or expired.
    async fn answer_of(&self, id: i64) -> Result<Asked, ToolError> {
        loop {
            tokio::time::sleep(POLL).await;
            let row = self.store.approvals().get(id).await.map_err(|err| {
                ToolError::Failed(format!("the question's answer could not be read: {err}"))
            })?;
            let Some(row) = row else {
                return Ok(Asked::Unanswered);
            };
            match row.status {
                ApprovalStatus::Pending if row.expires_at > now_ms() => {}
                ApprovalStatus::Answered => {
                    return Ok(Asked::Answer(row.answer.unwrap_or_default()));
                }
                ApprovalStatus::Denied => return Ok(Asked::Declined),
                _ => return Ok(Asked::Unanswered),
            }
        }
    }

    /// Writes the question and hands its notice over for sending; returns
    /// its id.
    async fn post(
        &self,
        request_id: &str,
        tool: &str,
        question: &str,
        choices: &[String],
    ) -> Result<i64, StoreError> {
        let nonce = nonce();
        let call_id = format!("{request_id}:ask:{nonce}");
        let arguments = canonical_json(&json!({"question": question, "choices": choices}));
        let within = self
            .policy
            .timeout_ms()
            .min(i64::try_from(self.within.as_millis()).unwrap_or(i64::MAX));
        let asker = &self.asker;
        let mut batch = Batch::new();
        batch.ask(
            &NewApproval {
                nonce: &nonce,
                session_id: &self.session_id,
                inbound_id: self.inbound_id,
                call_id: &call_id,
                kind: ApprovalKind::Question,
                tool,
                arguments: &arguments,
                choices,
                principal_id: asker.principal_id,
                platform: &asker.platform,
                account: &asker.account,
                chat_id: &asker.chat_id,
                thread_id: asker.thread_id.as_ref(),
                sender_id: &asker.sender_id,
                approver: Approver::Requester.as_str(),
                expires_at: now_ms().saturating_add(within),
            },
            &call_id,
        );
        let ids = self.store.write_ids(batch).await?;
        let id = ids
            .last()
            .copied()
            .ok_or_else(|| StoreError::Corrupt("a question without an id".to_owned()))?;
        let approval = self
            .store
            .approvals()
            .get(id)
            .await?
            .ok_or_else(|| StoreError::Corrupt("a question not stored".to_owned()))?;
        let mut batch = Batch::new();
        let postings = notices::postings(&approval, &self.policy, &[]);
        notices::post(&mut batch, &self.store, approval.id, &postings);
        for row in self.store.write(batch).await? {
            self.wake
                .send_notice(crate::store::read::<OutboxRow>(&row)?);
        }
        // The scheduler expires what nobody answers: it learns the expiry.
        self.wake.wake();
        tracing::info!(approval_id = id, tool, "a tool asks the person a question");
        Ok(id)
    }
}
