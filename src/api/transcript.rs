//! A request's `messages`, read and checked, and the session a request
//! without one of its own continues: stateless clients (chat UIs, SDK users)
//! resend the whole transcript on every request and no `X-Session-Id`.
//!
//! **The matching rule.** The *visible transcript* of a request is its user
//! messages and the assistant's final replies (assistant messages without
//! tool calls), in order: system and developer messages are left out (clients
//! drop or change them; they are the client's instructions, which the
//! session applies from the turn they change, see `session::instructions`,
//! so a resent transcript with a changed one still continues), and so are
//! tool calls and tool results, which clients usually drop. When a request
//! starts or continues a session without naming it, the SHA-256 of its
//! visible transcript (up to and including its new user message) is stored
//! with the turn, under the caller's key namespace and API user
//! (`store::api_transcripts`). A later request whose visible transcript is
//! that one plus the turn's visible reply (exactly as it was sent, streamed
//! or not: the text of every model call of the turn, see `reply`) plus a new user
//! message continues that session, as if it had named it — when the turn is
//! still the session's latest message, the session is still the caller's,
//! and every tool call and result the client did resend agrees with the
//! stored one. Only the new message is stored; the model request is built
//! from the stored conversation (tool calls and results included), byte for
//! byte what a client naming the session would have caused.
//!
//! No match — a new conversation, an earlier message edited or regenerated,
//! a conversation that went on elsewhere (another request, another
//! platform), or a transcript older than the inbound retention — starts a
//! new session seeded with the client's transcript (user, assistant and tool
//! messages, tool-call ids kept) as history, and the new message runs as its
//! turn: an edit forks, it never rewrites. A request with no earlier messages
//! is a new conversation (or, with `user`, that user's conversation) as
//! before.
//!
//! Limits: replies are compared as sent, so a client that trims or reformats
//! them forks; conversations with equal visible transcripts are
//! interchangeable (the most recent one is continued); a chat command's
//! exchange matches only when its stored answer is what the client got
//! (`/link`'s code is not stored, so its exchange forks), and a command that
//! moves the chat to another session (`/new`, `/resume`) forks too: a
//! stateless client starts a new conversation by sending one.
//!
//! **Tool results.** A request may end, instead of with a user message, with
//! the results of the calls the previous turn handed to the client (its own
//! tools, see `agent::client_tools`): the `tool` messages after the
//! assistant message that made the calls. It goes by the key of the user
//! message before them (the turn it continues was stored under it), and
//! continues the session whose latest turn showed that assistant message's
//! text and handed out exactly those calls; with the session named, the
//! results may come alone. Results that answer anything else are a 400.
//!
//! **Two identical requests** (a double submit, a client's automatic retry)
//! are one turn: both are recorded under the same event id (`retries`), so
//! the second is a duplicate of the first while it runs, and gets its reply
//! when it finished within the reply window. An identical request after
//! that finds the session moved on and forks, like a regenerated reply.
//!
//! **Client-chosen ids.** An `X-Session-Id` that names no session yet
//! creates one with that id (1 to 128 letters, digits, `.`, `_`, `:` or
//! `-`), owned by the caller, seeded with any earlier messages the request
//! carries. Ids are global: one taken by another caller is a 404, so clients
//! should pick unguessable ones.

use crate::domain::{
    ChatMessage, ClientResult, InboundId, Scope, SessionId, ToolCall, canonical_json,
};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use switchboard_contract::{ChatId, InboundMessage};

use super::caller::Caller;
pub use super::images::ImagePart;
use super::sessions::reachable;
use super::{ApiError, ApiState};
use crate::session::service::SubmitOptions;
use crate::store::{StoreError, TranscriptOwner};

/// One message of a request, as OpenAI clients send it.
#[derive(Debug, Deserialize)]
pub struct RequestMessage {
    role: String,
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    tool_calls: Option<Vec<RequestToolCall>>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

/// Message content: a string, or an array of parts of which the text parts
/// are read.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    /// `{"url": …, "detail": …}` (or, from some clients, the URL alone).
    #[serde(default)]
    image_url: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct RequestToolCall {
    id: String,
    function: RequestFunction,
}

#[derive(Debug, Deserialize)]
struct RequestFunction {
    name: String,
    #[serde(default)]
    arguments: Option<String>,
}

impl Content {
    /// The text of a user message `index` and its `image_url` parts. A
    /// part of another type is refused rather than dropped: the model would
    /// answer without it.
    fn user_content(&self, index: usize) -> Result<(String, Vec<ImagePart>), ApiError> {
        let Self::Parts(parts) = self else {
            return self.text().map(|text| (text, Vec::new()));
        };
        let mut texts = Vec::new();
        let mut images = Vec::new();
        for (position, part) in parts.iter().enumerate() {
            let place = format!("messages[{index}].content[{position}]");
            match part.kind.as_str() {
                "text" => texts.extend(part.text.as_deref()),
                "image_url" => {
                    let url = part.image_url.as_ref().and_then(|image| {
                        image
                            .as_str()
                            .or_else(|| image.get("url").and_then(serde_json::Value::as_str))
                    });
                    let url = url.filter(|url| !url.trim().is_empty()).ok_or_else(|| {
                        ApiError::BadRequest(format!(
                            "{place}: an image_url part needs `image_url.url`, a data: or \
                             http(s) URL"
                        ))
                    })?;
                    images.push(ImagePart {
                        place,
                        url: url.to_owned(),
                    });
                }
                other => {
                    return Err(ApiError::BadRequest(format!(
                        "{place}: content parts of type `{other}` are not supported; send \
                         text and image_url parts"
                    )));
                }
            }
        }
        Ok((texts.join("\n"), images))
    }

    /// The text of the content. A part that is not text (an `image_url`)
    /// is refused rather than dropped: the model would answer without it.
    fn text(&self) -> Result<String, ApiError> {
        match self {
            Self::Text(text) => Ok(text.clone()),
            Self::Parts(parts) => {
                if let Some(part) = parts.iter().find(|part| part.kind != "text") {
                    let hint = if part.kind == "image_url" {
                        "images are taken in user messages only"
                    } else {
                        "send text only"
                    };
                    return Err(ApiError::BadRequest(format!(
                        "content parts of type `{}` are not supported here; {hint}",
                        part.kind
                    )));
                }
                Ok(parts
                    .iter()
                    .filter_map(|part| part.text.as_deref())
                    .collect::<Vec<_>>()
                    .join("\n"))
            }
        }
    }
}

/// A request's transcript, checked: the conversation it resends (system
/// and developer messages left out) and its new user message: its text and
/// its `image_url` parts. An image of an earlier user message is not
/// fetched: it stands in that message's text as a marker naming a hash of
/// its URL ([`image_marker`]), which is how the visible transcript counts
/// it, so that a resent transcript still continues its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transcript {
    pub history: Vec<ChatMessage>,
    pub text: String,
    pub images: Vec<ImagePart>,
    /// The client's instructions: the text of its system and developer
    /// messages, in order, a blank line between; `None` when it sent none
    /// (or only blank ones). Not part of the visible transcript, so a
    /// changed one continues the same session (`session::instructions`
    /// applies it).
    pub instructions: Option<String>,
    /// The results of the client's own tools it sends instead of a new
    /// user message, answering the calls of the assistant message before
    /// them (the last entry of `history`): the request continues that turn
    /// (`text` is empty then).
    pub results: Vec<ClientResult>,
}

/// What stands for an image of a user message in the visible transcript
/// (and in an earlier message's text): `[image <16 hex digits>]`, from the
/// SHA-256 of its URL.
fn image_marker(url: &str) -> String {
    let digest = hex::encode(Sha256::digest(url.trim().as_bytes()));
    format!("[image {}]", &digest[..16])
}

/// `text` followed by the markers of `images`, one a line.
fn with_markers(text: &str, images: &[ImagePart]) -> String {
    let mut out = text.to_owned();
    for image in images {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&image_marker(&image.url));
    }
    out
}

impl Transcript {
    /// Reads and checks `messages`: known roles only, every tool result
    /// answering a call of the assistant message before it and every call
    /// answered, and a non-empty user message last.
    ///
    /// # Errors
    /// What is wrong, as a 400.
    pub fn parse(messages: &[RequestMessage]) -> Result<Self, ApiError> {
        let bad =
            |index: usize, what: String| ApiError::BadRequest(format!("messages[{index}]: {what}"));
        let mut history = Vec::new();
        let mut instructions: Vec<String> = Vec::new();
        // The latest user message's text and images.
        let mut last = (String::new(), Vec::new());
        // Calls of the latest assistant message still waiting for a result.
        let mut open: Vec<String> = Vec::new();
        for (index, message) in messages.iter().enumerate() {
            let role = message.role.as_str();
            if role != "tool"
                && let Some(id) = open.first()
                && !matches!(role, "system" | "developer")
            {
                return Err(bad(
                    index,
                    format!("tool call `{id}` has no result before it"),
                ));
            }
            match role {
                "system" | "developer" => {
                    let text = message.content.as_ref().map(Content::text).transpose()?;
                    instructions.extend(text.filter(|text| !text.trim().is_empty()));
                }
                "user" => {
                    let (text, images) = message
                        .content
                        .as_ref()
                        .ok_or_else(|| bad(index, "a user message needs content".to_owned()))?
                        .user_content(index)?;
                    history.push(ChatMessage::user(with_markers(&text, &images)));
                    last = (text, images);
                }
                "assistant" => {
                    let content = message.content.as_ref().map(Content::text).transpose()?;
                    let mut tool_calls = Vec::new();
                    for call in message.tool_calls.iter().flatten() {
                        if call.id.is_empty() || call.function.name.is_empty() {
                            return Err(bad(
                                index,
                                "a tool call needs an id and a name".to_owned(),
                            ));
                        }
                        if open.contains(&call.id) {
                            return Err(bad(index, format!("tool call id `{}` repeats", call.id)));
                        }
                        open.push(call.id.clone());
                        tool_calls.push(ToolCall {
                            id: call.id.clone(),
                            name: call.function.name.clone(),
                            arguments: canonical_arguments(
                                call.function.arguments.as_deref().unwrap_or("{}"),
                            ),
                        });
                    }
                    let content = match content {
                        None if tool_calls.is_empty() => Some(String::new()),
                        content => content,
                    };
                    history.push(ChatMessage::Assistant {
                        content,
                        tool_calls,
                    });
                }
                "tool" => {
                    let id = message.tool_call_id.as_deref().unwrap_or_default();
                    let leading = history
                        .iter()
                        .all(|message| matches!(message, ChatMessage::Tool { .. }));
                    match open.iter().position(|open_id| open_id == id) {
                        Some(position) => {
                            open.remove(position);
                        }
                        // Results alone, for the calls the session named by
                        // the request handed out (checked there).
                        None if leading && !id.is_empty() => {}
                        None => {
                            return Err(bad(
                                index,
                                format!(
                                    "a tool result for `{id}`, which no assistant message before \
                                     it called"
                                ),
                            ));
                        }
                    }
                    let content = message
                        .content
                        .as_ref()
                        .map(Content::text)
                        .transpose()?
                        .unwrap_or_default();
                    history.push(ChatMessage::tool_result(id, content, false));
                }
                other => return Err(bad(index, format!("unknown role `{other}`"))),
            }
        }
        let last_user = || {
            ApiError::BadRequest(
                "`messages` must end with a non-empty user message, or with the results of \
                 the tool calls of the assistant message before them"
                    .to_owned(),
            )
        };
        if !open.is_empty() {
            return Err(last_user());
        }
        if let Some(first) = history.first()
            && matches!(first, ChatMessage::Tool { .. })
            && history
                .iter()
                .any(|message| !matches!(message, ChatMessage::Tool { .. }))
        {
            return Err(ApiError::BadRequest(
                "`messages`: tool results that answer no assistant message before them must be \
                 the whole request (the results for the calls the named session handed out)"
                    .to_owned(),
            ));
        }
        if let Some(ChatMessage::Tool { .. }) = history.last() {
            let split = history
                .iter()
                .rposition(|message| !matches!(message, ChatMessage::Tool { .. }))
                .map_or(0, |index| index + 1);
            let results = history
                .split_off(split)
                .into_iter()
                .filter_map(|message| match message {
                    ChatMessage::Tool {
                        tool_call_id,
                        content,
                        ..
                    } => Some(ClientResult {
                        call_id: tool_call_id,
                        content,
                    }),
                    _ => None,
                })
                .collect();
            return Ok(Self {
                history,
                text: String::new(),
                images: Vec::new(),
                instructions: (!instructions.is_empty()).then(|| instructions.join("\n\n")),
                results,
            });
        }
        let Some(ChatMessage::User { .. }) = history.pop() else {
            return Err(last_user());
        };
        let (text, images) = last;
        if text.trim().is_empty() && images.is_empty() {
            return Err(last_user());
        }
        Ok(Self {
            history,
            text,
            images,
            instructions: (!instructions.is_empty()).then(|| instructions.join("\n\n")),
            results: Vec::new(),
        })
    }

    /// Whether the request brings tool results instead of a new message.
    pub fn continues_calls(&self) -> bool {
        !self.results.is_empty()
    }

    /// The conversation a new session made from this request starts with:
    /// the history, and the tool results it brings.
    pub fn seed(&self) -> Vec<ChatMessage> {
        let mut seed = self.history.clone();
        seed.extend(
            self.results
                .iter()
                .map(|result| ChatMessage::tool_result(&result.call_id, &result.content, false)),
        );
        seed
    }

    /// The visible transcript: user messages and final replies, in order.
    fn visible(&self) -> Vec<(&'static str, &str)> {
        self.history
            .iter()
            .filter_map(|message| match message {
                ChatMessage::User { content, .. } => Some(("user", content.as_str())),
                ChatMessage::Assistant {
                    content,
                    tool_calls,
                } if tool_calls.is_empty() => {
                    Some(("assistant", content.as_deref().unwrap_or_default()))
                }
                _ => None,
            })
            .collect()
    }

    /// The key stored with this request's turn: the hash of its visible
    /// transcript with the new message.
    pub fn key(&self) -> String {
        let mut visible = self.visible();
        let text = self.keyed_text();
        // Tool results continue the turn of the user message before them,
        // whose key is the one they go by.
        if !self.continues_calls() {
            visible.push(("user", text.as_str()));
        }
        digest(&visible)
    }

    /// The new message as the visible transcript counts it: its text and
    /// the markers of its images.
    pub fn keyed_text(&self) -> String {
        with_markers(&self.text, &self.images)
    }

    /// What the turn this request continues must have: the key stored
    /// with it and its reply. `None` when the transcript cannot continue a
    /// turn (it does not end with a reply and a new message).
    fn continued(&self) -> Option<(String, &str)> {
        let visible = self.visible();
        if self.continues_calls() {
            // The turn that handed the calls to the client went by this
            // transcript's key, and showed the text beside the calls.
            let Some(ChatMessage::Assistant { content, .. }) = self.history.last() else {
                return None;
            };
            return Some((digest(&visible), content.as_deref().unwrap_or_default()));
        }
        let ((role, reply), before) = visible.split_last()?;
        if *role != "assistant" || before.last().is_none_or(|(role, _)| *role != "user") {
            return None;
        }
        Some((digest(before), *reply))
    }

    /// Whether the client resent tool calls or results.
    fn has_tool_entries(&self) -> bool {
        self.history.iter().any(|message| match message {
            ChatMessage::Assistant { tool_calls, .. } => !tool_calls.is_empty(),
            ChatMessage::Tool { .. } => true,
            ChatMessage::User { .. } => false,
        })
    }
}

/// Arguments re-serialised canonically, as the model's own are stored;
/// kept verbatim when they do not parse.
fn canonical_arguments(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .map_or_else(|_| arguments.to_owned(), |value| canonical_json(&value))
}

/// The SHA-256 (hex) of a visible transcript.
fn digest(visible: &[(&str, &str)]) -> String {
    // Serialising pairs of strings cannot fail.
    let bytes = serde_json::to_vec(visible).unwrap_or_default();
    hex::encode(Sha256::digest(&bytes))
}

/// The session a request goes to, once resolved: what is left to do after
/// its message is recorded.
#[derive(Debug)]
pub enum Route {
    /// It names its session: nothing to remember.
    Named,
    /// It continues, starts or seeds a session by its transcript: its key
    /// is stored with its turn, for the next request to find.
    ByTranscript { key: String },
}

impl Route {
    /// Stores the request's transcript key with its turn. A failure is
    /// logged; the next request then starts a new session.
    pub async fn recorded(
        &self,
        state: &ApiState,
        caller: &Caller,
        sender: &str,
        session_id: &SessionId,
        inbound_id: InboundId,
    ) {
        let Self::ByTranscript { key } = self else {
            return;
        };
        let owner = TranscriptOwner {
            account: caller.account(),
            sender,
        };
        if let Err(err) = state
            .store
            .api()
            .record_transcript(owner, key, session_id, inbound_id)
            .await
        {
            tracing::warn!(error = %err, "the transcript key of a turn was not stored");
        }
    }
}

/// Finds the session of a request: the one it names (created when the id
/// is new), the one its transcript continues, a new one seeded with its
/// transcript, or (no earlier messages) the one routing gives as before.
/// Adjusts `message` and `options` to go there.
///
/// # Errors
/// A named session another caller owns (404), a new id that is not safe
/// (400), or a database failure.
pub async fn resolve(
    state: &ApiState,
    caller: &Caller,
    transcript: &Transcript,
    message: &mut InboundMessage,
    options: &mut SubmitOptions,
    explicit_event: bool,
) -> Result<Route, ApiError> {
    if let Some(named) = options.session.clone() {
        named_session(state, caller, transcript, message, &named).await?;
        return Ok(Route::Named);
    }
    if explicit_event {
        // A retry: it goes where its first attempt went (and gets its reply).
        let first = state
            .store
            .inbound()
            .id_of_event(
                message.platform.as_str(),
                message.account.as_str(),
                message.event_id.as_str(),
            )
            .await
            .map_err(internal)?;
        if let Some((_, session)) = first {
            go_to(message, options, &session)?;
            return Ok(Route::Named);
        }
    }
    let key = transcript.key();
    if transcript.history.is_empty() {
        if transcript.continues_calls() {
            return Err(ApiError::BadRequest(
                "tool results alone need their conversation: name its session (`X-Session-Id`, \
                 or `previous_response_id`), or resend the transcript with the assistant \
                 message that made the calls"
                    .to_owned(),
            ));
        }
        return Ok(Route::ByTranscript { key });
    }
    let session = match continued_session(state, caller, transcript, message).await? {
        Some(session) => {
            tracing::info!(session_id = %session, "a resent transcript continues its session");
            session
        }
        None => {
            // The chat is the session's own, as for a client naming it.
            let session = SessionId::generate();
            go_to(message, options, &session)?;
            state
                .service
                .start_seeded_session(message, session.clone(), &transcript.seed())
                .await
                .map_err(internal)?;
            session
        }
    };
    go_to(message, options, &session)?;
    Ok(Route::ByTranscript { key })
}

/// Checks a named session is the caller's, creating it under that id when
/// no session has it.
async fn named_session(
    state: &ApiState,
    caller: &Caller,
    transcript: &Transcript,
    message: &InboundMessage,
    named: &str,
) -> Result<(), ApiError> {
    let exists = match SessionId::parse(named) {
        Ok(id) => state
            .store
            .sessions()
            .get(&id)
            .await
            .map_err(internal)?
            .is_some(),
        Err(_) => false,
    };
    if !exists {
        let id = chosen_id(named)?;
        let created = state
            .service
            .start_seeded_session(message, id, &transcript.seed())
            .await
            .map_err(internal)?;
        if created {
            return Ok(());
        }
    }
    // Another key's session, or one without an owner (a group chat), is
    // answered like a missing one.
    let session = reachable(state, caller.scope(), named).await?;
    if transcript.continues_calls() && !answers_handed_calls(state, &session, transcript).await? {
        return Err(ApiError::BadRequest(
            "the request's tool results do not answer the tool calls the session handed to \
             the client (each call needs one result, with its `tool_call_id`)"
                .to_owned(),
        ));
    }
    Ok(())
}

/// Whether the request's tool results answer exactly the calls `session`
/// handed to the client and has no result for.
async fn answers_handed_calls(
    state: &ApiState,
    session: &SessionId,
    transcript: &Transcript,
) -> Result<bool, ApiError> {
    let handed = state
        .store
        .transcript()
        .client_calls(session)
        .await
        .map_err(internal)?;
    Ok(handed.len() == transcript.results.len()
        && handed.iter().all(|call| {
            transcript
                .results
                .iter()
                .any(|result| result.call_id == call.id)
        }))
}

/// A client-chosen session id: 1 to 128 letters, digits, `.`, `_`, `:` or
/// `-`.
fn chosen_id(text: &str) -> Result<SessionId, ApiError> {
    let safe = text
        .bytes()
        .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b':' | b'-'));
    match SessionId::parse(text) {
        Ok(id) if safe => Ok(id),
        _ => Err(ApiError::BadRequest(format!(
            "no session with id {text}, and it cannot name a new one: use 1 to {} letters, \
             digits, '.', '_', ':' or '-'",
            SessionId::MAX_LEN
        ))),
    }
}

/// The session whose latest turn the
/// transcript continues, if one does (see the module doc).
async fn continued_session(
    state: &ApiState,
    caller: &Caller,
    transcript: &Transcript,
    message: &InboundMessage,
) -> Result<Option<SessionId>, ApiError> {
    let Some((prefix, reply)) = transcript.continued() else {
        return Ok(None);
    };
    let owner = TranscriptOwner {
        account: caller.account(),
        sender: message.sender.id.as_str(),
    };
    let candidates = state
        .store
        .api()
        .transcript_candidates(owner, &prefix)
        .await
        .map_err(internal)?;
    for candidate in candidates {
        let Some(stored) = candidate.reply.as_deref() else {
            continue;
        };
        // The reply as the client was shown it: every model call's text.
        let visible = state
            .store
            .api()
            .visible_reply(&candidate.session_id, candidate.inbound_id)
            .await
            .map_err(internal)?;
        if visible.as_deref().unwrap_or(stored) != reply {
            continue;
        }
        if candidate.latest_inbound != Some(candidate.inbound_id) {
            // Moved on: only the same request, still running, follows it.
            let twin = state
                .store
                .api()
                .event_unfinished(
                    message.platform.as_str(),
                    caller.account(),
                    message.event_id.as_str(),
                )
                .await
                .map_err(internal)?;
            if twin != Some(true) {
                continue;
            }
        }
        if reachable(state, caller.scope(), candidate.session_id.as_str())
            .await
            .is_err()
        {
            continue;
        }
        if transcript.has_tool_entries()
            && !tools_agree(state, &candidate.session_id, &transcript.history)
                .await
                .map_err(internal)?
        {
            continue;
        }
        if transcript.continues_calls()
            && !answers_handed_calls(state, &candidate.session_id, transcript).await?
        {
            continue;
        }
        return Ok(Some(candidate.session_id));
    }
    Ok(None)
}

/// Whether every tool call and result the client resent is one the session
/// stored (same id, name and arguments; same result).
async fn tools_agree(
    state: &ApiState,
    session: &SessionId,
    history: &[ChatMessage],
) -> Result<bool, StoreError> {
    let stored = state
        .store
        .transcript()
        .wire_history(session, &Scope::top())
        .await?;
    let stored_calls: Vec<&ToolCall> = stored
        .iter()
        .flat_map(|entry| match &entry.message {
            ChatMessage::Assistant { tool_calls, .. } => tool_calls.iter().collect(),
            _ => Vec::new(),
        })
        .collect();
    let stored_result = |id: &str| {
        stored.iter().find_map(|entry| match &entry.message {
            ChatMessage::Tool {
                tool_call_id,
                content,
                ..
            } if tool_call_id == id => Some(content.as_str()),
            _ => None,
        })
    };
    Ok(history.iter().all(|message| match message {
        ChatMessage::Assistant { tool_calls, .. } => {
            tool_calls.iter().all(|call| stored_calls.contains(&call))
        }
        ChatMessage::Tool {
            tool_call_id,
            content,
            ..
        } => stored_result(tool_call_id) == Some(content.as_str()),
        ChatMessage::User { .. } => true,
    }))
}

/// Points the message at `session`, as a request naming it would.
fn go_to(
    message: &mut InboundMessage,
    options: &mut SubmitOptions,
    session: &SessionId,
) -> Result<(), ApiError> {
    message.chat =
        ChatId::parse(session.as_str()).map_err(|err| ApiError::Internal(err.to_string()))?;
    options.session = Some(session.to_string());
    options.own_chat = true;
    Ok(())
}

fn internal(err: StoreError) -> ApiError {
    ApiError::Internal(err.to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(messages: serde_json::Value) -> Result<Transcript, ApiError> {
        let messages: Vec<RequestMessage> = serde_json::from_value(messages).expect("shape");
        Transcript::parse(&messages)
    }

    fn refused(messages: serde_json::Value) -> String {
        match parse(messages) {
            Err(ApiError::BadRequest(message)) => message,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_transcript_keeps_tool_entries_and_drops_system_messages() {
        let transcript = parse(json!([
            {"role": "system", "content": "be nice"},
            {"role": "user", "content": "sum?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "calculator", "arguments": "{ \"b\": 1, \"a\": 2 }"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "3"},
            {"role": "assistant", "content": "3"},
            {"role": "user", "content": [{"type": "text", "text": "thanks"}]}
        ]))
        .expect("valid");

        assert_eq!(transcript.text, "thanks");
        assert_eq!(transcript.instructions.as_deref(), Some("be nice"));
        assert_eq!(transcript.history.len(), 4);
        assert_eq!(
            transcript.history[1],
            ChatMessage::Assistant {
                content: None,
                tool_calls: vec![ToolCall {
                    id: "c1".to_owned(),
                    name: "calculator".to_owned(),
                    arguments: r#"{"a":2,"b":1}"#.to_owned(),
                }],
            }
        );
        assert_eq!(
            transcript.visible(),
            [("user", "sum?"), ("assistant", "3")],
            "tool entries are not part of what the client shows"
        );
        assert!(transcript.has_tool_entries());
    }

    #[test]
    fn the_key_of_one_request_is_what_the_next_continues() {
        let first = parse(json!([{"role": "user", "content": "hi"}])).expect("valid");
        let next = parse(json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "how are you?"}
        ]))
        .expect("valid");
        let edited = parse(json!([
            {"role": "system", "content": "changed"},
            {"role": "user", "content": "hi!"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "how are you?"}
        ]))
        .expect("valid");

        let instructed = parse(json!([
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": [{"type": "text", "text": "in French"}]},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "how are you?"}
        ]))
        .expect("valid");

        assert_eq!(first.continued(), None);
        assert_eq!(next.continued(), Some((first.key(), "hello")));
        assert_eq!(
            instructed.continued(),
            next.continued(),
            "the client's instructions are not part of the visible transcript"
        );
        assert_eq!(
            instructed.instructions.as_deref(),
            Some("be brief\n\nin French")
        );
        assert_eq!(next.instructions, None);
        assert_ne!(edited.continued().map(|(key, _)| key), Some(first.key()));
        assert_ne!(next.key(), first.key());
    }

    #[test]
    fn an_image_of_the_new_message_is_taken_and_counted_when_resent() {
        let photo = json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}});
        let first = parse(json!([{"role": "user", "content": [photo.clone()]}])).expect("valid");
        assert_eq!(first.text, "");
        assert_eq!(first.images.len(), 1);
        assert_eq!(first.images[0].place, "messages[0].content[0]");
        assert_eq!(first.images[0].url, "data:image/png;base64,AAAA");
        let next = parse(json!([
            {"role": "user", "content": [photo]},
            {"role": "assistant", "content": "a cat"},
            {"role": "user", "content": [{"type": "text", "text": "sure?"}]}
        ]))
        .expect("valid");
        assert!(
            next.images.is_empty(),
            "an earlier image is not fetched again"
        );
        assert_eq!(next.continued(), Some((first.key(), "a cat")));
        let ChatMessage::User { content, .. } = &next.history[0] else {
            panic!("a user message")
        };
        assert!(
            content.starts_with("[image ") && content.len() == 24,
            "{content}"
        );
        let other = parse(json!([{"role": "user", "content": [
            {"type": "image_url", "image_url": "data:image/png;base64,BBBB"}
        ]}]))
        .expect("a bare URL string is taken too");
        assert_ne!(other.key(), first.key(), "another image, another key");
        assert!(
            refused(json!([{"role": "user", "content": [{"type": "input_audio"}]}]))
                .contains("`input_audio` are not supported")
        );
        assert!(
            refused(json!([
                {"role": "user", "content": "a"},
                {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
                {"role": "user", "content": "c"}
            ]))
            .contains("images are taken in user messages only")
        );
    }

    #[test]
    fn bad_transcripts_are_refused_with_the_reason() {
        assert!(
            refused(
                json!([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
            )
            .contains("must end with a non-empty user message")
        );
        assert!(
            refused(json!([{"role": "wizard", "content": "a"}])).contains("unknown role `wizard`")
        );
        assert!(
            refused(json!([
                {"role": "user", "content": "a"},
                {"role": "tool", "tool_call_id": "x", "content": "b"},
                {"role": "user", "content": "c"}
            ]))
            .contains("no assistant message before it called")
        );
        assert!(
            refused(json!([
                {"role": "user", "content": "a"},
                {"role": "assistant", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "user", "content": "c"}
            ]))
            .contains("`c1` has no result")
        );
        assert!(refused(json!([{"role": "user", "content": "  "}])).contains("non-empty"));
        assert!(
            refused(json!([{"role": "user", "content": [{"type": "image_url"}]}]))
                .contains("messages[0].content[0]: an image_url part needs `image_url.url`")
        );
    }

    #[test]
    fn chosen_ids_are_bounded_and_safe() {
        assert!(chosen_id("chat-2024.01_a:b").is_ok());
        assert!(chosen_id("a/b").is_err());
        assert!(chosen_id(&"a".repeat(129)).is_err());
        assert!(chosen_id("").is_err());
    }
}
