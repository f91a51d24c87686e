//! What a person is shown when a turn waits for them: the question of an
//! approval (the tool and its complete arguments, formatted) with its
//! buttons, the text it turns into once decided, and the buttons' action
//! ids (`ap:<id>:<nonce>:<answer>`), which a press hands back and
//! [`Press::parse`] reads — never trusted beyond naming an approval, whose
//! nonce, chat and decider are checked against what is stored.

use switchboard_contract::{
    AccountId, ActionId, Button, ButtonStyle, ChatId, PlatformName, ThreadId,
};

use crate::domain::schedule::span_words;
use crate::domain::{ApprovalKind, ApprovalStatus, SessionId};
use crate::store::{ApprovalRow, Batch, DirectChat, Notice, Store};
use crate::tools::approval::{ApprovalPolicy, Approver};

/// What a button press (or a text command) answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Allow once (in doubt: run it again).
    Allow,
    /// Allow this tool for the rest of the conversation.
    AllowSession,
    /// Deny (in doubt: skip it).
    Deny,
    /// A question's offered answer, by index.
    Choice(usize),
}

impl Answer {
    fn code(&self) -> String {
        match self {
            Self::Allow => "a".to_owned(),
            Self::AllowSession => "s".to_owned(),
            Self::Deny => "d".to_owned(),
            Self::Choice(index) => format!("c{index}"),
        }
    }

    fn from_code(code: &str) -> Option<Self> {
        Some(match code {
            "a" => Self::Allow,
            "s" => Self::AllowSession,
            "d" => Self::Deny,
            _ => Self::Choice(code.strip_prefix('c')?.parse().ok()?),
        })
    }
}

/// A press as its action id names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Press {
    pub approval_id: i64,
    pub nonce: String,
    pub answer: Answer,
}

impl Press {
    /// Reads an action id; `None` for anything that is not one of ours.
    #[must_use]
    pub fn parse(action: &str) -> Option<Self> {
        let mut parts = action.split(':');
        if parts.next()? != "ap" {
            return None;
        }
        let approval_id = parts.next()?.parse().ok()?;
        let nonce = parts.next()?.to_owned();
        let answer = Answer::from_code(parts.next()?)?;
        if parts.next().is_some() {
            return None;
        }
        Some(Self {
            approval_id,
            nonce,
            answer,
        })
    }
}

fn action(approval: &ApprovalRow, answer: &Answer) -> Option<ActionId> {
    ActionId::parse(format!(
        "ap:{}:{}:{}",
        approval.id,
        approval.nonce,
        answer.code()
    ))
    .ok()
}

/// The arguments as shown: pretty JSON, complete (a value is never cut).
fn shown_arguments(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .ok()
        .and_then(|value| serde_json::to_string_pretty(&value).ok())
        .unwrap_or_else(|| arguments.to_owned())
}

/// The question's text and its buttons (as the contract's JSON).
#[must_use]
pub fn question(approval: &ApprovalRow, policy: &ApprovalPolicy) -> (String, String) {
    let id = approval.id;
    let expires = span_words(policy.settings.timeout);
    let (text, answers): (String, Vec<(Answer, String, ButtonStyle)>) = match approval.kind {
        ApprovalKind::Tool => (
            format!(
                "Approval needed (#{id}): the agent wants to run `{tool}` with these \
                 arguments:\n\n```json\n{args}\n```\n\nAllow it? This request expires in \
                 {expires}. You can also reply /allow {id}, /allow {id} chat (for the rest of \
                 this conversation) or /reject {id}.",
                tool = approval.tool,
                args = shown_arguments(&approval.arguments),
            ),
            vec![
                (Answer::Allow, "Allow once".to_owned(), ButtonStyle::Primary),
                (
                    Answer::AllowSession,
                    "Allow for this conversation".to_owned(),
                    ButtonStyle::Plain,
                ),
                (Answer::Deny, "Deny".to_owned(), ButtonStyle::Danger),
            ],
        ),
        ApprovalKind::InDoubt => (
            format!(
                "The gateway restarted while `{tool}` was running (#{id}), so whether it took \
                 effect is unknown. Its arguments:\n\n```json\n{args}\n```\n\nRun it again? \
                 You can also reply /allow {id} (run again) or /reject {id} (skip).",
                tool = approval.tool,
                args = shown_arguments(&approval.arguments),
            ),
            vec![
                (Answer::Allow, "Run again".to_owned(), ButtonStyle::Danger),
                (Answer::Deny, "Skip".to_owned(), ButtonStyle::Plain),
            ],
        ),
        ApprovalKind::Question => {
            let question = serde_json::from_str::<serde_json::Value>(&approval.arguments)
                .ok()
                .and_then(|args| args.get("question")?.as_str().map(str::to_owned))
                .unwrap_or_default();
            let choices = approval.choices();
            let hint = if choices.is_empty() {
                "Reply with your answer.".to_owned()
            } else {
                "Tap an answer, or reply in your own words.".to_owned()
            };
            (
                format!("Question (#{id}): {question}\n\n{hint}"),
                choices
                    .into_iter()
                    .enumerate()
                    .map(|(index, choice)| (Answer::Choice(index), choice, ButtonStyle::Plain))
                    .collect(),
            )
        }
    };
    let buttons: Vec<Button> = answers
        .into_iter()
        .filter_map(|(answer, label, style)| {
            Some(Button::new(action(approval, &answer)?, label).styled(style))
        })
        .collect();
    let json = serde_json::to_string(&buttons).unwrap_or_else(|_| "[]".to_owned());
    (text, json)
}

/// Whether the admins decide `approval` (`approver = "admins"`), rather
/// than the person whose message started the turn. A question is always
/// the requester's to answer.
#[must_use]
pub fn for_admins(approval: &ApprovalRow) -> bool {
    approval.approver == Approver::Admins.as_str() && approval.kind != ApprovalKind::Question
}

/// The question as an admin's direct chat shows it: who asked, and where.
#[must_use]
pub fn to_admin(approval: &ApprovalRow, question: &str) -> String {
    format!(
        "{question}\n\nRequested by {platform} user {sender} (chat {chat}).",
        platform = approval.platform,
        sender = approval.sender_id,
        chat = approval.chat_id,
    )
}

/// What the requester is told while the admins decide.
#[must_use]
pub fn waiting_for_admins(approval: &ApprovalRow, policy: &ApprovalPolicy) -> String {
    format!(
        "`{tool}` (#{id}) needs an admin's approval; the admins have been asked. The agent goes \
         on once one of them decides (the request expires in {expires}).",
        tool = approval.tool,
        id = approval.id,
        expires = span_words(policy.settings.timeout),
    )
}

/// One copy of a question to post: where, and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posting {
    /// Unique per copy: `approval:<id>` in the requester's chat,
    /// `approval:<id>:<session>` in an admin's.
    pub key: String,
    pub session_id: SessionId,
    pub platform: PlatformName,
    pub account: AccountId,
    pub chat_id: ChatId,
    pub thread_id: Option<ThreadId>,
    pub text: String,
    pub buttons: Option<String>,
}

/// Adds `postings` (copies of approval `approval_id`'s question) to
/// `batch`, each claimed for sending by this instance.
pub fn post(batch: &mut Batch, store: &Store, approval_id: i64, postings: &[Posting]) {
    let instance = store.instance();
    for posting in postings {
        batch.post_notice(
            &Notice {
                key: &posting.key,
                session_id: &posting.session_id,
                platform: &posting.platform,
                account: &posting.account,
                chat_id: &posting.chat_id,
                thread_id: posting.thread_id.as_ref(),
                text: &posting.text,
                buttons: posting.buttons.as_deref(),
                approval_id: Some(approval_id),
            },
            &instance.id,
            store.clock_sql(),
            instance.lease_ttl_ms(),
        );
    }
}

/// Where `approval`'s question goes, the requester's chat first: there,
/// unless the admins decide it and one of them can be reached in a direct
/// chat elsewhere (`admin_chats`) — then each of those chats gets the
/// question with its buttons, and the requester is told it waits for them.
#[must_use]
pub fn postings(
    approval: &ApprovalRow,
    policy: &ApprovalPolicy,
    admin_chats: &[DirectChat],
) -> Vec<Posting> {
    let (text, buttons) = question(approval, policy);
    let here = |chat: &DirectChat| {
        chat.platform == approval.platform
            && chat.account == approval.account
            && chat.chat_id == approval.chat_id
    };
    let elsewhere: Vec<&DirectChat> = admin_chats.iter().filter(|chat| !here(chat)).collect();
    let requester = |text: String, buttons: Option<String>| Posting {
        key: format!("approval:{}", approval.id),
        session_id: approval.session_id.clone(),
        platform: approval.platform.clone(),
        account: approval.account.clone(),
        chat_id: approval.chat_id.clone(),
        thread_id: approval.thread_id.clone(),
        text,
        buttons,
    };
    if !for_admins(approval) || elsewhere.is_empty() {
        // Nobody to route to: asked where the turn is, for an admin there
        // (or `/allow` anywhere) to decide.
        return vec![requester(text, Some(buttons))];
    }
    let mut posted = vec![if admin_chats.iter().any(here) {
        requester(text.clone(), Some(buttons.clone()))
    } else {
        requester(waiting_for_admins(approval, policy), None)
    }];
    posted.extend(elsewhere.into_iter().map(|chat| Posting {
        key: format!("approval:{}:{}", approval.id, chat.session_id),
        session_id: chat.session_id.clone(),
        platform: chat.platform.clone(),
        account: chat.account.clone(),
        chat_id: chat.chat_id.clone(),
        thread_id: None,
        text: to_admin(approval, &text),
        buttons: Some(buttons.clone()),
    }));
    posted
}

/// What a person whose message arrives while the turn before it waits on
/// `approval` is told: their message is held back until it is settled.
#[must_use]
pub fn reminder(approval: &ApprovalRow) -> String {
    let id = approval.id;
    let what = match approval.kind {
        ApprovalKind::Question => format!("the answer to its question (#{id})"),
        _ if for_admins(approval) => {
            format!("an admin's decision on `{}` (#{id})", approval.tool)
        }
        _ => format!(
            "a decision on `{}` (#{id}): /allow {id} or /reject {id}",
            approval.tool
        ),
    };
    format!(
        "Your message will be answered after the agent's current task, which is waiting for \
         {what}. /stop ends that task."
    )
}

/// What a question's message says once it is settled (its buttons gone).
#[must_use]
pub fn settled(approval: &ApprovalRow) -> String {
    let id = approval.id;
    let tool = &approval.tool;
    let who = approval
        .decided_by
        .as_deref()
        .map(|by| format!(" by {by}"))
        .unwrap_or_default();
    match (approval.kind, approval.status) {
        (ApprovalKind::Question, ApprovalStatus::Answered) => format!(
            "Question (#{id}) answered{who}: {}",
            approval.answer.as_deref().unwrap_or_default()
        ),
        (ApprovalKind::Question, ApprovalStatus::Expired) => {
            format!("Question (#{id}) expired unanswered.")
        }
        (ApprovalKind::InDoubt, ApprovalStatus::Allowed) => {
            format!("`{tool}` (#{id}) is run again{who}.")
        }
        (ApprovalKind::InDoubt, ApprovalStatus::Denied) => {
            format!("`{tool}` (#{id}) is skipped{who}.")
        }
        (_, ApprovalStatus::Allowed) => format!("`{tool}` (#{id}) allowed once{who}."),
        (_, ApprovalStatus::AllowedSession) => {
            format!("`{tool}` (#{id}) allowed for this conversation{who}.")
        }
        (_, ApprovalStatus::Denied) => format!("`{tool}` (#{id}) denied{who}."),
        (_, ApprovalStatus::Expired) => format!("`{tool}` (#{id}) expired; it was not run."),
        (_, ApprovalStatus::Stopped) => format!("`{tool}` (#{id}): the task was stopped."),
        (_, ApprovalStatus::Answered | ApprovalStatus::Pending) => {
            format!("`{tool}` (#{id}) waits for a decision.")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_ids_read_back_and_nothing_else_does() {
        let press = Press::parse("ap:12:a1b2c3d4e5:s").expect("ours");
        assert_eq!(press.approval_id, 12);
        assert_eq!(press.answer, Answer::AllowSession);
        assert_eq!(
            Press::parse("ap:3:n:c2").map(|p| p.answer),
            Some(Answer::Choice(2))
        );
        for forged in ["ap:x:n:a", "ap:1:n:z", "ap:1:n:a:extra", "task:1", "ap:1"] {
            assert_eq!(Press::parse(forged), None, "{forged}");
        }
    }
}
