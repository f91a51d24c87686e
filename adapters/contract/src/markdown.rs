//! Markdown conversion hooks: turning the model's Markdown into a platform's
//! markup.
//!
//! An adapter implements [`MarkupRenderer`] for its platform, or reuses one of
//! the two renderers here: [`PlainText`] (readable text with the Markdown
//! syntax removed) and [`TelegramHtml`] (Telegram's HTML subset, the reference
//! HTML renderer). Both parse with `pulldown-cmark` (CommonMark plus
//! strikethrough, tables and task lists), so they agree on structure:
//!
//! - paragraphs and other blocks are separated by a blank line;
//! - list items start with a marker (`- ` or `• `, `1. ` for ordered lists) and
//!   nested lists are indented;
//! - code blocks keep their contents verbatim;
//! - line breaks inside a paragraph stay line breaks (chat clients show them);
//! - table rows become lines of cells separated by ` | `.
//!
//! Render before splitting with [`crate::split`] only if the platform's markup
//! survives a cut; otherwise split the Markdown and render each chunk (the
//! splitter keeps code fences balanced, so every chunk renders on its own).

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

/// Converts Markdown into a platform's markup.
pub trait MarkupRenderer: Send + Sync {
    /// Renders `markdown`. Never fails: anything the platform cannot express
    /// comes out as (escaped) text.
    fn render(&self, markdown: &str) -> String;
}

/// Markdown → plain text: emphasis markers removed, headings as their text,
/// list items as `- ` / `1. ` lines, links as `text (url)`, block quotes
/// prefixed with `> `, code blocks verbatim.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PlainText;

impl MarkupRenderer for PlainText {
    fn render(&self, markdown: &str) -> String {
        render(markdown, Flavor::Plain)
    }
}

/// Markdown → Telegram HTML (`parse_mode: "HTML"`).
///
/// Uses only tags Telegram accepts: `<b>` (bold, headings, table headers),
/// `<i>`, `<s>`, `<code>`, `<pre>` / `<pre><code class="language-x">`,
/// `<a href>` and `<blockquote>` (never nested: Telegram rejects nested
/// quotes). Bullet lists become `• ` lines, ordered lists keep their numbers.
/// Links to anything but `http(s)://` and `tg://` are written as
/// `text (url)`, since Telegram refuses other link targets. Everything else,
/// including raw HTML in the Markdown, is escaped text. Every tag opened is
/// closed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TelegramHtml;

impl MarkupRenderer for TelegramHtml {
    fn render(&self, markdown: &str) -> String {
        render(markdown, Flavor::Html)
    }
}

/// Escapes text for Telegram HTML: `<`, `>` and `&` only (Telegram's rule;
/// quotes need no escaping outside attributes).
#[must_use]
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            _ => out.push(c),
        }
    }
    out
}

/// Escapes an attribute value: [`escape_html`] plus `"`.
fn escape_attr(text: &str) -> String {
    escape_html(text).replace('"', "&quot;")
}

/// Whether Telegram accepts `url` as a link target.
fn is_linkable(url: &str) -> bool {
    let lower = url.trim().to_ascii_lowercase();
    ["http://", "https://", "tg://"]
        .iter()
        .any(|scheme| lower.starts_with(scheme) && lower.len() > scheme.len())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavor {
    Plain,
    Html,
}

#[derive(Debug)]
enum Container {
    Quote,
    Item { indent: usize },
}

#[derive(Debug)]
struct LinkState {
    dest: String,
    text_start: usize,
    anchor: bool,
}

/// The Markdown extensions every parse in this crate enables (the renderers
/// here and the splitter's code-block finder), so all read the same blocks.
pub(crate) fn parser_options() -> Options {
    Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES | Options::ENABLE_TASKLISTS
}

fn render(markdown: &str, flavor: Flavor) -> String {
    let mut writer = Writer::new(flavor);
    for event in Parser::new_ext(markdown, parser_options()) {
        writer.event(event);
    }
    writer.finish()
}

struct Writer {
    flavor: Flavor,
    out: String,
    /// Line breaks owed before the next content (2 = a blank line).
    pending: usize,
    at_line_start: bool,
    containers: Vec<Container>,
    /// For each open list, the next number (`None` for bullet lists).
    lists: Vec<Option<u64>>,
    links: Vec<LinkState>,
    /// The contents of the open code block and its language.
    code: Option<(String, Option<String>)>,
    quote_depth: usize,
    table_cell: usize,
}

impl Writer {
    fn new(flavor: Flavor) -> Self {
        Self {
            flavor,
            out: String::new(),
            pending: 0,
            at_line_start: true,
            containers: Vec::new(),
            lists: Vec::new(),
            links: Vec::new(),
            code: None,
            quote_depth: 0,
            table_cell: 0,
        }
    }

    fn html(&self) -> bool {
        self.flavor == Flavor::Html
    }

    fn escape(&self, text: &str) -> String {
        match self.flavor {
            Flavor::Plain => text.to_owned(),
            Flavor::Html => escape_html(text),
        }
    }

    /// What starts each line inside the open containers.
    fn prefix(&self) -> String {
        let mut prefix = String::new();
        for container in &self.containers {
            match container {
                Container::Quote if !self.html() => prefix.push_str("> "),
                Container::Quote => {}
                Container::Item { indent } => prefix.push_str(&" ".repeat(*indent)),
            }
        }
        prefix
    }

    fn block_end(&mut self, breaks: usize) {
        self.pending = self.pending.max(breaks);
    }

    /// Writes the owed line breaks; blank lines carry the quote markers.
    fn flush(&mut self) {
        if self.pending == 0 {
            return;
        }
        if !self.out.is_empty() {
            let blank = self.prefix().trim_end().to_owned();
            let owed = if self.at_line_start {
                self.pending - 1
            } else {
                self.out.push('\n');
                self.pending - 1
            };
            for _ in 0..owed {
                self.out.push_str(&blank);
                self.out.push('\n');
            }
            self.at_line_start = true;
        }
        self.pending = 0;
    }

    fn start_line(&mut self) {
        if self.at_line_start {
            let prefix = self.prefix();
            self.out.push_str(&prefix);
            self.at_line_start = false;
        }
    }

    /// Writes text (escaped as the flavor needs), prefixing each new line.
    fn text(&mut self, text: &str) {
        self.flush();
        for (i, line) in text.split('\n').enumerate() {
            if i > 0 {
                self.out.push('\n');
                self.at_line_start = true;
            }
            if !line.is_empty() {
                self.start_line();
                let escaped = self.escape(line);
                self.out.push_str(&escaped);
            }
        }
    }

    /// Writes an opening tag (HTML only) where content would go.
    fn open(&mut self, tag: &str) {
        if self.html() {
            self.flush();
            self.start_line();
            self.out.push_str(tag);
        }
    }

    /// Writes a closing tag (HTML only) right after the content.
    fn close(&mut self, tag: &str) {
        if self.html() {
            self.out.push_str(tag);
        }
    }

    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => match &mut self.code {
                Some((body, _)) => body.push_str(&text),
                None => self.text(&text),
            },
            Event::Code(code) => {
                self.open("<code>");
                self.text(&code);
                self.close("</code>");
            }
            Event::Html(html) | Event::InlineHtml(html) => self.text(&html),
            Event::InlineMath(math) | Event::DisplayMath(math) => self.text(&math),
            Event::FootnoteReference(name) => self.text(&format!("[{name}]")),
            Event::SoftBreak | Event::HardBreak => self.text("\n"),
            Event::Rule => {
                self.flush();
                self.text("---");
                self.block_end(2);
            }
            Event::TaskListMarker(done) => self.text(if done { "[x] " } else { "[ ] " }),
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Heading { .. } => self.open("<b>"),
            Tag::BlockQuote(_) => {
                self.flush();
                self.quote_depth += 1;
                if self.quote_depth == 1 {
                    self.open("<blockquote>");
                }
                self.containers.push(Container::Quote);
            }
            Tag::CodeBlock(kind) => {
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => info
                        .split(|c: char| c.is_whitespace() || c == ',' || c == '{')
                        .next()
                        .filter(|l| !l.is_empty())
                        .map(str::to_owned),
                    CodeBlockKind::Indented => None,
                };
                self.flush();
                self.code = Some((String::new(), lang));
            }
            Tag::List(first) => {
                self.lists.push(first);
                // A nested list starts on the line after its parent item.
                if !self.out.is_empty() {
                    self.block_end(1);
                }
            }
            Tag::Item => {
                self.flush();
                self.start_line();
                let html = self.html();
                let marker = match self.lists.last_mut() {
                    Some(Some(number)) => {
                        let marker = format!("{number}. ");
                        *number += 1;
                        marker
                    }
                    _ if html => "• ".to_owned(),
                    _ => "- ".to_owned(),
                };
                self.out.push_str(&marker);
                self.containers.push(Container::Item {
                    indent: marker.chars().count(),
                });
            }
            Tag::Emphasis => self.open("<i>"),
            Tag::Strong => self.open("<b>"),
            Tag::Strikethrough => self.open("<s>"),
            Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. } => {
                let anchor = self.html() && is_linkable(&dest_url);
                if anchor {
                    self.open(&format!("<a href=\"{}\">", escape_attr(&dest_url)));
                } else {
                    self.flush();
                    self.start_line();
                }
                self.links.push(LinkState {
                    dest: dest_url.into_string(),
                    text_start: self.out.len(),
                    anchor,
                });
            }
            Tag::TableHead => {
                self.flush();
                self.table_cell = 0;
                self.open("<b>");
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
                self.close("</b>");
                self.block_end(2);
            }
            TagEnd::BlockQuote(_) => {
                self.containers.pop();
                if self.quote_depth == 1 {
                    self.close("</blockquote>");
                }
                self.quote_depth = self.quote_depth.saturating_sub(1);
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
            TagEnd::Emphasis => self.close("</i>"),
            TagEnd::Strong => self.close("</b>"),
            TagEnd::Strikethrough => self.close("</s>"),
            TagEnd::Link | TagEnd::Image => self.end_link(),
            TagEnd::TableHead => {
                self.close("</b>");
                self.block_end(1);
            }
            TagEnd::TableRow => self.block_end(1),
            _ => {}
        }
    }

    fn end_code_block(&mut self) {
        let Some((body, lang)) = self.code.take() else {
            return;
        };
        let body = body.strip_suffix('\n').unwrap_or(&body);
        match self.flavor {
            Flavor::Html => {
                let (open, close) = match lang {
                    Some(lang) => (
                        format!("<pre><code class=\"language-{}\">", escape_attr(&lang)),
                        "</code></pre>",
                    ),
                    None => ("<pre>".to_owned(), "</pre>"),
                };
                self.open(&open);
                // Inside <pre> the text is verbatim: no list indentation.
                self.out.push_str(&escape_html(body));
                self.close(close);
            }
            Flavor::Plain => {
                self.flush();
                for (i, line) in body.split('\n').enumerate() {
                    if i > 0 {
                        self.out.push('\n');
                        self.at_line_start = true;
                    }
                    if line.is_empty() {
                        continue;
                    }
                    self.start_line();
                    self.out.push_str(line);
                }
            }
        }
        self.block_end(2);
    }

    fn end_link(&mut self) {
        let Some(link) = self.links.pop() else {
            return;
        };
        let empty = self.out.len() == link.text_start;
        if link.anchor {
            if empty {
                let shown = escape_html(&link.dest);
                self.out.push_str(&shown);
            }
            self.close("</a>");
            return;
        }
        let shown = self.escape(&link.dest);
        let text = self.out.get(link.text_start..).unwrap_or_default();
        let same = text == shown || format!("mailto:{text}") == shown;
        if empty {
            self.out.push_str(&shown);
        } else if !same && !link.dest.is_empty() {
            self.out.push_str(&format!(" ({shown})"));
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

    fn plain(markdown: &str) -> String {
        PlainText.render(markdown)
    }

    fn html(markdown: &str) -> String {
        let out = TelegramHtml.render(markdown);
        assert_balanced(&out);
        out
    }

    /// Asserts that every tag in `html` is one Telegram knows and that tags
    /// are closed in order. Text is escaped, so every `<` starts a tag.
    fn assert_balanced(html: &str) {
        const ALLOWED: [&str; 7] = ["b", "i", "s", "code", "pre", "a", "blockquote"];
        let mut stack: Vec<String> = Vec::new();
        let mut rest = html;
        while let Some(open) = rest.find('<') {
            let after = &rest[open + 1..];
            let Some(close) = after.find('>') else {
                panic!("unterminated tag in {html:?}");
            };
            let tag = &after[..close];
            assert!(!tag.contains('<'), "stray < in {html:?}");
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name), "misnested in {html:?}");
            } else {
                let name = tag.split(' ').next().unwrap_or_default();
                assert!(ALLOWED.contains(&name), "tag {name} in {html:?}");
                if name == "blockquote" {
                    assert!(
                        !stack.iter().any(|t| t == "blockquote"),
                        "nested quote in {html:?}"
                    );
                }
                stack.push(name.to_owned());
            }
            rest = &after[close + 1..];
        }
        assert!(!rest.contains('>'), "stray > in {html:?}");
        assert!(stack.is_empty(), "unclosed {stack:?} in {html:?}");
    }

    const SAMPLE: &str = r#"# Release *notes* for `v1.0`

Some **bold with *nested italic* and ~~strike~~** text, a [link](https://example.com/?a=1&b="2") and <b>raw html</b> & more.

> A quote with **bold**
> and a second line
>
> > nested quote

- item one
- item *two*
  - nested `code`
  - nested [docs](./docs.md)
- [ ] task

3. third
4. fourth

```rust
fn main() {
    if a < b && c > d { println!("<>&"); }
}
```

    indented code <x>

| Name | Value |
| ---- | ----- |
| a    | 1 < 2 |

---

Line one
Line two  
after hard break <https://auto.link/x> and mail <me@example.com>.
"#;

    #[test]
    fn escape_html_touches_only_lt_gt_amp() {
        assert_eq!(
            escape_html(r#"<a href="x">&'</a>"#),
            r#"&lt;a href="x"&gt;&amp;'&lt;/a&gt;"#
        );
        assert_eq!(escape_html("plain 日本語 😀"), "plain 日本語 😀");
        assert_eq!(escape_attr(r#"a"b<c>&"#), "a&quot;b&lt;c&gt;&amp;");
    }

    #[test]
    fn renderers_are_trait_objects() {
        let renderers: Vec<Box<dyn MarkupRenderer>> =
            vec![Box::new(PlainText), Box::new(TelegramHtml)];
        for renderer in &renderers {
            assert_eq!(renderer.render("hello"), "hello");
            assert_eq!(renderer.render(""), "");
        }
    }

    #[test]
    fn plain_strips_emphasis_and_keeps_paragraphs() {
        assert_eq!(
            plain(
                "# Title\n\nSome *emph* and **strong _nested ~~deep~~_** text.\n\nSecond paragraph."
            ),
            "Title\n\nSome emph and strong nested deep text.\n\nSecond paragraph."
        );
        assert_eq!(plain("a\nb  \nc"), "a\nb\nc");
        assert_eq!(plain("Use `x < y` here."), "Use x < y here.");
    }

    #[test]
    fn plain_lists() {
        assert_eq!(plain("- a\n- b\n\n1. x\n2. y"), "- a\n- b\n\n1. x\n2. y");
        assert_eq!(plain("- a\n  - b\n  - c\n- d"), "- a\n  - b\n  - c\n- d");
        assert_eq!(plain("7. seven\n8. eight"), "7. seven\n8. eight");
        assert_eq!(plain("- one\n\n- two"), "- one\n\n- two");
        assert_eq!(plain("- [x] done\n- [ ] todo"), "- [x] done\n- [ ] todo");
        assert_eq!(
            plain("Intro:\n\n- a\n- b\n\nAfter."),
            "Intro:\n\n- a\n- b\n\nAfter."
        );
    }

    #[test]
    fn plain_links() {
        assert_eq!(
            plain("See [the docs](https://x.y/a?b=1&c=(2)) now."),
            "See the docs (https://x.y/a?b=1&c=(2)) now."
        );
        assert_eq!(plain("<https://x.y/z>"), "https://x.y/z");
        assert_eq!(plain("<me@x.y>"), "me@x.y");
        assert_eq!(
            plain("![a cat](https://x.y/cat.png)"),
            "a cat (https://x.y/cat.png)"
        );
        assert_eq!(plain("[](https://x.y)"), "https://x.y");
    }

    #[test]
    fn plain_code_blocks_are_verbatim() {
        let code = "fn a() {\n    1 < 2 && 3 > 2 // *not emphasis*\n\n}";
        assert_eq!(
            plain(&format!("Before:\n\n```rust\n{code}\n```\n\nAfter.")),
            format!("Before:\n\n{code}\n\nAfter.")
        );
        assert_eq!(
            plain("- item\n\n  ```\n  code\n    more\n  ```"),
            "- item\n\n  code\n    more"
        );
    }

    #[test]
    fn plain_quotes_and_tables() {
        assert_eq!(
            plain("> quoted\n> more\n>\n> again"),
            "> quoted\n> more\n>\n> again"
        );
        assert_eq!(plain("| a | b |\n|---|---|\n| 1 | 2 |"), "a | b\n1 | 2");
    }

    #[test]
    fn plain_sample() {
        let out = plain(SAMPLE);
        assert!(
            out.starts_with(
                "Release notes for v1.0\n\nSome bold with nested italic and strike text"
            )
        );
        assert!(out.contains("a link (https://example.com/?a=1&b=\"2\")"));
        assert!(out.contains("<b>raw html</b> & more"));
        assert!(out.contains("    if a < b && c > d { println!(\"<>&\"); }"));
        assert!(out.contains("  - nested docs (./docs.md)"));
        assert!(out.contains("> > nested quote"));
        assert!(out.contains("3. third\n4. fourth"));
        assert!(!out.contains("**") && !out.contains("```") && !out.contains("~~"));
    }

    #[test]
    fn html_inline_formatting_nests() {
        assert_eq!(
            html("**bold *nested italic* ~~strike~~** and _it **b**_"),
            "<b>bold <i>nested italic</i> <s>strike</s></b> and <i>it <b>b</b></i>"
        );
        assert_eq!(html("`a<b>&c`"), "<code>a&lt;b&gt;&amp;c</code>");
        assert_eq!(html("1 < 2 & 3 > 2"), "1 &lt; 2 &amp; 3 &gt; 2");
        assert_eq!(
            html("<script>alert(1)</script>"),
            "&lt;script&gt;alert(1)&lt;/script&gt;"
        );
    }

    #[test]
    fn html_code_blocks() {
        assert_eq!(
            html("```rust\nif a < b && c > d {}\n```"),
            "<pre><code class=\"language-rust\">if a &lt; b &amp;&amp; c &gt; d {}</code></pre>"
        );
        assert_eq!(html("```\n<x>\n\n  y\n```"), "<pre>&lt;x&gt;\n\n  y</pre>");
        assert_eq!(
            html("```c\"><b>\nx\n```"),
            "<pre><code class=\"language-c&quot;&gt;&lt;b&gt;\">x</code></pre>"
        );
    }

    #[test]
    fn html_links() {
        assert_eq!(
            html(r#"[a "quoted" <b> & c](https://ex.com/?q="x"&y=<z>)"#),
            "<a href=\"https://ex.com/?q=&quot;x&quot;&amp;y=&lt;z&gt;\">a \"quoted\" &lt;b&gt; &amp; c</a>"
        );
        assert_eq!(
            html("<https://x.y/z?a&b>"),
            "<a href=\"https://x.y/z?a&amp;b\">https://x.y/z?a&amp;b</a>"
        );
        assert_eq!(html("[file](./x.md)"), "file (./x.md)");
        assert_eq!(
            html("[js](javascript:alert(1))"),
            "js (javascript:alert(1))"
        );
        assert_eq!(
            html("[**bold** link](https://x.y)"),
            "<a href=\"https://x.y\"><b>bold</b> link</a>"
        );
        assert_eq!(
            html("[](https://x.y)"),
            "<a href=\"https://x.y\">https://x.y</a>"
        );
    }

    #[test]
    fn html_blocks() {
        assert_eq!(html("# Title\n\ntext"), "<b>Title</b>\n\ntext");
        assert_eq!(
            html("- a\n- b\n  - c\n\n1. x\n2. y"),
            "• a\n• b\n  • c\n\n1. x\n2. y"
        );
        assert_eq!(
            html("> quote\n> more"),
            "<blockquote>quote\nmore</blockquote>"
        );
        assert_eq!(
            html("> outer\n>\n> > inner"),
            "<blockquote>outer\n\ninner</blockquote>"
        );
        assert_eq!(
            html("| a | b |\n|---|---|\n| 1 | 2 |"),
            "<b>a | b</b>\n1 | 2"
        );
    }

    #[test]
    fn html_sample_is_balanced() {
        let out = html(SAMPLE);
        assert!(out.starts_with("<b>Release <i>notes</i> for <code>v1.0</code></b>\n\n"));
        assert!(out.contains("&lt;b&gt;raw html&lt;/b&gt; &amp; more"));
        assert!(out.contains(
            "<pre><code class=\"language-rust\">fn main() {\n    if a &lt; b &amp;&amp; c &gt; d"
        ));
        assert!(out.contains("<pre>indented code &lt;x&gt;</pre>"));
        assert!(out.contains("nested docs (./docs.md)"));
        assert!(out.contains("3. third\n4. fourth"));
        // Cut anywhere, each piece of Markdown still renders balanced.
        for (i, _) in SAMPLE.char_indices() {
            html(&SAMPLE[..i]);
            html(&SAMPLE[i..]);
        }
    }
}
