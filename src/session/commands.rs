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
    /// Answer the last user message again.
    Retry,
    /// Drop the last exchange from what the model sees.
    Undo,
    /// An admin approves a pairing code.
    Approve(Option<String>),
    /// An admin denies a pairing code.
    Deny(Option<String>),
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
    /sessions: list your recent conversations; /resume ID: continue one here\n\
    /title TEXT: name this conversation\n\
    /model [NAME]: show or switch this conversation's model\n\
    /usage: your tokens today and the share read from the provider cache\n\
    /retry: answer your last message again; /undo: forget the last exchange\n\
    /link: get a code to link another account; /link CODE: link this account\n\
    /unlink: detach this account from the others\n\
    Anything else goes to the assistant.";

impl Command {
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
            "stop" | "cancel" => Self::Stop,
            "compact" => Self::Compact,
            "link" => Self::Link(argument),
            "unlink" => Self::Unlink,
            "sessions" => Self::Sessions,
            "resume" => Self::Resume(argument),
            "title" => Self::Title(argument),
            "model" => Self::Model(argument),
            "usage" => Self::Usage,
            "retry" => Self::Retry,
            "undo" => Self::Undo,
            "approve" => Self::Approve(argument),
            "deny" => Self::Deny(argument),
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
    fn unknown_commands_are_recognised_as_such() {
        assert_eq!(
            Command::parse("/frobnicate", None),
            Some(Command::Unknown("frobnicate".to_owned()))
        );
    }
}
