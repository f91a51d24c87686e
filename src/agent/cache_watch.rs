//! The prompt-cache report: for each model call, whether it read from the
//! provider's prompt cache what the conversation's previous call left
//! there, and when it read less, why: the first part of the request that
//! changed (the model, the tools, the system prompt, the remembered facts,
//! a message of the history, the tool choice) or, when nothing changed,
//! the time since that call (the entry expired) or the provider (evicted,
//! or the request routed to a machine without it).
//!
//! A request is reduced to a [`Shape`]: a running hash and length over its
//! parts in the providers' cache order (model, tools, system text, its
//! tail, then each message), with the tool choice apart (Anthropic drops
//! the cached messages when it changes). The last shape of each
//! conversation (session and scope) is kept in a bounded in-memory map with
//! the input its call was billed, and its [`Fingerprint`] (the fixed parts
//! and the whole, a hundred bytes) is stored on the call's usage row, so a
//! conversation's first call after a restart, on another instance, or once
//! the map dropped it is compared with its last recorded call (which
//! message of the history changed is then not known, only that one did).
//! The verdict, a [`CacheMiss`], is stored on the call's usage row (the
//! console shows it with the turn) and counted in
//! `switchboard_prompt_cache_misses_total{cause}`.
//!
//! What the previous call left cached is its billed input (less a side
//! question's own text, which no later call repeats: compaction's summary
//! request, the extraction of facts). A call that read within a tenth (at
//! least 128 tokens, OpenAI's step) of that is not a miss, nor is one after
//! a call under the providers' 1,024-token minimum.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use rustc_hash::FxHasher;
use serde_json::Value;

use crate::domain::{ChatMessage, Scope, SessionId, ToolSpec, Usage, now_ms};
use crate::llm::{CacheTail, ModelRequest, ToolChoice};

/// Conversations whose last call is remembered; the oldest are dropped
/// first.
const CONVERSATIONS: u64 = 4_096;

/// Past the longest cache lifetime (Anthropic's hour), a conversation's
/// last shape says nothing a verdict could use.
const REMEMBERED_FOR: Duration = Duration::from_secs(3_900);

/// Below this many tokens no provider caches a prefix.
const MIN_CACHEABLE: u64 = 1_024;

/// A read this close to the reusable prefix is a hit: OpenAI caches in
/// 128-token steps, and the reusable prefix is an estimate.
const MIN_SLACK: u64 = 128;

/// A cache entry written for the default lifetime lives this long.
const SHORT_LIFETIME: Duration = Duration::from_secs(300);

/// The parts before the messages: model, tools, system text, its tail.
const FIXED_PARTS: usize = 4;

/// A model request as the prompt cache sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// Per part in cache order: the hash of everything up to its end, and
    /// the characters up to its end.
    parts: Vec<(u64, u64)>,
    tool_choice: ToolChoice,
    /// Characters of a side question at the request's end, not among the
    /// parts: the conversation goes on without it.
    question_chars: u64,
}

impl Shape {
    /// The shape of `request`, as it is about to be sent.
    #[must_use]
    pub fn of(request: &ModelRequest<'_>) -> Self {
        let mut parts = Vec::with_capacity(FIXED_PARTS + request.messages.len());
        let (mut chain, mut end) = (0u64, 0u64);
        let mut push = |(hash, chars): (u64, u64)| {
            let mut hasher = FxHasher::default();
            (chain, hash).hash(&mut hasher);
            chain = hasher.finish();
            end += chars;
            parts.push((chain, end));
        };
        push(text_part(request.model));
        push(tools_part(request.tools));
        push(text_part(request.system));
        push(text_part(request.system_tail));
        let (kept, question) = match (request.cache_tail, request.messages.split_last()) {
            (CacheTail::Skip, Some((question, kept))) => (kept, Some(question)),
            _ => (request.messages, None),
        };
        for message in kept {
            push(message_part(message));
        }
        Self {
            parts,
            tool_choice: request.tool_choice,
            question_chars: question.map_or(0, |question| message_part(question).1),
        }
    }

    fn chars(&self) -> u64 {
        self.parts.last().map_or(0, |&(_, end)| end)
    }

    /// Whether the request continues a conversation (more than its first
    /// message): only then is an earlier call worth looking up.
    #[must_use]
    pub fn continues(&self) -> bool {
        self.parts.len() > FIXED_PARTS + 1
    }

    /// What is stored of the shape.
    #[must_use]
    pub fn fingerprint(&self) -> Fingerprint {
        let fixed = self.parts.get(..FIXED_PARTS).unwrap_or_default();
        let last = self.parts.last().copied().unwrap_or_default();
        let mut text = format!("1 {} {}", choice_code(self.tool_choice), self.parts.len());
        for (hash, end) in fixed.iter().chain(std::iter::once(&last)) {
            text.push_str(&format!(" {hash:x}:{end}"));
        }
        Fingerprint(text)
    }
}

/// A [`Shape`] as stored on its call's usage row: its tool choice, its
/// number of parts, the running hash and length after each fixed part and
/// after the last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// A fingerprint as stored.
    #[must_use]
    pub fn stored(text: String) -> Self {
        Self(text)
    }

    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The stored shape; `None` for text this version did not write.
    fn read(&self) -> Option<Known> {
        let mut fields = self.0.split(' ');
        if fields.next()? != "1" {
            return None;
        }
        let tool_choice = match fields.next()? {
            "a" => ToolChoice::Auto,
            "n" => ToolChoice::None,
            _ => return None,
        };
        let len = fields.next()?.parse().ok()?;
        let mut part = || -> Option<(u64, u64)> {
            let (hash, end) = fields.next()?.split_once(':')?;
            Some((u64::from_str_radix(hash, 16).ok()?, end.parse().ok()?))
        };
        let mut fixed = [(0, 0); FIXED_PARTS];
        for slot in &mut fixed {
            *slot = part()?;
        }
        let last = part()?;
        Some(Known::Ends {
            fixed,
            last,
            len,
            tool_choice,
        })
    }
}

fn choice_code(choice: ToolChoice) -> &'static str {
    match choice {
        ToolChoice::Auto => "a",
        ToolChoice::None => "n",
    }
}

/// A conversation's last call as recorded: its fingerprint, the input it
/// was billed and when it was made (Unix milliseconds).
#[derive(Debug, Clone)]
pub struct Recorded {
    pub fingerprint: Fingerprint,
    pub input_tokens: u64,
    pub at_ms: i64,
}

/// Which part of a request changed, or why an unchanged prefix was not
/// read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissCause {
    Model,
    Tools,
    System,
    /// The remembered facts after the system text.
    Facts,
    /// The message at this index (from 0) differs or is gone: the history
    /// was rewritten (`None`: compared with a stored fingerprint, which
    /// does not say which).
    History(Option<usize>),
    /// The call may not use tools where the previous one could (the
    /// budget's last call).
    ToolChoice,
    /// Nothing changed, and the previous call was longer ago than a cache
    /// entry lives by default.
    Expired,
    /// Nothing changed and the entry should have been alive.
    Provider,
}

impl MissCause {
    /// The cause as a metric label.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Model => "model",
            Self::Tools => "tools",
            Self::System => "system",
            Self::Facts => "facts",
            Self::History(_) => "history",
            Self::ToolChoice => "tool_choice",
            Self::Expired => "expired",
            Self::Provider => "provider",
        }
    }

    fn at_part(index: usize) -> Self {
        match index {
            0 => Self::Model,
            1 => Self::Tools,
            2 => Self::System,
            3 => Self::Facts,
            message => Self::History(Some(message - FIXED_PARTS)),
        }
    }
}

/// A call that read less from the cache than the previous call of its
/// conversation left there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheMiss {
    pub cause: MissCause,
    pub read_tokens: u64,
    /// What could have been read: the previous call's prefix up to the
    /// first change (estimated).
    pub reusable_tokens: u64,
    /// Since the previous call of the conversation.
    pub after: Duration,
}

impl CacheMiss {
    /// The miss in words, as the console shows it.
    #[must_use]
    pub fn describe(&self) -> String {
        let why = match self.cause {
            MissCause::Model => "the model changed".to_owned(),
            MissCause::Tools => "the tools changed".to_owned(),
            MissCause::System => "the system prompt changed".to_owned(),
            MissCause::Facts => "the remembered facts changed".to_owned(),
            MissCause::History(Some(index)) => {
                format!("the history changed from message {}", index + 1)
            }
            MissCause::History(None) => "the history changed".to_owned(),
            MissCause::ToolChoice => {
                "the tool choice changed (Anthropic drops the cached messages)".to_owned()
            }
            MissCause::Expired => format!(
                "nothing changed, but {} passed since the previous call: the entry had expired",
                words(self.after)
            ),
            MissCause::Provider => format!(
                "nothing changed and the previous call was {} ago: the provider evicted the \
                 entry or routed the request elsewhere",
                words(self.after)
            ),
        };
        format!(
            "read {} of ~{} cached tokens: {why}",
            self.read_tokens, self.reusable_tokens
        )
    }
}

fn words(elapsed: Duration) -> String {
    let secs = elapsed.as_secs();
    if secs < 120 {
        format!("{secs} s")
    } else {
        format!("{} min", secs / 60)
    }
}

/// The last call of each conversation, to compare the next with; cheap to
/// clone (clones share it).
#[derive(Clone)]
pub struct CacheWatch {
    last: moka::sync::Cache<(SessionId, Scope), Arc<Seen>>,
}

impl std::fmt::Debug for CacheWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheWatch").finish_non_exhaustive()
    }
}

impl Default for CacheWatch {
    fn default() -> Self {
        Self {
            last: moka::sync::Cache::builder()
                .max_capacity(CONVERSATIONS)
                .time_to_idle(REMEMBERED_FOR)
                .build(),
        }
    }
}

/// A conversation's last answered call.
#[derive(Debug)]
struct Seen {
    known: Known,
    input_tokens: u64,
    at_ms: i64,
}

/// What is known of a call's shape: all of it (this process made the
/// call), or what its fingerprint keeps.
#[derive(Debug)]
enum Known {
    All(Shape),
    Ends {
        fixed: [(u64, u64); FIXED_PARTS],
        last: (u64, u64),
        len: usize,
        tool_choice: ToolChoice,
    },
}

/// How far a request repeats the previous one.
struct Common {
    /// Leading parts the same.
    same: usize,
    /// Whether the request holds all of the previous one.
    extended: bool,
    /// Whether `same` says exactly where they part (else only that a
    /// message differs).
    exact: bool,
    previous_choice: ToolChoice,
}

impl Known {
    fn common(&self, current: &Shape) -> Common {
        match self {
            Self::All(before) => {
                let same = before
                    .parts
                    .iter()
                    .zip(&current.parts)
                    .take_while(|(a, b)| a == b)
                    .count();
                Common {
                    same,
                    extended: same == before.parts.len(),
                    exact: true,
                    previous_choice: before.tool_choice,
                }
            }
            Self::Ends {
                fixed,
                last,
                len,
                tool_choice,
            } => {
                let same = fixed
                    .iter()
                    .zip(&current.parts)
                    .take_while(|(a, b)| a == b)
                    .count();
                let extended =
                    same == FIXED_PARTS && current.parts.get(len.wrapping_sub(1)) == Some(last);
                Common {
                    same: if extended { *len } else { same },
                    extended,
                    exact: same < FIXED_PARTS || extended,
                    previous_choice: *tool_choice,
                }
            }
        }
    }
}

impl CacheWatch {
    /// Whether the conversation `scope` of `session` has a call
    /// remembered here.
    #[must_use]
    pub fn knows(&self, session: &SessionId, scope: &Scope) -> bool {
        self.last.contains_key(&(session.clone(), scope.clone()))
    }

    /// Compares the answered call `shape` of the conversation `scope` of
    /// `session` with the conversation's previous call (remembered here,
    /// else `recorded`), and remembers it as the one the next is compared
    /// with.
    #[must_use]
    pub fn observe(
        &self,
        session: &SessionId,
        scope: &Scope,
        shape: Shape,
        usage: &Usage,
        recorded: Option<Recorded>,
    ) -> Option<CacheMiss> {
        let key = (session.clone(), scope.clone());
        let now = now_ms();
        let previous = self.last.get(&key).or_else(|| {
            let recorded = recorded?;
            Some(Arc::new(Seen {
                known: recorded.fingerprint.read()?,
                input_tokens: recorded.input_tokens,
                at_ms: recorded.at_ms,
            }))
        });
        let miss = previous.and_then(|previous| verdict(&previous, &shape, usage, now));
        let chars = shape.chars();
        let seen = Seen {
            input_tokens: share(usage.input_tokens, chars, chars + shape.question_chars),
            known: Known::All(shape),
            at_ms: now,
        };
        self.last.insert(key, Arc::new(seen));
        miss
    }
}

/// Whether `current` read less than `previous` left it, and why.
fn verdict(previous: &Seen, current: &Shape, usage: &Usage, now_ms: i64) -> Option<CacheMiss> {
    let common = previous.known.common(current);
    let reusable = previous.input_tokens;
    let slack = (reusable / 10).max(MIN_SLACK);
    if reusable < MIN_CACHEABLE || usage.cache_read_tokens + slack >= reusable {
        return None;
    }
    let after = Duration::from_millis(u64::try_from(now_ms - previous.at_ms).unwrap_or(0));
    let cause = if common.previous_choice != current.tool_choice && common.same >= FIXED_PARTS {
        MissCause::ToolChoice
    } else if common.extended {
        if after > SHORT_LIFETIME {
            MissCause::Expired
        } else {
            MissCause::Provider
        }
    } else if common.exact {
        MissCause::at_part(common.same)
    } else {
        MissCause::History(None)
    };
    Some(CacheMiss {
        cause,
        read_tokens: usage.cache_read_tokens,
        reusable_tokens: reusable,
        after,
    })
}

/// `tokens` scaled by `part` of `whole` characters.
fn share(tokens: u64, part: u64, whole: u64) -> u64 {
    if whole == 0 {
        return 0;
    }
    let scaled = u128::from(tokens) * u128::from(part) / u128::from(whole);
    u64::try_from(scaled).unwrap_or(u64::MAX)
}

fn finish(hash: impl FnOnce(&mut FxHasher) -> u64) -> (u64, u64) {
    let mut hasher = FxHasher::default();
    let chars = hash(&mut hasher);
    (hasher.finish(), chars)
}

fn text_part(text: &str) -> (u64, u64) {
    finish(|h| {
        text.hash(h);
        len(text)
    })
}

fn tools_part(tools: &[ToolSpec]) -> (u64, u64) {
    finish(|h| {
        tools
            .iter()
            .map(|tool| {
                tool.name.hash(h);
                tool.description.hash(h);
                len(&tool.name) + len(&tool.description) + value(&tool.parameters, h)
            })
            .sum()
    })
}

fn message_part(message: &ChatMessage) -> (u64, u64) {
    finish(|h| match message {
        ChatMessage::User { content, media } => {
            0u8.hash(h);
            content.hash(h);
            files_part(media, h);
            len(content)
        }
        ChatMessage::Assistant {
            content,
            tool_calls,
        } => {
            1u8.hash(h);
            content.hash(h);
            let calls: u64 = tool_calls
                .iter()
                .map(|call| {
                    call.id.hash(h);
                    call.name.hash(h);
                    call.arguments.hash(h);
                    len(&call.id) + len(&call.name) + len(&call.arguments)
                })
                .sum();
            content.as_deref().map_or(0, len) + calls
        }
        ChatMessage::Tool {
            tool_call_id,
            content,
            is_error,
            media,
        } => {
            2u8.hash(h);
            tool_call_id.hash(h);
            content.hash(h);
            is_error.hash(h);
            // Nothing for a result without files: its hash reads as before.
            files_part(media, h);
            len(tool_call_id) + len(content)
        }
    })
}

/// Hashes what of a message's files reaches a request.
fn files_part(media: &[crate::domain::MediaRef], h: &mut impl Hasher) {
    for file in media {
        file.hash.hash(h);
        file.derived.as_ref().map(|derived| &derived.hash).hash(h);
        file.transcript.hash(h);
        std::mem::discriminant(&file.shown).hash(h);
    }
}

/// Hashes a JSON value without serialising it; returns about the
/// characters it serialises to.
fn value(json: &Value, h: &mut FxHasher) -> u64 {
    match json {
        Value::Null => {
            0u8.hash(h);
            4
        }
        Value::Bool(flag) => {
            flag.hash(h);
            5
        }
        Value::Number(number) => {
            number.as_f64().map(f64::to_bits).hash(h);
            4
        }
        Value::String(text) => {
            text.hash(h);
            len(text) + 2
        }
        Value::Array(items) => {
            items.len().hash(h);
            items.iter().map(|item| value(item, h) + 1).sum::<u64>() + 2
        }
        Value::Object(map) => {
            map.len().hash(h);
            map.iter()
                .map(|(key, item)| {
                    key.hash(h);
                    len(key) + 4 + value(item, h)
                })
                .sum::<u64>()
                + 2
        }
    }
}

fn len(text: &str) -> u64 {
    text.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request<'a>(
        system: &'a str,
        messages: &'a [ChatMessage],
        tools: &'a [ToolSpec],
    ) -> ModelRequest<'a> {
        ModelRequest {
            model: "m",
            system,
            system_tail: "",
            messages,
            tools,
            tool_choice: ToolChoice::Auto,
            cache_tail: CacheTail::Write,
            idle: Duration::ZERO,
            max_tokens: 100,
            options: &crate::domain::NO_CALL_OPTIONS,
        }
    }

    fn usage(input: u64, read: u64) -> Usage {
        Usage {
            input_tokens: input,
            cache_read_tokens: read,
            ..Usage::default()
        }
    }

    fn tool(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.to_owned(),
            description: "does things".to_owned(),
            parameters: serde_json::json!({"type": "object", "properties": {"x": {"type": "number"}}}),
        }
    }

    fn history(turns: usize) -> Vec<ChatMessage> {
        (0..turns)
            .flat_map(|turn| {
                [
                    ChatMessage::user(format!("question {turn} {}", "q".repeat(400))),
                    ChatMessage::Assistant {
                        content: Some(format!("answer {turn} {}", "a".repeat(400))),
                        tool_calls: Vec::new(),
                    },
                ]
            })
            .collect()
    }

    const SYSTEM: &str = "You are a helpful assistant. Be brief.";

    /// One conversation's calls as a watch sees them.
    struct Conversation {
        watch: CacheWatch,
        id: SessionId,
        scope: Scope,
    }

    impl Conversation {
        fn new() -> Self {
            Self {
                watch: CacheWatch::default(),
                id: SessionId::generate(),
                scope: Scope::top(),
            }
        }

        fn call(&self, request: &ModelRequest<'_>, input: u64, read: u64) -> Option<CacheMiss> {
            self.watch.observe(
                &self.id,
                &self.scope,
                Shape::of(request),
                &usage(input, read),
                None,
            )
        }
    }

    #[test]
    fn an_extended_conversation_that_reads_its_prefix_is_no_miss() {
        let talk = Conversation::new();
        let tools = [tool("calc")];
        assert_eq!(
            talk.call(&request(SYSTEM, &history(5), &tools), 3000, 0),
            None
        );
        assert_eq!(
            talk.call(&request(SYSTEM, &history(6), &tools), 3600, 2990),
            None
        );
    }

    #[test]
    fn a_changed_system_prompt_is_named_as_the_cause() {
        let talk = Conversation::new();
        let (tools, messages) = ([tool("calc")], history(5));
        let _ = talk.call(&request(SYSTEM, &messages, &tools), 3000, 0);
        let miss = talk
            .call(&request("Another prompt.", &messages, &tools), 3000, 40)
            .expect("a miss");
        assert_eq!(miss.cause, MissCause::System);
        assert!(miss.describe().contains("the system prompt changed"));
    }

    #[test]
    fn a_changed_tool_a_changed_model_and_a_rewritten_history_are_told_apart() {
        let talk = Conversation::new();
        let (tools, messages) = ([tool("calc")], history(5));
        let _ = talk.call(&request(SYSTEM, &messages, &tools), 3000, 0);
        let other_tools = [tool("calc"), tool("clock")];
        let miss = talk
            .call(&request(SYSTEM, &messages, &other_tools), 3100, 0)
            .expect("a miss");
        assert_eq!(miss.cause, MissCause::Tools);
        let mut rewritten = messages.clone();
        rewritten[4] = ChatMessage::user("a summary of the conversation so far");
        let miss = talk
            .call(&request(SYSTEM, &rewritten, &other_tools), 2500, 30)
            .expect("a miss");
        assert_eq!(miss.cause, MissCause::History(Some(4)));
        assert!(miss.describe().contains("message 5"), "{}", miss.describe());
        let other_model = ModelRequest {
            model: "another",
            ..request(SYSTEM, &rewritten, &other_tools)
        };
        let miss = talk.call(&other_model, 2500, 0).expect("a miss");
        assert_eq!(miss.cause, MissCause::Model);
    }

    #[test]
    fn an_unchanged_prefix_not_read_blames_the_provider_and_other_conversations_are_apart() {
        let talk = Conversation::new();
        let (tools, messages) = ([tool("calc")], history(5));
        let _ = talk.call(&request(SYSTEM, &messages, &tools), 3000, 0);
        let child = Scope::top().child("mc-1");
        let first_of_child = talk.watch.observe(
            &talk.id,
            &child,
            Shape::of(&request(SYSTEM, &messages, &tools)),
            &usage(3000, 0),
            None,
        );
        assert_eq!(
            first_of_child, None,
            "a sub-agent's first call has nothing to compare with"
        );
        let miss = talk
            .call(&request(SYSTEM, &history(6), &tools), 3600, 0)
            .expect("a miss");
        assert_eq!(miss.cause, MissCause::Provider);
        assert_eq!(miss.reusable_tokens, 3000);
    }

    #[test]
    fn a_small_prefix_or_a_question_asked_once_is_no_miss() {
        let talk = Conversation::new();
        let tools = [tool("calc")];
        let _ = talk.call(&request(SYSTEM, &history(1), &tools), 500, 0);
        assert_eq!(
            talk.call(&request(SYSTEM, &history(2), &tools), 700, 0),
            None,
            "under the minimum nothing is cached"
        );
        // A side question after the history, then the conversation goes on
        // without it: only the history was reusable, and it was read.
        let mut asked = history(6);
        asked.push(ChatMessage::user("Summarise the conversation."));
        let question = ModelRequest {
            cache_tail: CacheTail::Skip,
            ..request(SYSTEM, &asked, &tools)
        };
        let _ = talk.call(&question, 3700, 3500);
        assert_eq!(
            talk.call(&request(SYSTEM, &history(7), &tools), 4300, 3550),
            None
        );
    }

    #[test]
    fn the_budgets_last_call_losing_the_messages_is_the_tool_choice() {
        let talk = Conversation::new();
        let tools = [tool("calc")];
        let _ = talk.call(&request(SYSTEM, &history(5), &tools), 3000, 0);
        let more = history(6);
        let last = ModelRequest {
            tool_choice: ToolChoice::None,
            ..request(SYSTEM, &more, &tools)
        };
        let miss = talk.call(&last, 3600, 200).expect("a miss");
        assert_eq!(miss.cause, MissCause::ToolChoice);
    }

    #[test]
    fn a_stored_fingerprint_stands_for_a_call_this_process_did_not_see() {
        let tools = [tool("calc")];
        let messages = history(5);
        let fingerprint = Shape::of(&request(SYSTEM, &messages, &tools)).fingerprint();
        let recorded = || Recorded {
            fingerprint: Fingerprint::stored(fingerprint.as_str().to_owned()),
            input_tokens: 3000,
            at_ms: now_ms() - 1_000,
        };
        let after_restart = |request: &ModelRequest<'_>, read: u64| {
            let talk = Conversation::new();
            talk.watch.observe(
                &talk.id,
                &talk.scope,
                Shape::of(request),
                &usage(3600, read),
                Some(recorded()),
            )
        };
        let longer = history(6);
        assert_eq!(after_restart(&request(SYSTEM, &longer, &tools), 2990), None);
        let miss = after_restart(&request(SYSTEM, &longer, &tools), 0).expect("a miss");
        assert_eq!(miss.cause, MissCause::Provider);
        let other_tools = [tool("clock")];
        let miss = after_restart(&request(SYSTEM, &longer, &other_tools), 0).expect("a miss");
        assert_eq!(miss.cause, MissCause::Tools);
        let mut rewritten = longer.clone();
        rewritten[2] = ChatMessage::user("changed");
        let miss = after_restart(&request(SYSTEM, &rewritten, &tools), 0).expect("a miss");
        assert_eq!(miss.cause, MissCause::History(None));
        assert!(
            Fingerprint::stored("2 x".to_owned()).read().is_none(),
            "another version's text is no fingerprint"
        );
    }
}
