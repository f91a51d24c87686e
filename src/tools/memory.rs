//! The `memory` tool: long-term memory about the person the agent talks
//! with. Actions `remember`, `forget` (by a fact's id) and `list`, on the
//! facts of the principal whose message the task answers (see
//! `store::memories`), within the limits of `[memory]`.
//!
//! What is remembered reaches the person's next sessions: a session's system
//! prompt is frozen when it starts (see `agent::prompt`), so the running
//! conversation keeps its prefix, and the provider's prompt cache its hits.
//!
//! The group rule: in a group chat's session every action is refused unless
//! the call says `"personal": true`, which the model is told to set only when
//! the person speaking asked about their own memory; the action then applies
//! to that person's facts — never to the group, and never to another member.

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, arguments_schema};
use crate::domain::PrincipalId;
use crate::store::{Remembered, Store, StoreError};
use crate::tools::settings::MemorySettings;

/// The tool's name.
pub const MEMORY: &str = "memory";

const DESCRIPTION: &str = "Keeps short facts about the person you are talking with, across \
conversations and their linked accounts. Action `remember` (with `text`: one short sentence, such \
as a name, a preference, their circumstances or a decision) when they tell you something worth \
knowing next time or ask you to remember it; `forget` (with the fact's `id`) when they ask you to \
or a fact is wrong; `list` to see the facts with their ids. Facts reach the system prompt of their \
next conversations, not this one. In a group chat every action is refused unless `personal` is \
true: set it only when the person speaking asked you to remember, forget or list something about \
themselves; it then acts on that person's own memory.";

/// Reads and writes a person's facts.
pub struct Memory {
    store: Store,
    settings: MemorySettings,
}

impl Memory {
    /// The tool over `store`, within the limits of `settings`.
    pub fn new(store: Store, settings: MemorySettings) -> Self {
        Self { store, settings }
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Args {
    /// `remember`, `forget` or `list`.
    action: Action,
    /// For `remember`: the fact, one short sentence.
    #[serde(default)]
    #[schemars(with = "String")]
    text: Option<String>,
    /// For `forget`: the fact's id (from `list`, or #N in your instructions).
    #[serde(default)]
    #[schemars(with = "i64")]
    id: Option<i64>,
    /// True only when the person speaking asked about their own memory;
    /// required in group chats.
    #[serde(default)]
    personal: bool,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Action {
    Remember,
    Forget,
    List,
}

/// Why a group chat's call did nothing.
const GROUP_REFUSED: &str = "this is a group chat, and memory is personal: nothing was done. \
    Only if the person speaking asked you to remember, forget or list something about \
    themselves, call again with \"personal\": true (it then acts on their own memory, which the \
    others never see in their conversations).";

#[async_trait]
impl Tool for Memory {
    fn name(&self) -> &'static str {
        MEMORY
    }

    fn description(&self) -> &'static str {
        DESCRIPTION
    }

    fn parameters(&self) -> Value {
        arguments_schema::<Args>()
    }

    async fn call(&self, ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
        let args: Args = serde_json::from_value(args)
            .map_err(|err| ToolError::InvalidArguments(err.to_string()))?;
        let principal = ctx.principal.ok_or_else(|| {
            ToolError::Failed("memory needs a known person, and this message has none".to_owned())
        })?;
        // A session without an owner is a group chat's.
        let group = self
            .store
            .sessions()
            .get(&ctx.session_id)
            .await
            .map_err(store_failed)?
            .is_none_or(|session| session.principal.is_none());
        if group && !args.personal {
            return Err(ToolError::Failed(GROUP_REFUSED.to_owned()));
        }
        match args.action {
            Action::Remember => self.remember(ctx, principal, args.text).await,
            Action::Forget => self.forget(principal, args.id).await,
            Action::List => self.list(principal).await,
        }
    }
}

impl Memory {
    async fn remember(
        &self,
        ctx: &ToolContext,
        principal: PrincipalId,
        text: Option<String>,
    ) -> Result<Value, ToolError> {
        let text = normalise_fact(text.as_deref().unwrap_or_default());
        if text.is_empty() {
            return Err(ToolError::InvalidArguments(
                "`remember` needs `text`: the fact, one short sentence".to_owned(),
            ));
        }
        let chars = text.chars().count();
        let max_chars = self.settings.max_entry_chars as usize;
        if chars > max_chars {
            return Err(ToolError::InvalidArguments(format!(
                "the fact is {chars} characters long; a fact may have at most {max_chars}: \
                 shorten it"
            )));
        }
        let max_entries = u64::from(self.settings.max_entries.get());
        let remembered = self
            .store
            .memories()
            .remember(principal, &text, Some(&ctx.session_id), max_entries)
            .await
            .map_err(store_failed)?;
        match remembered {
            Remembered::Added { entry, count } => {
                tracing::info!(principal_id = %principal, fact_id = entry.id, "fact remembered");
                Ok(json!({
                    "id": entry.id,
                    "remembered": entry.text,
                    "facts": count,
                    "max_facts": max_entries,
                    "note": "kept; it is in this person's next conversations (this one goes on \
                             without it in its instructions)",
                }))
            }
            Remembered::Known { id } => Ok(json!({
                "id": id,
                "remembered": text,
                "note": "this fact was already kept; nothing was added",
            })),
            Remembered::Full { count } => Err(ToolError::Failed(format!(
                "memory is full: {count} of {max_entries} facts are kept. Forget one that no \
                 longer matters first (`list` shows them with their ids), or tell the person \
                 they can remove facts with /memory"
            ))),
        }
    }

    async fn forget(&self, principal: PrincipalId, id: Option<i64>) -> Result<Value, ToolError> {
        let id = id.ok_or_else(|| {
            ToolError::InvalidArguments(
                "`forget` needs `id`: the fact's id, as `list` shows it".to_owned(),
            )
        })?;
        if self
            .store
            .memories()
            .forget(principal, id)
            .await
            .map_err(store_failed)?
        {
            tracing::info!(principal_id = %principal, fact_id = id, "fact forgotten");
            Ok(json!({ "forgotten": id }))
        } else {
            Err(ToolError::Failed(format!(
                "no fact with id {id} in this person's memory (`list` shows the ids)"
            )))
        }
    }

    async fn list(&self, principal: PrincipalId) -> Result<Value, ToolError> {
        let facts = self
            .store
            .memories()
            .list(principal)
            .await
            .map_err(store_failed)?;
        let facts: Vec<Value> = facts
            .into_iter()
            .map(|fact| json!({ "id": fact.id, "text": fact.text }))
            .collect();
        Ok(json!({
            "facts": facts,
            "max_facts": self.settings.max_entries,
        }))
    }
}

/// A fact as kept: one line, runs of white space made one space, trimmed.
pub fn normalise_fact(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A database failure, logged; the model is told only that memory failed.
fn store_failed(err: StoreError) -> ToolError {
    tracing::error!(error = %err, "memory tool: database failure");
    ToolError::Failed("memory is not available right now (a database error)".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::SessionId;
    use crate::store::NewSession;
    use crate::store::test_support::scratch_store;

    /// The schema is in every cached prompt: its bytes must not drift.
    #[test]
    fn the_argument_schema_keeps_its_bytes() {
        let schema = serde_json::to_string(&arguments_schema::<Args>()).expect("json");
        assert_eq!(
            schema,
            r##"{"$defs":{"Action":{"enum":["remember","forget","list"],"type":"string"}},"additionalProperties":false,"properties":{"action":{"$ref":"#/$defs/Action","description":"`remember`, `forget` or `list`."},"id":{"description":"For `forget`: the fact's id (from `list`, or #N in your instructions).","format":"int64","type":"integer"},"personal":{"description":"True only when the person speaking asked about their own memory;\nrequired in group chats.","type":"boolean"},"text":{"description":"For `remember`: the fact, one short sentence.","type":"string"}},"required":["action"],"type":"object"}"##
        );
    }

    #[test]
    fn facts_are_one_trimmed_line() {
        assert_eq!(
            normalise_fact("  likes\n\n tea\tand  cake "),
            "likes tea and cake"
        );
        assert_eq!(normalise_fact(" \n "), "");
    }

    struct Fixture {
        tool: Memory,
        store: Store,
        _dir: tempfile::TempDir,
    }

    async fn fixture(max_entries: u32, max_entry_chars: u32) -> Fixture {
        let (store, dir) = scratch_store().await;
        let tool = Memory::new(
            store.clone(),
            MemorySettings {
                enabled: true,
                max_entries: std::num::NonZeroU32::new(max_entries).expect("at least 1"),
                max_entry_chars,
                extract_at_compaction: false,
            },
        );
        Fixture {
            tool,
            store,
            _dir: dir,
        }
    }

    /// A session of `owner` (a group chat's when `None`) and its tool context
    /// for messages from `speaker`.
    async fn context(
        store: &Store,
        owner: Option<PrincipalId>,
        speaker: PrincipalId,
    ) -> ToolContext {
        let id = SessionId::generate();
        store
            .sessions()
            .create(&NewSession {
                id: id.clone(),
                origin_key: format!("test/main/{id}"),
                platform: switchboard_contract::PlatformName::parse("test").expect("name"),
                account: switchboard_contract::AccountId::parse("main").expect("account"),
                chat_id: switchboard_contract::ChatId::parse("chat").expect("chat"),
                thread_id: None,
                system_prompt: String::new(),
                model: "m".to_owned(),
                toolset: vec![MEMORY.into()],
                principal: owner,
            })
            .await
            .expect("session");
        ToolContext {
            request_id: "r".to_owned(),
            session_id: id,
            inbound_id: crate::domain::InboundId::new(1),
            principal: Some(speaker),
            subagents: None,
            person: None,
        }
    }

    async fn person(store: &Store, user: &str) -> PrincipalId {
        store
            .principals()
            .resolve_identity("test", "main", user)
            .await
            .expect("identity")
            .principal
    }

    fn error(result: Result<Value, ToolError>) -> String {
        result.expect_err("refused").to_string()
    }

    #[tokio::test]
    async fn remember_list_and_forget_in_a_direct_chat() {
        let f = fixture(10, 100).await;
        let ada = person(&f.store, "ada").await;
        let ctx = context(&f.store, Some(ada), ada).await;

        let kept = f
            .tool
            .call(&ctx, json!({"action": "remember", "text": " Likes\ntea. "}))
            .await
            .expect("kept");
        assert_eq!(kept["remembered"], "Likes tea.");
        assert_eq!(kept["facts"], 1);
        let again = f
            .tool
            .call(&ctx, json!({"action": "remember", "text": "Likes tea."}))
            .await
            .expect("known");
        assert_eq!(again["id"], kept["id"]);
        let listed = f
            .tool
            .call(&ctx, json!({"action": "list"}))
            .await
            .expect("list");
        assert_eq!(
            listed,
            json!({"facts": [{"id": kept["id"], "text": "Likes tea."}], "max_facts": 10})
        );
        let forgotten = f
            .tool
            .call(&ctx, json!({"action": "forget", "id": kept["id"]}))
            .await
            .expect("forgotten");
        assert_eq!(forgotten["forgotten"], kept["id"]);
        assert!(f.store.memories().list(ada).await.expect("db").is_empty());
        let missing = error(
            f.tool
                .call(&ctx, json!({"action": "forget", "id": kept["id"]}))
                .await,
        );
        assert!(missing.contains("no fact with id"), "{missing}");
    }

    #[tokio::test]
    async fn limits_give_clear_errors() {
        let f = fixture(1, 10).await;
        let ada = person(&f.store, "ada").await;
        let ctx = context(&f.store, Some(ada), ada).await;

        let long = error(
            f.tool
                .call(&ctx, json!({"action": "remember", "text": "eleven char"}))
                .await,
        );
        assert!(
            long.contains("11 characters") && long.contains("at most 10"),
            "{long}"
        );
        let empty = error(f.tool.call(&ctx, json!({"action": "remember"})).await);
        assert!(empty.contains("needs `text`"), "{empty}");
        f.tool
            .call(&ctx, json!({"action": "remember", "text": "one"}))
            .await
            .expect("kept");
        let full = error(
            f.tool
                .call(&ctx, json!({"action": "remember", "text": "two"}))
                .await,
        );
        assert!(full.contains("memory is full: 1 of 1"), "{full}");
        let no_id = error(f.tool.call(&ctx, json!({"action": "forget"})).await);
        assert!(no_id.contains("needs `id`"), "{no_id}");
        let bad = error(f.tool.call(&ctx, json!({"action": "recall"})).await);
        assert!(bad.starts_with("invalid arguments"), "{bad}");
    }

    #[tokio::test]
    async fn a_group_chat_writes_only_when_personal_and_to_the_speaker() {
        let f = fixture(10, 100).await;
        let ada = person(&f.store, "ada").await;
        let bob = person(&f.store, "bob").await;
        let ctx = context(&f.store, None, bob).await;

        let refused = error(
            f.tool
                .call(
                    &ctx,
                    json!({"action": "remember", "text": "Ada likes tea."}),
                )
                .await,
        );
        assert!(refused.contains("group chat"), "{refused}");
        let listed = error(f.tool.call(&ctx, json!({"action": "list"})).await);
        assert!(listed.contains("group chat"), "{listed}");
        assert!(f.store.memories().list(bob).await.expect("db").is_empty());

        f.tool
            .call(
                &ctx,
                json!({"action": "remember", "text": "Prefers short answers.", "personal": true}),
            )
            .await
            .expect("kept");
        let texts: Vec<String> = f
            .store
            .memories()
            .list(bob)
            .await
            .expect("db")
            .into_iter()
            .map(|fact| fact.text)
            .collect();
        assert_eq!(
            texts,
            ["Prefers short answers."],
            "the speaker's own memory"
        );
        assert!(f.store.memories().list(ada).await.expect("db").is_empty());
    }

    #[tokio::test]
    async fn one_person_cannot_forget_anothers_fact() {
        let f = fixture(10, 100).await;
        let ada = person(&f.store, "ada").await;
        let bob = person(&f.store, "bob").await;
        let ada_ctx = context(&f.store, Some(ada), ada).await;
        let bob_ctx = context(&f.store, Some(bob), bob).await;

        let kept = f
            .tool
            .call(
                &ada_ctx,
                json!({"action": "remember", "text": "Likes tea."}),
            )
            .await
            .expect("kept");
        let refused = error(
            f.tool
                .call(&bob_ctx, json!({"action": "forget", "id": kept["id"]}))
                .await,
        );
        assert!(refused.contains("no fact with id"), "{refused}");
        let listed = f
            .tool
            .call(&bob_ctx, json!({"action": "list"}))
            .await
            .expect("list");
        assert_eq!(listed["facts"], json!([]));
        assert_eq!(f.store.memories().list(ada).await.expect("db").len(), 1);
    }
}
