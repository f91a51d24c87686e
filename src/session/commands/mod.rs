//! Chat commands: the same on every platform, answered by the gateway without
//! a model call. `/cmd@botname` is understood; unknown commands get help
//! instead of reaching the model.
//!
//! This module is the one place that reads commands: [`Command::parse`]
//! parses them, [`Commands::run`] answers each one, and [`Task::of`] tells a
//! queued task whether it is a `/compact` (which needs a model call, so it
//! waits its turn in the session's queue) or ordinary text. `/retry` turns
//! its own message into a task asking the last question again.

mod dispatch;
mod tasks;

pub use dispatch::{Answer, CommandSettings, Commands, Context, Dispatched};

use super::texts;

/// A parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    /// Start a fresh session in this chat.
    New,
    /// Show the session, model and token totals.
    Status,
    /// Stop the running task; `/stop ID`: a background task's run.
    Stop(Option<String>),
    /// Summarise older history now (runs as a queued task).
    Compact,
    /// `/link`: get a one-time code; `/link CODE`: join the code owner.
    Link(Option<String>),
    /// Detach this identity into a fresh principal.
    Unlink,
    /// List the principal's recent sessions.
    Sessions,
    /// Switch this chat to one of the principal's sessions.
    Resume(Option<String>),
    /// Set the session's title.
    Title(Option<String>),
    /// Switch the session's model (or list the models).
    Model(Option<String>),
    /// Today's token use for this principal.
    Usage,
    /// `/memory`: list what is remembered about the sender;
    /// `/memory forget N`, `/memory clear`: remove facts.
    Memory(Option<String>),
    /// `/tasks`: list the sender's tasks; `/tasks cancel|pause|resume|run
    /// ID`: change one.
    Tasks(Option<String>),
    /// `/timezone`: show the sender's time zone; `/timezone ZONE`: set it.
    Timezone(Option<String>),
    /// Answer the last user message again.
    Retry,
    /// Drop the last exchange from what the model sees.
    Undo,
    /// An admin approves a pairing code.
    Approve(Option<String>),
    /// An admin denies a pairing code.
    Deny(Option<String>),
    /// `/allow N [chat]`: allow a waiting tool call (once, or for the
    /// conversation); not `/approve`, which admits a pairing code.
    Allow(Option<String>),
    /// `/reject N`: deny a waiting tool call (or skip a call in doubt).
    Reject(Option<String>),
    /// Anything else that looks like a command.
    Unknown(String),
}

/// What a queued message asks its turn to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Task {
    /// Answer the text (the model sees it).
    Message,
    /// `/compact`: summarise older history now, then answer with the result.
    Compact,
}

impl Task {
    /// The task of a queued message's text.
    pub fn of(text: &str) -> Self {
        match Command::parse(text, None) {
            Some(Command::Compact) => Self::Compact,
            _ => Self::Message,
        }
    }
}

impl Command {
    /// Whether the message runs as a queued task of its session (`/compact`,
    /// which needs a model call) rather than being answered at once.
    pub fn is_queued(&self) -> bool {
        matches!(self, Self::Compact)
    }

    /// The text recorded for a message that is this command. A `/link CODE`
    /// is recorded without its code: a live code is a credential until
    /// redeemed (and stays one when the redemption is refused, e.g.
    /// rate-limited or sent in a group).
    pub fn recorded_text<'a>(command: Option<&Self>, text: &'a str) -> &'a str {
        match command {
            Some(Self::Link(Some(_))) => texts::LINK_REDEEM_STORED,
            _ => text,
        }
    }

    /// Parses `text` as a command. `bot_name`, when known, lets
    /// `/cmd@botname` through and makes `/cmd@otherbot` not a command for us
    /// (returned as `None`, like ordinary text).
    pub fn parse(text: &str, bot_name: Option<&str>) -> Option<Self> {
        let text = text.trim_start();
        let rest = text.strip_prefix('/')?;
        let (word, argument) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let argument = Some(argument.trim().to_owned()).filter(|a| !a.is_empty());
        let (name, addressee) = match word.split_once('@') {
            Some((name, addressee)) => (name, Some(addressee)),
            None => (word, None),
        };
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        if let (Some(addressee), Some(bot)) = (addressee, bot_name)
            && !addressee.eq_ignore_ascii_case(bot.trim_start_matches('@'))
        {
            return None;
        }
        Some(match name.to_ascii_lowercase().as_str() {
            "help" | "start" => Self::Help,
            "new" | "reset" => Self::New,
            "status" => Self::Status,
            "stop" | "cancel" => Self::Stop(argument),
            "tasks" => Self::Tasks(argument),
            "timezone" => Self::Timezone(argument),
            "compact" => Self::Compact,
            "link" => Self::Link(argument),
            "unlink" => Self::Unlink,
            "sessions" => Self::Sessions,
            "resume" => Self::Resume(argument),
            "title" => Self::Title(argument),
            "model" => Self::Model(argument),
            "usage" => Self::Usage,
            "memory" => Self::Memory(argument),
            "retry" => Self::Retry,
            "undo" => Self::Undo,
            "approve" => Self::Approve(argument),
            "deny" => Self::Deny(argument),
            "allow" => Self::Allow(argument),
            "reject" => Self::Reject(argument),
            other => Self::Unknown(other.to_owned()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_with_and_without_the_bot_name() {
        assert_eq!(Command::parse("/help", None), Some(Command::Help));
        assert_eq!(
            Command::parse("/NEW@MyBot", Some("mybot")),
            Some(Command::New)
        );
        assert_eq!(
            Command::parse("/status extra words", None),
            Some(Command::Status)
        );
    }

    #[test]
    fn commands_for_other_bots_and_plain_text_are_not_commands() {
        assert_eq!(Command::parse("/new@otherbot", Some("mybot")), None);
        assert_eq!(Command::parse("hello /new", None), None);
        assert_eq!(Command::parse("/ not a command", None), None);
        assert_eq!(Command::parse("/path/to/file", None), None);
    }

    #[test]
    fn arguments_are_trimmed_and_kept() {
        assert_eq!(
            Command::parse("/title@mybot  My trip  ", Some("mybot")),
            Some(Command::Title(Some("My trip".to_owned())))
        );
        assert_eq!(
            Command::parse("/link\nABCD2345", None),
            Some(Command::Link(Some("ABCD2345".to_owned())))
        );
        assert_eq!(Command::parse("/link", None), Some(Command::Link(None)));
        assert_eq!(
            Command::parse("/resume ", None),
            Some(Command::Resume(None))
        );
    }

    #[test]
    fn only_compact_is_a_compact_task() {
        assert_eq!(Task::of("/compact"), Task::Compact);
        assert_eq!(Task::of("/compact@bot now"), Task::Compact);
        assert_eq!(Task::of("/compacted"), Task::Message);
        assert_eq!(Task::of("please /compact"), Task::Message);
        assert!(Command::Compact.is_queued());
        assert!(!Command::Retry.is_queued());
    }

    #[test]
    fn link_codes_are_not_recorded() {
        let link = Command::parse("/link ABCD2345", None);
        assert_eq!(
            Command::recorded_text(link.as_ref(), "/link ABCD2345"),
            "/link (code not stored)"
        );
        let help = Command::parse("/help", None);
        assert_eq!(Command::recorded_text(help.as_ref(), "/help"), "/help");
    }

    #[test]
    fn memory_takes_its_action_as_the_argument() {
        assert_eq!(Command::parse("/memory", None), Some(Command::Memory(None)));
        assert_eq!(
            Command::parse("/memory forget 2", None),
            Some(Command::Memory(Some("forget 2".to_owned())))
        );
    }

    #[test]
    fn unknown_commands_are_recognised_as_such() {
        assert_eq!(
            Command::parse("/frobnicate", None),
            Some(Command::Unknown("frobnicate".to_owned()))
        );
    }
}
