//! A message's text as Slack sends it (its own markup: `<@U123>`,
//! `<#C123|general>`, `<https://x|label>`, `<!here>`, with `&`, `<` and `>`
//! escaped) → plain text for the agent, and whether it mentions the bot.
//!
//! The bot's own mention is removed (with one space after it); other
//! mentions become `@name` (or `@U123` when Slack gave no name), channels
//! `#name`, special mentions `@here`/`@channel`/`@everyone`, links
//! `label (url)` or the URL alone; entities are unescaped last, so that an
//! escaped `&lt;@U123&gt;` a person typed stays text.

/// The plain text of `text`, and whether it mentions `bot_user_id`.
pub(crate) fn plain_text(text: &str, bot_user_id: &str) -> (String, bool) {
    let mut out = String::with_capacity(text.len());
    let mut mentioned = false;
    let mut rest = text;
    while let Some(open) = rest.find('<') {
        out.push_str(&unescape(&rest[..open]));
        let after = &rest[open + 1..];
        let Some(close) = after.find('>') else {
            // Slack escapes a lone `<`; keep whatever this is as text.
            rest = &rest[open..];
            break;
        };
        let inner = &after[..close];
        rest = &after[close + 1..];
        match token(inner, bot_user_id) {
            Token::Bot => {
                mentioned = true;
                rest = rest.strip_prefix(' ').unwrap_or(rest);
            }
            Token::Text(shown) => out.push_str(&shown),
        }
    }
    out.push_str(&unescape(rest));
    (out.trim().to_owned(), mentioned)
}

enum Token {
    /// The bot's own mention.
    Bot,
    /// What stands in for the markup.
    Text(String),
}

/// What one `<…>` stands for.
fn token(inner: &str, bot_user_id: &str) -> Token {
    let (target, label) = match inner.split_once('|') {
        Some((target, label)) => (target, Some(unescape(label))),
        None => (inner, None),
    };
    if let Some(user) = target.strip_prefix('@') {
        if !bot_user_id.is_empty() && user == bot_user_id {
            return Token::Bot;
        }
        let name = label.unwrap_or_else(|| user.to_owned());
        return Token::Text(format!("@{}", name.trim_start_matches('@')));
    }
    if let Some(channel) = target.strip_prefix('#') {
        let name = label.unwrap_or_else(|| channel.to_owned());
        return Token::Text(format!("#{}", name.trim_start_matches('#')));
    }
    if let Some(special) = target.strip_prefix('!') {
        let shown = match special.split('^').next().unwrap_or_default() {
            "here" | "channel" | "everyone" => format!("@{special}"),
            _ => label.unwrap_or_default(),
        };
        return Token::Text(shown);
    }
    let url = unescape(target);
    Token::Text(match label {
        Some(label) if label != url && format!("mailto:{label}") != url => {
            format!("{label} ({url})")
        }
        Some(label) => label,
        None => url.strip_prefix("mailto:").unwrap_or(&url).to_owned(),
    })
}

/// Undoes Slack's escaping of `&`, `<` and `>`.
fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOT: &str = "UBOT";

    fn plain(text: &str) -> (String, bool) {
        plain_text(text, BOT)
    }

    #[test]
    fn the_bots_mention_is_removed_and_reported() {
        assert_eq!(
            plain("<@UBOT> what is 17*23?"),
            ("what is 17*23?".to_owned(), true)
        );
        assert_eq!(
            plain("hey <@UBOT|switchboard>, hi"),
            ("hey , hi".to_owned(), true)
        );
        assert_eq!(
            plain("no mention here"),
            ("no mention here".to_owned(), false)
        );
    }

    #[test]
    fn other_markup_becomes_plain_text() {
        assert_eq!(plain("<@U123> and <@U456|bob>").0, "@U123 and @bob");
        assert_eq!(plain("in <#C1|general> and <#C2>").0, "in #general and #C2");
        assert_eq!(
            plain("<!here> <!channel> <!everyone>").0,
            "@here @channel @everyone"
        );
        assert_eq!(plain("<!subteam^S1|@devs> ping").0, "@devs ping");
        assert_eq!(plain("<!date^1392734382^{date}|Feb 18>").0, "Feb 18");
        assert_eq!(
            plain("see <https://x.y/a?b=1&amp;c=2|the docs> or <https://x.y>").0,
            "see the docs (https://x.y/a?b=1&c=2) or https://x.y"
        );
        assert_eq!(plain("<mailto:a@b.c|a@b.c>").0, "a@b.c");
    }

    #[test]
    fn escaped_text_stays_text() {
        assert_eq!(
            plain("1 &lt; 2 &amp;&amp; &lt;@UBOT&gt;"),
            ("1 < 2 && <@UBOT>".to_owned(), false)
        );
        assert_eq!(plain("a < b").0, "a < b");
    }
}
