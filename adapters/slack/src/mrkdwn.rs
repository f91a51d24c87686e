//! Markdown → Slack `mrkdwn`, the markup of a message's `text` and of
//! `mrkdwn` text objects in blocks. It is not Markdown:
//!
//! - bold is `*x*`, italics `_x_`, strikethrough `~x~` (nested emphasis of
//!   one kind writes its marker once); headings become bold lines;
//! - inline code is `` `x` ``; code blocks are fenced with ```` ``` ````
//!   on lines of their own, without a language (Slack shows none), their
//!   contents verbatim but for escaping;
//! - links are `<url|text>` (or `<url>` when the text is the URL) for
//!   `http(s)://` and `mailto:` targets; other targets are written as
//!   `text (url)`;
//! - block quotes are lines starting with `>`, bullet lists `• ` lines,
//!   ordered lists keep their numbers, nested items are indented; table
//!   rows become lines of cells separated by ` | ` (the header bold);
//! - `&`, `<` and `>` are escaped (`&amp;`, `&lt;`, `&gt;`) everywhere
//!   outside the markup written here, code included, as Slack requires. So
//!   text the model writes can never become a mention (`<@U123>`,
//!   `<!channel>`) or a link Slack would expand.
//!
//! Markdown is parsed with `pulldown-cmark` with the extensions the
//! contract's renderers and splitter use (strikethrough, tables, task
//! lists), so a chunk cut by the contract's splitter renders on its own.

use pulldown_cmark::{Event, LinkType, Options, Parser, Tag, TagEnd};
use switchboard_contract::markdown::MarkupRenderer;

/// The `mrkdwn` renderer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mrkdwn;

impl MarkupRenderer for Mrkdwn {
    fn render(&self, markdown: &str) -> String {
        let options =
            Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES | Options::ENABLE_TASKLISTS;
        let mut writer = Writer::default();
        for event in Parser::new_ext(markdown, options) {
            writer.event(event);
        }
        writer.finish()
    }
}

/// Escapes text for `mrkdwn`: `&`, `<` and `>` only.
#[must_use]
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            _ => out.push(c),
        }
    }
    out
}

/// A link target as it stands inside `<…|…>`: escaped, and without the
/// characters that would end the link early.
fn link_target(url: &str) -> String {
    escape(url.trim()).replace('|', "%7C")
}

/// Whether Slack makes `url` a link.
fn is_linkable(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    ["http://", "https://", "mailto:"]
        .iter()
        .any(|scheme| lower.len() > scheme.len() && lower.starts_with(scheme))
}

/// Which emphasis marker.
#[derive(Debug, Clone, Copy)]
enum Mark {
    Bold,
    Italic,
    Strike,
}

impl Mark {
    fn symbol(self) -> char {
        match self {
            Self::Bold => '*',
            Self::Italic => '_',
            Self::Strike => '~',
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug, Default)]
struct Writer {
    out: String,
    /// Line breaks owed before the next content (2: a blank line).
    owed: usize,
    /// Whether the current line has anything on it (its prefix included).
    line_open: bool,
    /// How deep in block quotes (Slack shows one level).
    quotes: usize,
    /// The indentation of each open list item's contents.
    indents: Vec<usize>,
    /// For each open list, the next number (`None`: bullets).
    lists: Vec<Option<u64>>,
    /// Each open link's target and where its text starts in `out`.
    links: Vec<(String, usize)>,
    /// The contents of the open code block.
    code: Option<String>,
    /// How many of each emphasis are open (bold, italic, strike).
    open: [usize; 3],
    /// The next table cell's number in its row.
    cell: usize,
}

impl Writer {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => match &mut self.code {
                Some(body) => body.push_str(&text),
                None => self.text(&text),
            },
            Event::Code(code) => {
                self.put("`");
                self.text(&code);
                self.out.push('`');
            }
            Event::Html(raw) | Event::InlineHtml(raw) => self.text(&raw),
            Event::InlineMath(math) | Event::DisplayMath(math) => self.text(&math),
            Event::FootnoteReference(name) => self.text(&format!("[{name}]")),
            Event::SoftBreak | Event::HardBreak => self.text("\n"),
            Event::Rule => {
                self.put("---");
                self.owe(2);
            }
            Event::TaskListMarker(done) => self.text(if done { "[x] " } else { "[ ] " }),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Heading { .. } => self.emphasis(Mark::Bold, true),
            Tag::BlockQuote(_) => self.quotes += 1,
            Tag::CodeBlock(_) => self.code = Some(String::new()),
            Tag::List(first) => {
                self.lists.push(first);
                self.owe(1);
            }
            Tag::Item => self.item(),
            Tag::Emphasis => self.emphasis(Mark::Italic, true),
            Tag::Strong => self.emphasis(Mark::Bold, true),
            Tag::Strikethrough => self.emphasis(Mark::Strike, true),
            Tag::Link {
                link_type,
                dest_url,
                ..
            } => {
                let dest = if link_type == LinkType::Email {
                    format!("mailto:{dest_url}")
                } else {
                    dest_url.into_string()
                };
                self.put("");
                self.links.push((dest, self.out.len()));
            }
            Tag::Image { dest_url, .. } => {
                self.put("");
                self.links.push((dest_url.into_string(), self.out.len()));
            }
            Tag::TableHead => {
                self.cell = 0;
                self.emphasis(Mark::Bold, true);
            }
            Tag::TableRow => self.cell = 0,
            Tag::TableCell => {
                if self.cell > 0 {
                    self.text(" | ");
                }
                self.cell += 1;
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph | TagEnd::HtmlBlock | TagEnd::Table => self.owe(2),
            TagEnd::Heading(_) => {
                self.emphasis(Mark::Bold, false);
                self.owe(2);
            }
            TagEnd::BlockQuote(_) => {
                self.quotes = self.quotes.saturating_sub(1);
                self.owe(2);
            }
            TagEnd::CodeBlock => self.code_block(),
            TagEnd::List(_) => {
                self.lists.pop();
                self.owe(if self.lists.is_empty() { 2 } else { 1 });
            }
            TagEnd::Item => {
                self.indents.pop();
                self.owe(1);
            }
            TagEnd::Emphasis => self.emphasis(Mark::Italic, false),
            TagEnd::Strong => self.emphasis(Mark::Bold, false),
            TagEnd::Strikethrough => self.emphasis(Mark::Strike, false),
            TagEnd::Link | TagEnd::Image => self.link(),
            TagEnd::TableHead => {
                self.emphasis(Mark::Bold, false);
                self.owe(1);
            }
            TagEnd::TableRow => self.owe(1),
            _ => {}
        }
    }

    /// Owes at least `breaks` line breaks before the next content.
    fn owe(&mut self, breaks: usize) {
        if !self.out.is_empty() {
            self.owed = self.owed.max(breaks);
        }
    }

    /// What starts each line inside the open quotes and list items.
    fn prefix(&self) -> String {
        let quote = if self.quotes > 0 { "> " } else { "" };
        format!("{quote}{}", " ".repeat(self.indents.iter().sum()))
    }

    /// Writes `markup` where content goes next: after the line breaks owed
    /// (blank lines carry the quote marker) and the line's prefix.
    fn put(&mut self, markup: &str) {
        if self.owed > 0 {
            let blank = self.prefix().trim_end().to_owned();
            let mut breaks = self.owed;
            if self.line_open {
                self.out.push('\n');
                breaks -= 1;
            }
            for _ in 0..breaks {
                self.out.push_str(&blank);
                self.out.push('\n');
            }
            self.owed = 0;
            self.line_open = false;
        }
        if !self.line_open {
            let prefix = self.prefix();
            self.out.push_str(&prefix);
            self.line_open = true;
        }
        self.out.push_str(markup);
    }

    /// Writes text, escaped, each line after the line's prefix.
    fn text(&mut self, text: &str) {
        for (i, line) in text.split('\n').enumerate() {
            if i > 0 {
                self.out.push('\n');
                self.line_open = false;
            }
            if !line.is_empty() {
                self.put(&escape(line));
            }
        }
    }

    /// Opens or closes one emphasis; only the outermost of a kind writes
    /// its marker.
    fn emphasis(&mut self, mark: Mark, opening: bool) {
        let depth = &mut self.open[mark.index()];
        if opening {
            *depth += 1;
            if *depth == 1 {
                self.put(&mark.symbol().to_string());
            }
        } else if *depth > 0 {
            *depth -= 1;
            if *depth == 0 {
                self.out.push(mark.symbol());
            }
        }
    }

    fn item(&mut self) {
        let marker = match self.lists.last_mut() {
            Some(Some(number)) => {
                let marker = format!("{number}. ");
                *number += 1;
                marker
            }
            _ => "• ".to_owned(),
        };
        self.put(&marker);
        self.indents.push(marker.chars().count());
    }

    /// Closes a code block: its contents between fence lines, verbatim
    /// but escaped (no list indentation inside).
    fn code_block(&mut self) {
        let Some(body) = self.code.take() else {
            return;
        };
        let body = body.strip_suffix('\n').unwrap_or(&body);
        if !body.trim().is_empty() {
            self.put("```\n");
            self.out.push_str(&escape(body));
            self.out.push_str("\n```");
        }
        self.owe(2);
    }

    /// Closes a link: the text written since it opened becomes the link's.
    fn link(&mut self) {
        let Some((dest, start)) = self.links.pop() else {
            return;
        };
        let text = self.out.split_off(start.min(self.out.len()));
        let shown = escape(dest.trim());
        let same = text.is_empty() || text == shown;
        let link = match (is_linkable(&dest), same) {
            (true, true) => format!("<{}>", link_target(&dest)),
            (true, false) => format!("<{}|{text}>", link_target(&dest)),
            (false, true) => shown,
            (false, false) if dest.trim().is_empty() => text,
            (false, false) => format!("{text} ({shown})"),
        };
        self.out.push_str(&link);
    }

    fn finish(mut self) -> String {
        let kept = self.out.trim_end().len();
        self.out.truncate(kept);
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(markdown: &str) -> String {
        Mrkdwn.render(markdown)
    }

    #[test]
    fn only_ampersand_and_angle_brackets_are_escaped() {
        assert_eq!(escape("a < b && c > d"), "a &lt; b &amp;&amp; c &gt; d");
        assert_eq!(md("1 < 2 & 3 > 2"), "1 &lt; 2 &amp; 3 &gt; 2");
        assert_eq!(md("plain 日本語 😀"), "plain 日本語 😀");
    }

    #[test]
    fn text_cannot_become_a_mention_or_a_link() {
        assert_eq!(
            md("hi <@U123> and <!channel>"),
            "hi &lt;@U123&gt; and &lt;!channel&gt;"
        );
        assert_eq!(
            md("<script>alert(1)</script>"),
            "&lt;script&gt;alert(1)&lt;/script&gt;"
        );
    }

    #[test]
    fn emphasis_uses_slack_markers_once_per_kind() {
        assert_eq!(
            md("**bold *italic* ~~strike~~** and _it **b**_"),
            "*bold _italic_ ~strike~* and _it *b*_"
        );
        assert_eq!(md("***both***"), "_*both*_");
        assert_eq!(md("**a **b** c**"), "*a b c*");
    }

    #[test]
    fn headings_are_bold_lines() {
        assert_eq!(md("# Title\n\ntext"), "*Title*\n\ntext");
        assert_eq!(md("## A **bold** word"), "*A bold word*");
    }

    #[test]
    fn inline_code_and_code_blocks_are_escaped_verbatim() {
        assert_eq!(md("Use `a<b>&c` here"), "Use `a&lt;b&gt;&amp;c` here");
        assert_eq!(
            md("Before:\n\n```rust\nif a < b && *c* {\n    _x_\n}\n```\n\nAfter."),
            "Before:\n\n```\nif a &lt; b &amp;&amp; *c* {\n    _x_\n}\n```\n\nAfter."
        );
        assert_eq!(md("    indented <x>"), "```\nindented &lt;x&gt;\n```");
        assert_eq!(md("```\n```"), "");
    }

    #[test]
    fn links_become_slack_links() {
        assert_eq!(
            md("See [the docs](https://x.y/a?b=1&c=2) now."),
            "See <https://x.y/a?b=1&amp;c=2|the docs> now."
        );
        assert_eq!(md("<https://x.y/z>"), "<https://x.y/z>");
        assert_eq!(md("<me@x.y>"), "<mailto:me@x.y|me@x.y>");
        assert_eq!(md("[a|b](https://x.y/p|q)"), "<https://x.y/p%7Cq|a|b>");
        assert_eq!(
            md("[**bold** link](https://x.y)"),
            "<https://x.y|*bold* link>"
        );
        assert_eq!(md("[](https://x.y)"), "<https://x.y>");
        assert_eq!(
            md("![a cat](https://x.y/cat.png)"),
            "<https://x.y/cat.png|a cat>"
        );
    }

    #[test]
    fn other_link_targets_are_spelled_out() {
        assert_eq!(md("[file](./x.md)"), "file (./x.md)");
        assert_eq!(md("[js](javascript:alert(1))"), "js (javascript:alert(1))");
        assert_eq!(md("[odd <t>](./a&b)"), "odd &lt;t&gt; (./a&amp;b)");
    }

    #[test]
    fn lists_quotes_and_tables() {
        assert_eq!(
            md("- a\n- b\n  - c\n\n1. x\n2. y"),
            "• a\n• b\n  • c\n\n1. x\n2. y"
        );
        assert_eq!(md("7. seven\n8. eight"), "7. seven\n8. eight");
        assert_eq!(md("- [x] done\n- [ ] todo"), "• [x] done\n• [ ] todo");
        assert_eq!(
            md("> quote\n> more\n>\n> again"),
            "> quote\n> more\n>\n> again"
        );
        assert_eq!(md("> outer\n>\n> > inner"), "> outer\n>\n> inner");
        assert_eq!(md("| a | b |\n|---|---|\n| 1 | 2 |"), "*a | b*\n1 | 2");
        assert_eq!(
            md("Intro:\n\n- a\n- b\n\nAfter."),
            "Intro:\n\n• a\n• b\n\nAfter."
        );
    }

    #[test]
    fn every_cut_renders_with_balanced_fences() {
        let sample = "# Notes *x*\n\nSome **bold** & `code`, [a link](https://e.com/?a=1&b=2).\n\n\
                      > quoted **text**\n\n- item\n  - nested\n\n```\nfn main() { a < b }\n```\n\n\
                      | h | i |\n|---|---|\n| 1 | 2 |\n";
        for (i, _) in sample.char_indices() {
            for piece in [&sample[..i], &sample[i..]] {
                let out = md(piece);
                assert_eq!(out.matches("```").count() % 2, 0, "{piece:?} → {out:?}");
                assert!(!out.contains('<') || out.contains("<https://"), "{out:?}");
            }
        }
    }
}
