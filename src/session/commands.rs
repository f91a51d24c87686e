//! Chat commands: the same on every platform, answered by the gateway without
//! a model call. `/cmd@botname` is understood; unknown commands get help
//! instead of reaching the model.

/// A parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Help,
    /// Start a fresh session in this chat.
    New,
    /// Show the session, model and token totals.
    Status,
    /// Stop the running task.
    Stop,
    /// Summarise older history now (runs as a queued task).
    Compact,
    /// Anything else that looks like a command.
    Unknown(String),
}

/// The help text listing the commands.
pub const HELP: &str = "Commands:\n\
    /help: this list\n\
    /new: start a fresh conversation in this chat\n\
    /status: show this conversation's id, model and token use\n\
    /stop: stop the task that is running\n\
    /compact: summarise older messages to free up context\n\
    Anything else goes to the assistant.";

impl Command {
    /// Parses `text` as a command. `bot_name`, when known, lets
    /// `/cmd@botname` through and makes `/cmd@otherbot` not a command for us
    /// (returned as `None`, like ordinary text).
    pub fn parse(text: &str, bot_name: Option<&str>) -> Option<Self> {
        let text = text.trim_start();
        let rest = text.strip_prefix('/')?;
        let word = rest.split(char::is_whitespace).next().unwrap_or("");
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
            "stop" | "cancel" => Self::Stop,
            "compact" => Self::Compact,
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
    fn unknown_commands_are_recognised_as_such() {
        assert_eq!(
            Command::parse("/frobnicate", None),
            Some(Command::Unknown("frobnicate".to_owned()))
        );
    }
}
