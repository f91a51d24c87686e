//! The requests the fake model received ([`Recorded`]) and what tests read
//! off them: the last user message's text or content, whether the last
//! message is a tool result, and whether each request's `messages` bytes
//! begin with the previous request's (the prompt-cache prefix).

use axum::http::HeaderMap;
use serde_json::Value;

/// One request the fake model received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: HeaderMap,
    /// The body exactly as sent (request bodies are JSON, so UTF-8).
    pub body: String,
}

impl Recorded {
    /// The body, parsed.
    ///
    /// # Panics
    /// When the body is not JSON.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("request body is JSON")
    }

    /// The raw bytes of the request's `messages` array.
    ///
    /// # Panics
    /// When the body has no `messages`.
    pub fn raw_messages(&self) -> String {
        #[derive(serde::Deserialize)]
        struct Body<'a> {
            #[serde(borrow)]
            messages: &'a serde_json::value::RawValue,
        }
        let body: Body<'_> = serde_json::from_str(&self.body).expect("messages present");
        body.messages.get().to_owned()
    }

    /// A request header's value, when it was sent.
    ///
    /// # Panics
    /// When the value is not ASCII.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|value| value.to_str().expect("ascii header").to_owned())
    }
}

/// The text of the last user message of an OpenAI or Anthropic request.
pub fn last_user_text(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    for message in messages.iter().rev() {
        if message["role"] != "user" {
            continue;
        }
        if let Some(text) = message["content"].as_str() {
            return text.to_owned();
        }
        if let Some(blocks) = message["content"].as_array() {
            for block in blocks.iter().rev() {
                if block["type"] == "text" {
                    return block["text"].as_str().unwrap_or_default().to_owned();
                }
            }
        }
    }
    String::new()
}

/// The content of the last user message of a model request.
pub fn last_user_content(body: &Value) -> Value {
    body["messages"]
        .as_array()
        .and_then(|messages| messages.iter().rev().find(|m| m["role"] == "user"))
        .map(|message| message["content"].clone())
        .unwrap_or_default()
}

/// The role of the last message (`tool` for an OpenAI tool result; `user`
/// for an Anthropic tool result, whose blocks are `tool_result`).
pub fn last_is_tool_result(body: &Value) -> bool {
    let Some(last) = body["messages"].as_array().and_then(|m| m.last()) else {
        return false;
    };
    last["role"] == "tool"
        || last["content"]
            .as_array()
            .is_some_and(|blocks| blocks.iter().any(|b| b["type"] == "tool_result"))
}

/// Each request begins with the previous request's messages, byte for byte.
///
/// # Panics
/// When one does not.
pub fn assert_prefix_holds(requests: &[Recorded]) {
    for pair in requests.windows(2) {
        let previous = pair[0].raw_messages();
        let next = pair[1].raw_messages();
        let open = previous.strip_suffix(']').expect("array");
        assert!(
            next.starts_with(open),
            "prefix changed:\nprevious: {previous}\nnext:     {next}"
        );
    }
}
