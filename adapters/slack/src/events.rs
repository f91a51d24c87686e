//! Slack's payloads as the adapter reads them: the Events API envelope
//! (`url_verification`, `event_callback`), the `message` and `app_mention`
//! events with their files, and the `block_actions` payload of a button
//! press. Only the fields used are modelled; unknown fields are ignored.

use serde::Deserialize;

/// The outer JSON of an Events API request (also the `payload` of a
/// Socket Mode `events_api` envelope).
#[derive(Debug, Deserialize)]
pub(crate) struct Envelope {
    /// `url_verification` or `event_callback` (or another callback type).
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub challenge: Option<String>,
    #[serde(default)]
    pub team_id: Option<String>,
    #[serde(default)]
    pub event_id: Option<String>,
    /// Kept raw: its shape depends on its `type`.
    #[serde(default)]
    pub event: Option<serde_json::Value>,
}

/// A `message` or `app_mention` event.
#[derive(Debug, Deserialize)]
pub(crate) struct MessageEvent {
    /// `message` or `app_mention`.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub subtype: Option<String>,
    pub channel: String,
    /// `im`, `mpim`, `channel` or `group` (absent on `app_mention`).
    #[serde(default)]
    pub channel_type: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    /// Set on messages a bot or app posted.
    #[serde(default)]
    pub bot_id: Option<String>,
    #[serde(default)]
    pub text: Option<String>,
    /// The message's timestamp, its id within the channel.
    pub ts: String,
    /// The thread's parent `ts`, for a message in a thread.
    #[serde(default)]
    pub thread_ts: Option<String>,
    #[serde(default)]
    pub hidden: bool,
    #[serde(default)]
    pub files: Vec<File>,
}

/// A file shared in a message.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct File {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub mimetype: Option<String>,
    /// Slack's own kind of file: `slack_audio` for a voice clip,
    /// `slack_video` for a video clip.
    #[serde(default)]
    pub subtype: Option<String>,
    #[serde(default)]
    pub size: Option<u64>,
    /// `hosted` (or `snippet`, `post`); `external`, `tombstone` (deleted)
    /// and `hidden_by_limit` files cannot be downloaded.
    #[serde(default)]
    pub mode: Option<String>,
    #[serde(default)]
    pub url_private_download: Option<String>,
    #[serde(default)]
    pub url_private: Option<String>,
}

/// An interactivity payload (`payload=` of the form Slack posts, or of a
/// Socket Mode `interactive` envelope).
#[derive(Debug, Deserialize)]
pub(crate) struct Interaction {
    /// `block_actions` for a button press.
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub team: Option<Team>,
    pub user: InteractionUser,
    #[serde(default)]
    pub trigger_id: Option<String>,
    #[serde(default)]
    pub container: Option<Container>,
    #[serde(default)]
    pub channel: Option<Channel>,
    #[serde(default)]
    pub message: Option<InteractionMessage>,
    #[serde(default)]
    pub actions: Vec<Action>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Team {
    pub id: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct InteractionUser {
    pub id: String,
    #[serde(default)]
    pub team_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub username: Option<String>,
}

/// Where the pressed button is.
#[derive(Debug, Deserialize)]
pub(crate) struct Container {
    #[serde(default)]
    pub message_ts: Option<String>,
    #[serde(default)]
    pub channel_id: Option<String>,
    #[serde(default)]
    pub thread_ts: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Channel {
    pub id: String,
}

#[derive(Debug, Deserialize)]
pub(crate) struct InteractionMessage {
    pub ts: String,
    #[serde(default)]
    pub thread_ts: Option<String>,
}

/// One pressed element.
#[derive(Debug, Deserialize)]
pub(crate) struct Action {
    #[serde(default)]
    pub action_id: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
    #[serde(default)]
    pub action_ts: Option<String>,
}
