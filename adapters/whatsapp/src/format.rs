//! Markdown → WhatsApp formatting, and replies split to WhatsApp's length
//! limit.
//!
//! [`WhatsAppMarkup`] parses with `pulldown-cmark` (CommonMark with
//! strikethrough, tables and task lists, like the contract's renderers)
//! and writes what WhatsApp shows: `*bold*` (also headings and table
//! headers), `_italic_`, `~strike~`, `` `inline code` `` and
//! ```` ```monospace blocks``` ````, `- ` and `1. ` list items (nested ones
//! indented), `> ` quotes (one level: WhatsApp has no nested quotes), links
//! as `text (url)` and table rows as cells joined by ` | `. Markers of the
//! same style never nest (`**a *b***` would end the bold early), and
//! WhatsApp has no escapes, so other text is written as it is.
//!
//! [`render_chunks`] splits the Markdown with the contract's splitter, so
//! no chunk breaks a code fence or a character, and measures each chunk
//! once rendered, in UTF-16 units (at most what WhatsApp counts).

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use switchboard_contract::markdown::MarkupRenderer;
use switchboard_contract::split::{LengthUnit, split_message_fitting};

/// Longest text message body, in characters.
pub const TEXT_LIMIT: usize = 4096;

/// Longest body of an interactive (buttons or list) message.
pub const INTERACTIVE_BODY_LIMIT: usize = 1024;

/// How chunks are measured against the limits.
pub(crate) const UNIT: LengthUnit = LengthUnit::Utf16;

/// Markdown → WhatsApp's formatting characters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WhatsAppMarkup;

impl MarkupRenderer for WhatsAppMarkup {
    fn render(&self, markdown: &str) -> String {
        let mut writer = Writer::default();
        let options =
            Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES | Options::ENABLE_TASKLISTS;
        for event in Parser::new_ext(markdown, options) {
            writer.event(event);
        }
        writer.finish()
    }
}

/// Splits `markdown` into chunks that each render to at most `limit`
/// UTF-16 units, and renders them. Chunks that render to nothing visible
/// are dropped; whitespace-only input gives no chunks.
#[must_use]
pub fn render_chunks(markdown: &str, limit: usize) -> Vec<String> {
    let fits = |piece: &str| UNIT.measure(&WhatsAppMarkup.render(piece)) <= limit;
    split_message_fitting(markdown, limit, UNIT, &fits)
        .iter()
        .map(|piece| WhatsAppMarkup.render(piece))
        .filter(|rendered| !rendered.trim().is_empty())
        .collect()
}

/// An inline style and its marker.
#[derive(Debug, Clone, Copy)]
enum Style {
    Bold,
    Italic,
    Strike,
}

impl Style {
    fn marker(self) -> &'static str {
        match self {
            Self::Bold => "*",
            Self::Italic => "_",
            Self::Strike => "~",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Debug)]
enum Container {
    Quote,
    Item { indent: usize },
}

#[derive(Debug)]
struct Link {
    dest: String,
    text_start: usize,
}

#[derive(Debug, Default)]
struct Writer {
    out: String,
    /// Line breaks owed before the next content (2 = a blank line).
    pending: usize,
    /// Whether nothing has been written on the current line yet.
    mid_line: bool,
    containers: Vec<Container>,
    /// For each open list, the next number (`None` for bullet lists).
    lists: Vec<Option<u64>>,
    links: Vec<Link>,
    /// The contents of the open code block.
    code: Option<String>,
    /// How deep each [`Style`] is open.
    depth: [usize; 3],
    table_cell: usize,
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
            Event::Code(code) => self.text(&format!("`{code}`")),
            Event::Html(html) | Event::InlineHtml(html) => self.text(&html),
            Event::InlineMath(math) | Event::DisplayMath(math) => self.text(&math),
            Event::FootnoteReference(name) => self.text(&format!("[{name}]")),
            Event::SoftBreak | Event::HardBreak => self.text("\n"),
            Event::Rule => {
                self.text("---");
                self.block_end(2);
            }
            Event::TaskListMarker(done) => self.text(if done { "[x] " } else { "[ ] " }),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Heading { .. } => self.open(Style::Bold),
            Tag::BlockQuote(_) => {
                self.flush();
                self.containers.push(Container::Quote);
            }
            Tag::CodeBlock(_) => {
                self.flush();
                self.code = Some(String::new());
            }
            Tag::List(first) => {
                self.lists.push(first);
                // A nested list starts on the line after its parent item.
                if !self.out.is_empty() {
                    self.block_end(1);
                }
            }
            Tag::Item => self.start_item(),
            Tag::Emphasis => self.open(Style::Italic),
            Tag::Strong => self.open(Style::Bold),
            Tag::Strikethrough => self.open(Style::Strike),
            Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                self.flush();
                self.start_line();
                self.links.push(Link {
                    dest: dest_url.into_string(),
                    text_start: self.out.len(),
                });
            }
            Tag::TableHead => {
                self.flush();
                self.table_cell = 0;
                self.open(Style::Bold);
            }
            Tag::TableRow => self.table_cell = 0,
            Tag::TableCell => {
                if self.table_cell > 0 {
                    self.text(" | ");
                }
                self.table_cell += 1;
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Paragraph | TagEnd::HtmlBlock | TagEnd::Table => self.block_end(2),
            TagEnd::Heading(_) => {
                self.close(Style::Bold);
                self.block_end(2);
            }
            TagEnd::BlockQuote(_) => {
                self.containers.pop();
                self.block_end(2);
            }
            TagEnd::CodeBlock => self.end_code_block(),
            TagEnd::List(_) => {
                self.lists.pop();
                self.block_end(if self.lists.is_empty() { 2 } else { 1 });
            }
            TagEnd::Item => {
                self.containers.pop();
                self.block_end(1);
            }
            TagEnd::Emphasis => self.close(Style::Italic),
            TagEnd::Strong => self.close(Style::Bold),
            TagEnd::Strikethrough => self.close(Style::Strike),
            TagEnd::Link | TagEnd::Image => self.end_link(),
            TagEnd::TableHead => {
                self.close(Style::Bold);
                self.block_end(1);
            }
            TagEnd::TableRow => self.block_end(1),
            _ => {}
        }
    }

    /// What starts each line inside the open containers: one `> ` for any
    /// depth of quotes, and the indentation of the open list items.
    fn prefix(&self) -> String {
        let mut prefix = String::new();
        let mut quoted = false;
        for container in &self.containers {
            match container {
                Container::Quote if !quoted => {
                    prefix.push_str("> ");
                    quoted = true;
                }
                Container::Quote => {}
                Container::Item { indent } => prefix.push_str(&" ".repeat(*indent)),
            }
        }
        prefix
    }

    fn block_end(&mut self, breaks: usize) {
        self.pending = self.pending.max(breaks);
    }

    /// Writes the owed line breaks; blank lines carry the quote marker.
    fn flush(&mut self) {
        if self.pending == 0 {
            return;
        }
        if !self.out.is_empty() {
            let blank = self.prefix().trim_end().to_owned();
            if self.mid_line {
                self.out.push('\n');
            }
            for _ in 1..self.pending {
                self.out.push_str(&blank);
                self.out.push('\n');
            }
            self.mid_line = false;
        }
        self.pending = 0;
    }

    fn start_line(&mut self) {
        if !self.mid_line {
            let prefix = self.prefix();
            self.out.push_str(&prefix);
            self.mid_line = true;
        }
    }

    /// Writes text, prefixing each new line.
    fn text(&mut self, text: &str) {
        self.flush();
        for (i, line) in text.split('\n').enumerate() {
            if i > 0 {
                self.out.push('\n');
                self.mid_line = false;
            }
            if !line.is_empty() {
                self.start_line();
                self.out.push_str(line);
            }
        }
    }

    fn open(&mut self, style: Style) {
        let depth = &mut self.depth[style.index()];
        *depth += 1;
        if *depth == 1 {
            self.flush();
            self.start_line();
            self.out.push_str(style.marker());
        }
    }

    fn close(&mut self, style: Style) {
        let depth = &mut self.depth[style.index()];
        *depth = depth.saturating_sub(1);
        if *depth == 0 {
            self.out.push_str(style.marker());
        }
    }

    fn start_item(&mut self) {
        self.flush();
        self.start_line();
        let marker = match self.lists.last_mut() {
            Some(Some(number)) => {
                let marker = format!("{number}. ");
                *number += 1;
                marker
            }
            _ => "- ".to_owned(),
        };
        self.out.push_str(&marker);
        self.containers.push(Container::Item {
            indent: marker.chars().count(),
        });
    }

    fn end_code_block(&mut self) {
        let Some(body) = self.code.take() else {
            return;
        };
        let body = body.strip_suffix('\n').unwrap_or(&body);
        if !body.trim().is_empty() {
            self.text(&format!("```{body}```"));
        }
        self.block_end(2);
    }

    fn end_link(&mut self) {
        let Some(link) = self.links.pop() else {
            return;
        };
        let text = self.out.get(link.text_start..).unwrap_or_default();
        let same = text == link.dest || format!("mailto:{text}") == link.dest;
        if text.is_empty() {
            self.out.push_str(&link.dest);
        } else if !same && !link.dest.is_empty() {
            self.out.push_str(&format!(" ({})", link.dest));
        }
    }

    fn finish(mut self) -> String {
        let trimmed = self.out.trim_end_matches('\n').len();
        self.out.truncate(trimmed);
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wa(markdown: &str) -> String {
        WhatsAppMarkup.render(markdown)
    }

    #[test]
    fn inline_styles_use_whatsapp_markers() {
        assert_eq!(
            wa("**bold** and *italic* and ~~gone~~ and `code`"),
            "*bold* and _italic_ and ~gone~ and `code`"
        );
        assert_eq!(wa("__bold__ _it_"), "*bold* _it_");
        assert_eq!(wa("**bold _nested_ ~~both~~**"), "*bold _nested_ ~both~*");
    }

    #[test]
    fn markers_of_one_style_never_nest() {
        assert_eq!(wa("# A **strong** title"), "*A strong title*");
        assert_eq!(wa("***both***"), "_*both*_");
        assert_eq!(wa("_a *b* c_"), "_a b c_");
    }

    #[test]
    fn headings_paragraphs_and_rules() {
        assert_eq!(
            wa("# Title\n\ntext\n\n---\n\nend"),
            "*Title*\n\ntext\n\n---\n\nend"
        );
        assert_eq!(wa("a\nb  \nc"), "a\nb\nc");
    }

    #[test]
    fn code_blocks_are_monospace_and_verbatim() {
        assert_eq!(
            wa("Run:\n\n```rust\nlet a = *b * 2; // _x_\n\nok\n```\n\nDone."),
            "Run:\n\n```let a = *b * 2; // _x_\n\nok```\n\nDone."
        );
        assert_eq!(wa("    indented\n    code"), "```indented\ncode```");
        assert_eq!(wa("```\n\n```"), "");
    }

    #[test]
    fn lists_keep_their_markers_and_nesting() {
        assert_eq!(
            wa("- a\n- b\n  - c\n\n1. x\n2. y"),
            "- a\n- b\n  - c\n\n1. x\n2. y"
        );
        assert_eq!(wa("7. seven\n8. eight"), "7. seven\n8. eight");
        assert_eq!(wa("- [x] done\n- [ ] todo"), "- [x] done\n- [ ] todo");
        assert_eq!(
            wa("- item\n\n  ```\n  code\n  more\n  ```"),
            "- item\n\n  ```code\n  more```"
        );
    }

    #[test]
    fn quotes_take_one_marker_per_line() {
        assert_eq!(wa("> quoted\n> more"), "> quoted\n> more");
        assert_eq!(wa("> outer\n>\n> > inner **b**"), "> outer\n>\n> inner *b*");
    }

    #[test]
    fn links_show_their_target() {
        assert_eq!(
            wa("See [the docs](https://x.y/a?b=1) now."),
            "See the docs (https://x.y/a?b=1) now."
        );
        assert_eq!(wa("<https://x.y/z>"), "https://x.y/z");
        assert_eq!(wa("<me@x.y>"), "me@x.y");
        assert_eq!(wa("[](https://x.y)"), "https://x.y");
        assert_eq!(
            wa("[**bold** link](https://x.y)"),
            "*bold* link (https://x.y)"
        );
        assert_eq!(
            wa("![a cat](https://x.y/c.png)"),
            "a cat (https://x.y/c.png)"
        );
    }

    #[test]
    fn tables_become_rows_of_cells() {
        assert_eq!(wa("| a | b |\n|---|---|\n| 1 | 2 |"), "*a | b*\n1 | 2");
    }

    #[test]
    fn text_is_not_escaped_and_html_stays_text() {
        assert_eq!(wa("1 < 2 & <b>x</b>"), "1 < 2 & <b>x</b>");
        assert_eq!(wa(""), "");
    }

    #[test]
    fn long_replies_split_under_the_limit_with_fences_kept() {
        let code = "let x = 1;\n".repeat(600);
        let markdown = format!(
            "# Report\n\n{}\n\n```\n{code}```\n\nThe end.",
            "word ".repeat(900)
        );
        let chunks = render_chunks(&markdown, TEXT_LIMIT);
        assert!(chunks.len() >= 3, "{}", chunks.len());
        for chunk in &chunks {
            assert!(UNIT.measure(chunk) <= TEXT_LIMIT, "{}", UNIT.measure(chunk));
            assert_eq!(chunk.matches("```").count() % 2, 0, "{chunk}");
        }
        assert!(chunks[0].starts_with("*Report*"));
        assert!(chunks.last().unwrap().ends_with("The end."));
    }

    #[test]
    fn emoji_are_never_cut() {
        let chunks = render_chunks(&"😀".repeat(3000), TEXT_LIMIT);
        assert_eq!(chunks.len(), 2);
        assert_eq!(chunks.concat(), "😀".repeat(3000));
    }

    #[test]
    fn whitespace_gives_no_chunks() {
        assert!(render_chunks(" \n\n ", TEXT_LIMIT).is_empty());
    }
}
