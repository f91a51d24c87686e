//! Deciding what a parked turn waits for, from wherever the decision comes:
//! a button press, `/allow` and `/reject`, a person's next message (a
//! question's free-text answer), the HTTP API, the expiry.
//!
//! Who may decide is checked here against the stored approval — the person
//! whose message started the turn (the same principal, on any linked
//! platform), or an admin — and a press must come from a chat the question
//! was posted in. The decision itself is the store's one conditional write
//! (first wins, across instances); the winner wakes the session's runner
//! (the turn resumes on this instance) and shows the outcome in every copy
//! of the question.

use crate::domain::{ApprovalKind, ApprovalStatus, PrincipalId, now_ms};
use crate::metrics::Metrics;
use crate::store::{ApprovalRow, Decided, Decision, Store, StoreError};

use super::notices::{self, Answer};
use super::runner::Runner;
use super::texts;

/// Who is deciding.
#[derive(Debug, Clone)]
pub struct Decider {
    pub principal: Option<PrincipalId>,
    /// An admin (`access.admins`) may decide anyone's.
    pub admin: bool,
    /// As the audit shows them: `telegram:12345`, `api:KEY/user`.
    pub label: String,
    /// The chat a press came from (`platform`, `chat`), checked against
    /// the chats the question was posted in; `None` for the API and text
    /// commands, which are checked by who sends them.
    pub chat: Option<(String, String)>,
    /// The platform message the press was under, which its adapter updates
    /// itself (the others are edited here).
    pub pressed: Option<String>,
}

/// What a person decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A button or a command's answer.
    Answer(Answer),
    /// A question answered in the person's own words.
    Text(String),
}

/// Why a decision was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// No such approval (or a nonce, chat or answer that does not fit it).
    Unknown,
    /// Someone else's to decide; what to tell them.
    NotYours(&'static str),
    /// Decided (or expired) already; the row as it stands.
    Settled(Box<ApprovalRow>),
}

/// Decides approvals; cheap to make.
pub struct Approvals<'a> {
    pub store: &'a Store,
    pub runner: &'a Runner,
    pub metrics: &'a Metrics,
}

impl Approvals<'_> {
    /// Records `verdict` on approval `id` for `who`, via `via`; `nonce`,
    /// when given (a press), must be the approval's.
    ///
    /// # Errors
    /// A database failure.
    pub async fn decide(
        &self,
        id: i64,
        nonce: Option<&str>,
        verdict: &Verdict,
        who: &Decider,
        via: &str,
    ) -> Result<Result<ApprovalRow, Refused>, StoreError> {
        let Some(approval) = self.store.approvals().get(id).await? else {
            return Ok(Err(Refused::Unknown));
        };
        if nonce.is_some_and(|nonce| nonce != approval.nonce) {
            return Ok(Err(Refused::Unknown));
        }
        if let Some((platform, chat)) = &who.chat {
            let posted = self.store.approvals().notices(id).await?;
            if !posted
                .iter()
                .any(|row| row.platform.as_str() == platform && row.chat_id.as_str() == chat)
            {
                return Ok(Err(Refused::Unknown));
            }
        }
        if !may_decide(&approval, who) {
            return Ok(Err(Refused::NotYours(if notices::for_admins(&approval) {
                texts::ADMINS_DECIDE
            } else {
                texts::NOT_YOURS_TO_DECIDE
            })));
        }
        let Some((status, answer)) = status_of(&approval, verdict) else {
            return Ok(Err(Refused::Unknown));
        };
        let decision = Decision {
            status,
            answer: answer.as_deref(),
            by: &who.label,
            via,
        };
        match self.store.approvals().decide(id, &decision).await? {
            Decided::Now(row) => {
                tracing::info!(
                    approval_id = id,
                    status = row.status.as_str(),
                    via,
                    "approval decided; the turn resumes"
                );
                self.metrics
                    .approval_settled(row.status.as_str(), now_ms() - row.created_at);
                self.runner.notify(&row.session_id);
                self.show(&row, who.pressed.as_deref()).await;
                Ok(Ok(row))
            }
            Decided::Already(row) => Ok(Err(Refused::Settled(Box::new(row)))),
            Decided::Unknown => Ok(Err(Refused::Unknown)),
        }
    }

    /// Shows a settled approval in every copy of its question, except the
    /// platform message `except` (which its adapter updates itself).
    pub async fn show(&self, approval: &ApprovalRow, except: Option<&str>) {
        let text = notices::settled(approval);
        let Ok(posted) = self.store.approvals().notices(approval.id).await else {
            return;
        };
        for row in posted {
            if row.platform_message_id.is_some() && row.platform_message_id.as_deref() != except {
                self.runner.edit(&row, &text).await;
            }
        }
    }

    /// Expires what is due, wakes the turns that waited, and shows the
    /// expiry in the questions. Returns how many expired.
    ///
    /// # Errors
    /// A database failure.
    pub async fn expire_due(&self) -> Result<usize, StoreError> {
        let expired = self.store.approvals().expire_due(now_ms()).await?;
        for row in &expired {
            tracing::info!(approval_id = row.id, "approval expired unanswered");
            self.metrics
                .approval_settled(row.status.as_str(), now_ms() - row.created_at);
            self.runner.notify(&row.session_id);
            self.show(row, None).await;
        }
        Ok(expired.len())
    }
}

/// Whether `who` may decide `approval`: an admin, or its requester (the
/// same principal) unless the admins decide it.
fn may_decide(approval: &ApprovalRow, who: &Decider) -> bool {
    who.admin
        || (!notices::for_admins(approval)
            && approval.principal_id.is_some()
            && approval.principal_id == who.principal)
}

/// The status (and a question's answer) a verdict gives, if it fits the
/// approval's kind.
fn status_of(
    approval: &ApprovalRow,
    verdict: &Verdict,
) -> Option<(ApprovalStatus, Option<String>)> {
    match (approval.kind, verdict) {
        (ApprovalKind::Question, Verdict::Text(text)) => {
            Some((ApprovalStatus::Answered, Some(text.clone())))
        }
        (ApprovalKind::Question, Verdict::Answer(Answer::Choice(index))) => approval
            .choices()
            .get(*index)
            .map(|choice| (ApprovalStatus::Answered, Some(choice.clone()))),
        (ApprovalKind::Question, Verdict::Answer(Answer::Deny)) => {
            Some((ApprovalStatus::Denied, None))
        }
        (ApprovalKind::Question, _) => None,
        (_, Verdict::Answer(Answer::Allow)) => Some((ApprovalStatus::Allowed, None)),
        (ApprovalKind::Tool, Verdict::Answer(Answer::AllowSession)) => {
            Some((ApprovalStatus::AllowedSession, None))
        }
        (_, Verdict::Answer(Answer::Deny)) => Some((ApprovalStatus::Denied, None)),
        _ => None,
    }
}
