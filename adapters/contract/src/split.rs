//! Splitting a reply to a platform's length limit without breaking code fences.
//!
//! Platforms cap the length of one message and count it differently: Telegram
//! in UTF-16 code units (4096), Discord in characters (2000), Feishu in bytes.
//! [`split_message`] cuts a Markdown reply into chunks that each fit the limit
//! in the platform's [`LengthUnit`], preferring to cut where a reader would not
//! notice:
//!
//! 1. at a paragraph boundary (after a blank line),
//! 2. at a line boundary,
//! 3. after whitespace,
//! 4. between two extended grapheme clusters, the symbols a reader sees, as
//!    `unicode-segmentation` finds them (so never inside an emoji ZWJ
//!    sequence, a flag, a keycap or a letter and its combining marks),
//! 5. between any two characters.
//!
//! Text is never cut inside a UTF-8 character, so never inside a UTF-16
//! surrogate pair either. A cut at levels 1–3 is only taken if it fills at
//! least half the chunk; otherwise a lower level that fills more is tried
//! first, and only when none exists is a short chunk accepted.
//!
//! Fenced code blocks stay valid Markdown: when a chunk ends inside a block,
//! the chunk is closed with a fence line of the same character and length, and
//! the next chunk reopens the block with a copy of the original opening line
//! (so ```` ```rust ```` keeps its language). These added lines count toward
//! the limit. Fence lines are the ones `pulldown-cmark`, the parser of
//! [`crate::markdown`], reads as such (three or more backticks or tildes after
//! at most three spaces; a closing line of the same character, at least as
//! long, without an info string). It reads each line as at the top level of a
//! document, given the fence open before it, so that a chunk starting at any
//! line reads its fences as the whole text does: fences inside block quotes or
//! after a list marker (`> ````, `- ````) are not recognised, a fence
//! indented under a list item is.
//!
//! At each cut, whitespace ending the earlier chunk and line breaks starting
//! the later one are dropped; apart from that and the added fence lines, the
//! chunks concatenate back to the original text. Whitespace-only input yields
//! no chunks.
//!
//! When the limit is too small for the fence overhead (it cannot hold the
//! reopening line, one character and the closing line), that chunk is cut
//! without fence repair; when it is smaller than a single character, that
//! character forms a chunk of its own and exceeds the limit. Splitting always
//! makes progress and never panics.

use std::ops::Range;

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use unicode_segmentation::UnicodeSegmentation;

use crate::markdown::parser_options;

/// How a platform measures message length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthUnit {
    /// Unicode scalar values (`char`s), e.g. Discord.
    Chars,
    /// UTF-16 code units: characters outside the Basic Multilingual Plane
    /// (most emoji) count twice, e.g. Telegram.
    Utf16,
    /// UTF-8 bytes, e.g. Feishu.
    Bytes,
}

impl LengthUnit {
    /// The length of `text` in this unit.
    #[must_use]
    pub fn measure(self, text: &str) -> usize {
        match self {
            Self::Chars => text.chars().count(),
            Self::Utf16 => text.encode_utf16().count(),
            Self::Bytes => text.len(),
        }
    }

    fn char_width(self, c: char) -> usize {
        match self {
            Self::Chars => 1,
            Self::Utf16 => c.len_utf16(),
            Self::Bytes => c.len_utf8(),
        }
    }
}

/// Splits `text` into chunks of at most `limit` units each, keeping fenced
/// code blocks balanced in every chunk.
///
/// Returns an empty vector for empty or whitespace-only input; otherwise every
/// chunk is non-empty and does not start or end with a line break. See the
/// [module documentation](self) for where cuts are made and for the behaviour
/// with very small limits.
///
/// ```
/// use switchboard_contract::split::{LengthUnit, split_message};
///
/// let reply = format!("Here:\n\n```rust\n{}```", "let x = 1;\n".repeat(6));
/// let chunks = split_message(&reply, 40, LengthUnit::Utf16);
/// assert!(chunks.len() > 1);
/// for chunk in &chunks[1..] {
///     assert!(chunk.starts_with("```rust\n"));
/// }
/// assert!(chunks.iter().all(|c| LengthUnit::Utf16.measure(c) <= 40));
/// ```
#[must_use]
pub fn split_message(text: &str, limit: usize, unit: LengthUnit) -> Vec<String> {
    let doc = Doc::new(text, limit, unit);
    doc.plan().iter().map(|piece| doc.render(piece)).collect()
}

/// Splits `text` like [`split_message`], into chunks that also satisfy
/// `fits`: for a platform that measures a chunk after converting it (to HTML,
/// into a JSON request body), so each chunk is as full as the converted form
/// allows instead of cut at a guessed smaller limit.
///
/// Each chunk is the one [`split_message`] would cut at the largest limit (at
/// most `limit`, found by bisection) whose chunk `fits`; the usual preference
/// for paragraph and line boundaries filling at least half that limit holds.
/// When even a one-unit limit gives a chunk that does not fit, that chunk is
/// returned anyway, so splitting always makes progress. `fits` should grow
/// no more lenient as a chunk grows (a longer text converts to a longer
/// form); where it does not hold, a chunk may end a little short.
///
/// ```
/// use switchboard_contract::split::{LengthUnit, split_message_fitting};
///
/// // Every `<` costs four units once escaped as `&lt;`.
/// let text = "a < b\n\n".repeat(200);
/// let escaped = |chunk: &str| chunk.replace('<', "&lt;");
/// let chunks = split_message_fitting(&text, 100, LengthUnit::Utf16, &|c| escaped(c).len() <= 100);
/// assert!(chunks.iter().all(|c| escaped(c).len() <= 100));
/// // All but the last are more than half full once escaped.
/// assert!(chunks[..chunks.len() - 1].iter().all(|c| escaped(c).len() > 50));
/// ```
#[must_use]
pub fn split_message_fitting(
    text: &str,
    limit: usize,
    unit: LengthUnit,
    fits: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let doc = Doc::new(text, limit, unit);
    doc.plan_fitting(fits)
        .iter()
        .map(|piece| doc.render(piece))
        .collect()
}

/// A fenced code block's opening line and the line that closes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fence {
    /// The opening line as written (indentation, fence, info string), without
    /// its line break or trailing whitespace.
    opener: String,
    /// The indentation and fence characters of the opening line.
    closer: String,
}

/// The fence `line` (without its line break) opens, if pulldown-cmark reads
/// it as the opening line of a fenced code block.
fn opening_fence(line: &str) -> Option<Fence> {
    if !might_be_fence(line) {
        return None;
    }
    let (event, range) = Parser::new_ext(line, parser_options())
        .into_offset_iter()
        .next()?;
    if !matches!(
        event,
        Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_)))
    ) {
        return None;
    }
    // The block starts at its fence, after the indentation.
    let (indent, fence) = line.split_at_checked(range.start)?;
    let marker = fence.chars().next()?;
    let markers = fence.strip_suffix(fence.trim_start_matches(marker))?;
    Some(Fence {
        opener: line.trim_end().to_owned(),
        closer: format!("{indent}{markers}"),
    })
}

/// Whether pulldown-cmark reads `line` (without its line break), right after
/// the opening line of `fence`, as the line that closes it.
fn closes_fence(fence: &Fence, line: &str) -> bool {
    if !might_be_fence(line) {
        return false;
    }
    let block = format!("{}\n{line}", fence.opener);
    // The block's content is the line unless the line closes it.
    let mut content = false;
    for event in Parser::new_ext(&block, parser_options()) {
        match event {
            Event::Text(_) => content = true,
            Event::End(TagEnd::CodeBlock) => return !content,
            _ => {}
        }
    }
    false
}

/// Whether `line` (without its line break), read on a line of its own, is a
/// fence line: with `open` the fence open before it, whether it closes that
/// fence; otherwise whether it opens one.
fn reads_as_fence(open: Option<&Fence>, line: &str) -> bool {
    match open {
        Some(fence) => closes_fence(fence, line),
        None => opening_fence(line).is_some(),
    }
}

/// A cheap necessary condition that spares the parser most lines: a fence
/// line starts with three backticks or tildes after its indentation.
fn might_be_fence(line: &str) -> bool {
    let body = line.trim_start_matches([' ', '\t']);
    body.starts_with("```") || body.starts_with("~~~")
}

/// One line of the text and the fence state around it.
#[derive(Debug, Clone)]
struct Line {
    start: usize,
    /// End of the line's content, before `\r\n` or `\n`.
    content_end: usize,
    /// Index of the fence open before this line, if any.
    before: Option<usize>,
    /// Index of the fence open after this line, if any.
    after: Option<usize>,
    blank: bool,
    /// Whether this line opens or closes a fence.
    fence_line: bool,
}

/// Splits `text` into lines and tracks which code fence is open around each.
///
/// Each line is read as pulldown-cmark reads it at the top level of a
/// document, given the fence open before it, so a chunk starting at any line
/// reads its fences as the whole text does.
fn scan(text: &str) -> (Vec<Line>, Vec<Fence>) {
    let mut lines = Vec::new();
    let mut fences: Vec<Fence> = Vec::new();
    let mut open: Option<usize> = None;
    let mut start = 0;
    while start < text.len() {
        let end = text[start..]
            .find('\n')
            .map_or(text.len(), |i| start + i + 1);
        let content = text[start..end].trim_end_matches(['\n', '\r']);
        let before = open;
        let mut fence_line = false;
        match open.and_then(|i| fences.get(i)) {
            Some(fence) => {
                if closes_fence(fence, content) {
                    open = None;
                    fence_line = true;
                }
            }
            None => {
                if let Some(fence) = opening_fence(content) {
                    fences.push(fence);
                    open = Some(fences.len() - 1);
                    fence_line = true;
                }
            }
        }
        lines.push(Line {
            start,
            content_end: start + content.len(),
            before,
            after: open,
            blank: content.trim().is_empty(),
            fence_line,
        });
        start = end;
    }
    (lines, fences)
}

/// One planned chunk: an optional reopening fence line, a slice of the
/// original text, and an optional closing fence line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Piece {
    reopen: Option<usize>,
    content: Range<usize>,
    close: Option<usize>,
    /// Where the next chunk's search starts.
    next: usize,
}

/// How a cut position is chosen; lower levels are preferred.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Paragraph,
    Line,
    Whitespace,
    Grapheme,
    Char,
}

struct Doc<'a> {
    text: &'a str,
    limit: usize,
    unit: LengthUnit,
    /// `cum[b]` is the length in `unit` of `text[..b]`, for every char
    /// boundary `b` (bytes inside a character hold the value at its start).
    cum: Vec<usize>,
    lines: Vec<Line>,
    fences: Vec<Fence>,
    /// The byte offsets where extended grapheme clusters start, ascending.
    graphemes: Vec<usize>,
}

impl<'a> Doc<'a> {
    fn new(text: &'a str, limit: usize, unit: LengthUnit) -> Self {
        let mut cum = vec![0; text.len() + 1];
        let mut total = 0;
        for (i, c) in text.char_indices() {
            for slot in &mut cum[i..i + c.len_utf8()] {
                *slot = total;
            }
            total += unit.char_width(c);
        }
        cum[text.len()] = total;
        let (lines, fences) = scan(text);
        let graphemes = text.grapheme_indices(true).map(|(i, _)| i).collect();
        Self {
            text,
            limit,
            unit,
            cum,
            lines,
            fences,
            graphemes,
        }
    }

    fn fence(&self, index: Option<usize>) -> Option<&Fence> {
        index.and_then(|i| self.fences.get(i))
    }

    /// The line containing byte `p` (the last line starting at or before it).
    fn line_at(&self, p: usize) -> Option<&Line> {
        let n = self.lines.partition_point(|l| l.start <= p);
        n.checked_sub(1).and_then(|i| self.lines.get(i))
    }

    /// The index of the line starting exactly at `p`.
    fn line_starting_at(&self, p: usize) -> Option<usize> {
        let n = self.lines.partition_point(|l| l.start < p);
        (self.lines.get(n).is_some_and(|l| l.start == p)).then_some(n)
    }

    /// The fence open after reading `text[..p]`. A fence line takes effect
    /// once its content has been read completely.
    fn state_at(&self, p: usize) -> Option<usize> {
        let line = self.line_at(p)?;
        if p >= line.content_end {
            line.after
        } else {
            line.before
        }
    }

    fn opener_cost(&self, fence: Option<usize>) -> usize {
        self.fence(fence)
            .map_or(0, |f| self.unit.measure(&f.opener) + 1)
    }

    fn closer_cost(&self, fence: Option<usize>) -> usize {
        self.fence(fence)
            .map_or(0, |f| 1 + self.unit.measure(&f.closer))
    }

    fn skip_line_breaks(&self, p: usize) -> usize {
        let rest = &self.text[p..];
        p + rest.len() - rest.trim_start_matches(['\n', '\r']).len()
    }

    fn render(&self, piece: &Piece) -> String {
        let mut out = String::new();
        if let Some(fence) = self.fence(piece.reopen) {
            out.push_str(&fence.opener);
            out.push('\n');
        }
        out.push_str(&self.text[piece.content.clone()]);
        if let Some(fence) = self.fence(piece.close) {
            out.push('\n');
            out.push_str(&fence.closer);
        }
        out
    }

    fn plan(&self) -> Vec<Piece> {
        self.plan_with(|start| self.next_piece(start, self.limit))
    }

    /// Plans chunks of at most `self.limit` units each that also satisfy
    /// `fits` once rendered: each piece is the one cut at the largest limit
    /// (found by bisection) whose rendered chunk `fits`; when not even a
    /// one-unit limit gives such a piece, that piece is taken anyway.
    fn plan_fitting(&self, fits: &dyn Fn(&str) -> bool) -> Vec<Piece> {
        self.plan_with(|start| {
            let full = self.next_piece(start, self.limit);
            if fits(&self.render(&full)) {
                return full;
            }
            // Invariant: the piece cut at `low` fits (or `low` is 1), the
            // one cut at `high` does not.
            let (mut low, mut high) = (1, self.limit);
            let mut best = self.next_piece(start, 1);
            while high > low + 1 {
                let mid = low + (high - low) / 2;
                let piece = self.next_piece(start, mid);
                if fits(&self.render(&piece)) {
                    low = mid;
                    best = piece;
                } else {
                    high = mid;
                }
            }
            best
        })
    }

    fn plan_with(&self, next_piece: impl Fn(usize) -> Piece) -> Vec<Piece> {
        let mut pieces = Vec::new();
        let mut pos = 0;
        loop {
            pos = self.skip_line_breaks(pos);
            if self.text[pos..].chars().all(char::is_whitespace) {
                break;
            }
            let piece = next_piece(pos);
            // Every piece advances by at least one character.
            pos = piece.next.max(pos + 1);
            while !self.text.is_char_boundary(pos) {
                pos += 1;
            }
            if !piece.content.is_empty() {
                pieces.push(piece);
            }
        }
        pieces
    }

    /// The piece starting at `start` (not whitespace-only to the end).
    fn next_piece(&self, start: usize, limit: usize) -> Piece {
        let reopen = self.state_at(start);
        if let Some(piece) = self.try_piece(start, self.text.len(), reopen, true, limit) {
            return piece;
        }
        if let Some(piece) = self.search(start, reopen, true, limit) {
            return piece;
        }
        // The limit cannot hold the fence overhead: cut without repair.
        if let Some(piece) = self.search(start, None, false, limit) {
            return piece;
        }
        // The limit is smaller than the next character: it goes alone.
        let width = self.text[start..].chars().next().map_or(1, char::len_utf8);
        let end = start + width;
        let trimmed = start + self.text[start..end].trim_end().len();
        Piece {
            reopen: None,
            content: start..trimmed,
            close: None,
            next: end,
        }
    }

    /// The piece `start..p` (trimmed), if it is non-empty and fits `limit`.
    fn try_piece(
        &self,
        start: usize,
        p: usize,
        reopen: Option<usize>,
        fenced: bool,
        limit: usize,
    ) -> Option<Piece> {
        let end = start + self.text[start..p].trim_end().len();
        if end == start {
            return None;
        }
        // A block left open by the original text stays open at its end.
        let at_end = self.text[p..].trim_start().is_empty();
        let (reopen, close) = if fenced {
            (reopen, if at_end { None } else { self.state_at(p) })
        } else {
            (None, None)
        };
        let cost =
            self.opener_cost(reopen) + self.cum[end] - self.cum[start] + self.closer_cost(close);
        (cost <= limit).then_some(Piece {
            reopen,
            content: start..end,
            close,
            next: p,
        })
    }

    /// Finds the best cut after `start` for a chunk of at most `limit`
    /// units, trying each [`Level`] in order.
    fn search(
        &self,
        start: usize,
        reopen: Option<usize>,
        fenced: bool,
        limit: usize,
    ) -> Option<Piece> {
        let open_cost = if fenced { self.opener_cost(reopen) } else { 0 };
        let budget = limit.checked_sub(open_cost)?;
        let threshold = self.cum[start] + budget;
        // The furthest char boundary whose content alone fits the budget.
        let mut max_end = self
            .cum
            .partition_point(|&c| c <= threshold)
            .saturating_sub(1)
            .min(self.text.len());
        while !self.text.is_char_boundary(max_end) {
            max_end -= 1;
        }
        if max_end <= start {
            return None;
        }
        // Whitespace after it is trimmed from the chunk, so it costs nothing.
        max_end += self.text[max_end..].len() - self.text[max_end..].trim_start().len();
        let all = [
            Level::Paragraph,
            Level::Line,
            Level::Whitespace,
            Level::Grapheme,
            Level::Char,
        ];
        // First pass: only cuts filling at least half the limit, a lower
        // level's (inside a long word) before a short chunk; second pass:
        // any cut, in order of preference.
        for (half, levels) in [(true, &all[..]), (false, &all[..])] {
            for &level in levels {
                let candidates = std::iter::once(max_end).chain(
                    self.text[start..max_end]
                        .char_indices()
                        .rev()
                        .map(|(i, _)| start + i)
                        .filter(|&p| p > start),
                );
                for p in candidates {
                    if half && 2 * (open_cost + self.cum[p] - self.cum[start]) < limit {
                        break;
                    }
                    if !self.is_cut(p, level) {
                        continue;
                    }
                    if let Some(piece) = self.try_piece(start, p, reopen, fenced, limit) {
                        return Some(piece);
                    }
                }
            }
        }
        None
    }

    /// Whether `p` (a char boundary inside the text) is a cut of `level`.
    fn is_cut(&self, p: usize, level: Level) -> bool {
        let bytes = self.text.as_bytes();
        let line_start = p > 0 && bytes.get(p - 1) == Some(&b'\n');
        match level {
            Level::Paragraph | Level::Line => {
                if !line_start {
                    return p == self.text.len();
                }
                let Some(i) = self.line_starting_at(p) else {
                    return true;
                };
                let (Some(prev), Some(line)) =
                    (self.lines.get(i.wrapping_sub(1)), self.lines.get(i))
                else {
                    return false;
                };
                // Not right before a closing fence (the next chunk would
                // hold an empty block), nor right after an opening one.
                let before_closer = line.fence_line && line.before.is_some();
                let after_opener = prev.fence_line && prev.after.is_some();
                if before_closer || after_opener {
                    return false;
                }
                level == Level::Line || prev.blank
            }
            Level::Whitespace => {
                let prev = self.text[..p].chars().next_back();
                let next = self.text[p..].chars().next();
                prev.is_some_and(|c| c.is_whitespace() && c != '\n')
                    && next.is_some_and(|c| !c.is_whitespace())
                    && self.mid_line_ok(p)
            }
            Level::Grapheme => {
                p == self.text.len()
                    || (self.graphemes.binary_search(&p).is_ok() && self.mid_line_ok(p))
            }
            Level::Char => true,
        }
    }

    /// Whether a cut at `p` in the middle of a line leaves both halves read
    /// as they are in the whole line: never inside a fence line, and neither
    /// half becomes one.
    fn mid_line_ok(&self, p: usize) -> bool {
        let Some(line) = self.line_at(p) else {
            return true;
        };
        if p <= line.start || p >= line.content_end {
            return true;
        }
        if line.fence_line {
            return false;
        }
        let open = self.fence(line.before);
        !reads_as_fence(open, &self.text[p..line.content_end])
            && !reads_as_fence(open, &self.text[line.start..p])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL_UNITS: [LengthUnit; 3] = [LengthUnit::Chars, LengthUnit::Utf16, LengthUnit::Bytes];

    fn is_regional_indicator(c: char) -> bool {
        ('\u{1F1E6}'..='\u{1F1FF}').contains(&c)
    }

    /// Whether every fence opened in `chunk` is closed in it.
    fn balanced(chunk: &str) -> bool {
        let (lines, _) = scan(chunk);
        lines.last().is_none_or(|l| l.after.is_none())
    }

    /// The ways to read `chunk` with an added reopening and/or closing fence
    /// line removed.
    fn bodies(chunk: &str) -> Vec<&str> {
        let mut starts = vec![0];
        if let Some(nl) = chunk.find('\n')
            && reads_as_fence(None, &chunk[..nl])
        {
            starts.push(nl + 1);
        }
        let mut ends = vec![chunk.len()];
        if let Some(nl) = chunk.rfind('\n') {
            let last = chunk[nl + 1..].trim();
            let marker_only = last.len() >= 3
                && (last.chars().all(|c| c == '`') || last.chars().all(|c| c == '~'));
            if marker_only {
                ends.push(nl);
            }
        }
        let mut out = Vec::new();
        for &s in &starts {
            for &e in &ends {
                if s < e {
                    out.push(&chunk[s..e]);
                }
            }
        }
        out
    }

    /// Whether `chunks`, with added fence lines removed and whitespace allowed
    /// between them, concatenate to `original`.
    fn reassembles(original: &str, chunks: &[String]) -> bool {
        fn go(orig: &str, cur: usize, chunks: &[String]) -> bool {
            let Some((chunk, rest)) = chunks.split_first() else {
                return orig[cur..].trim().is_empty();
            };
            let gap_end = cur + orig[cur..].len() - orig[cur..].trim_start().len();
            for body in bodies(chunk) {
                for g in (cur..=gap_end).filter(|&g| orig.is_char_boundary(g)) {
                    if orig[g..].starts_with(body) && go(orig, g + body.len(), rest) {
                        return true;
                    }
                }
            }
            false
        }
        go(original, 0, chunks)
    }

    /// Checks the bound, non-emptiness, content preservation and (when
    /// `expect_balanced`) fence balance; returns the chunks.
    fn check(text: &str, limit: usize, unit: LengthUnit, expect_balanced: bool) -> Vec<String> {
        let chunks = split_message(text, limit, unit);
        for chunk in &chunks {
            assert!(!chunk.is_empty(), "empty chunk");
            assert!(!chunk.trim().is_empty(), "whitespace-only chunk {chunk:?}");
            if limit >= 4 {
                assert!(
                    unit.measure(chunk) <= limit,
                    "chunk of {} > {limit} {unit:?}: {chunk:?}",
                    unit.measure(chunk)
                );
            }
            if expect_balanced {
                assert!(
                    balanced(chunk),
                    "unbalanced chunk {chunk:?}\nlimit {limit} {unit:?}\ntext {text:?}"
                );
            }
        }
        assert!(
            reassembles(text, &chunks),
            "chunks do not reassemble\nlimit {limit} {unit:?}\ntext {text:?}\nchunks {chunks:#?}"
        );
        // The plan agrees with the rendered chunks: each close is reopened.
        let doc = Doc::new(text, limit, unit);
        let pieces = doc.plan();
        for pair in pieces.windows(2) {
            // With limits too small for the fence overhead, a later piece may
            // be cut without repair.
            if let [a, b] = pair
                && a.close.is_some()
                && (expect_balanced || b.reopen.is_some())
            {
                assert_eq!(a.close, b.reopen, "a closed fence is reopened");
            }
        }
        chunks
    }

    /// `chunk` with every `<` written as `&lt;`, as an HTML renderer would.
    fn escaped(chunk: &str) -> String {
        chunk.replace('<', "&lt;")
    }

    #[test]
    fn fitting_chunks_fill_the_converted_limit_at_paragraphs() {
        let paragraph = "x < y and y < z, so x < z. ".repeat(4);
        let text = format!("{paragraph}\n\n").repeat(40);
        let limit = 500;
        let fits = |chunk: &str| escaped(chunk).len() <= limit;
        let chunks = split_message_fitting(&text, limit, LengthUnit::Bytes, &fits);
        assert!(reassembles(&text, &chunks), "{chunks:#?}");
        let sizes: Vec<usize> = chunks.iter().map(|c| escaped(c).len()).collect();
        assert!(sizes.iter().all(|&size| size <= limit), "{sizes:?}");
        let (_, full) = sizes.split_last().expect("chunks");
        assert!(full.iter().all(|&size| 2 * size >= limit), "{sizes:?}");
        // Cut between paragraphs, never inside one.
        assert!(
            chunks.iter().all(|c| c.ends_with("z. ".trim_end())),
            "{chunks:#?}"
        );
    }

    #[test]
    fn fitting_keeps_code_fences_balanced() {
        let text = format!(
            "Intro.\n\n```rust\n{}```\n\nOutro.",
            "if a < b { go(); }\n".repeat(60)
        );
        let limit = 300;
        let fits = |chunk: &str| escaped(chunk).len() <= limit;
        let chunks = split_message_fitting(&text, limit, LengthUnit::Bytes, &fits);
        assert!(chunks.len() > 2);
        for chunk in &chunks {
            assert!(escaped(chunk).len() <= limit, "{chunk:?}");
            assert!(balanced(chunk), "{chunk:?}");
        }
        assert!(reassembles(&text, &chunks));
    }

    #[test]
    fn fitting_always_makes_progress() {
        // Nothing ever fits: each chunk is the smallest possible, and the
        // splitting still ends with all of the text.
        let text = "abc def\n\nghi";
        let chunks = split_message_fitting(text, 8, LengthUnit::Chars, &|_| false);
        assert_eq!(chunks.concat().replace([' ', '\n'], ""), "abcdefghi");
        for limit in 0..3 {
            let chunks = split_message_fitting(text, limit, LengthUnit::Chars, &|_| true);
            assert!(!chunks.is_empty());
        }
        assert!(split_message_fitting(" \n ", 10, LengthUnit::Chars, &|_| true).is_empty());
    }

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
            items[self.below(items.len())]
        }
    }

    const WORDS: [&str; 14] = [
        "hello",
        "world",
        "the",
        "gateway",
        "splits",
        "messages",
        "日本語",
        "中文字符",
        "😀",
        "👨‍👩‍👧",
        "🇫🇷🇩🇪",
        "é",
        "naïve",
        "x",
    ];

    fn words(rng: &mut Rng, n: usize) -> String {
        (0..n)
            .map(|_| rng.pick(&WORDS))
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn generate(rng: &mut Rng) -> String {
        let mut text = String::new();
        for _ in 0..rng.below(12) + 1 {
            match rng.below(9) {
                0..=2 => {
                    let n = rng.below(40) + 1;
                    text.push_str(&words(rng, n));
                    text.push_str("\n\n");
                }
                3 => {
                    for _ in 0..rng.below(5) + 1 {
                        text.push_str("- ");
                        let n = rng.below(10) + 1;
                        text.push_str(&words(rng, n));
                        text.push('\n');
                    }
                    text.push('\n');
                }
                4..=6 => {
                    let fence =
                        rng.pick(&["```", "```rust", "```python", "````md", "~~~", "  ```js"]);
                    text.push_str(fence);
                    text.push('\n');
                    for _ in 0..rng.below(15) {
                        let indent = rng.pick(&["", "    ", "\t"]);
                        text.push_str(indent);
                        if rng.below(4) == 0 && fence.starts_with("````") {
                            text.push_str("```inner");
                        } else {
                            let n = rng.below(12);
                            text.push_str(&words(rng, n));
                        }
                        text.push('\n');
                    }
                    if rng.below(8) != 0 {
                        let close = fence.trim().trim_end_matches(char::is_alphabetic);
                        text.push_str(close);
                        text.push('\n');
                    }
                    if rng.below(2) == 0 {
                        text.push('\n');
                    }
                }
                7 => {
                    let n = rng.below(300) + 1;
                    text.extend((0..n).map(|i| char::from(b'a' + (i % 26) as u8)));
                    text.push('\n');
                }
                _ => {
                    text.push_str("\r\n \n\n");
                }
            }
        }
        text
    }

    #[test]
    fn empty_and_whitespace_input_yield_no_chunks() {
        assert!(split_message("", 10, LengthUnit::Chars).is_empty());
        assert!(split_message(" \n\n\t \n", 10, LengthUnit::Chars).is_empty());
    }

    #[test]
    fn short_text_is_one_chunk() {
        let text = "Hello, **world**!\n\n```rust\nfn main() {}\n```";
        assert_eq!(
            split_message(text, 4096, LengthUnit::Utf16),
            vec![text.to_owned()]
        );
        // Surrounding blank lines are trimmed.
        assert_eq!(
            split_message("\n\nhi\n\n", 10, LengthUnit::Chars),
            vec!["hi".to_owned()]
        );
    }

    #[test]
    fn length_units_count_differently() {
        assert_eq!(LengthUnit::Chars.measure("a😀中"), 3);
        assert_eq!(LengthUnit::Utf16.measure("a😀中"), 4);
        assert_eq!(LengthUnit::Bytes.measure("a😀中"), 1 + 4 + 3);

        let emoji = "😀".repeat(10);
        assert_eq!(split_message(&emoji, 10, LengthUnit::Chars).len(), 1);
        let utf16 = check(&emoji, 10, LengthUnit::Utf16, true);
        assert_eq!(utf16, vec!["😀".repeat(5), "😀".repeat(5)]);
        let bytes = check(&emoji, 10, LengthUnit::Bytes, true);
        assert_eq!(bytes.len(), 5);
        assert!(bytes.iter().all(|c| c == "😀😀"));

        // An odd limit never cuts a surrogate pair.
        let odd = check(&emoji, 7, LengthUnit::Utf16, true);
        assert!(
            odd.iter()
                .all(|c| LengthUnit::Utf16.measure(c) == 6 || c == "😀")
        );

        let cjk = "中文".repeat(10);
        assert_eq!(split_message(&cjk, 20, LengthUnit::Chars).len(), 1);
        assert_eq!(split_message(&cjk, 20, LengthUnit::Utf16).len(), 1);
        let cjk_bytes = check(&cjk, 20, LengthUnit::Bytes, true);
        assert_eq!(cjk_bytes.len(), 4);
        assert!(cjk_bytes.iter().all(|c| c.len() <= 20 && c.len() % 3 == 0));
    }

    #[test]
    fn grapheme_sequences_stay_together_when_possible() {
        // A family emoji (5 chars, 8 UTF-16 units) and flags (2 chars each).
        let family = "👨‍👩‍👧";
        let text = format!("{}{}", family.repeat(3), "🇫🇷".repeat(3));
        let chunks = check(&text, 12, LengthUnit::Utf16, true);
        assert!(chunks.len() >= 3);
        for chunk in &chunks {
            let zwj = chunk.matches('\u{200D}').count();
            assert_eq!(zwj, 2 * chunk.matches(family).count(), "{chunk:?}");
            assert_eq!(
                chunk.chars().filter(|&c| is_regional_indicator(c)).count() % 2,
                0
            );
        }
    }

    #[test]
    fn prefers_paragraph_then_line_then_whitespace() {
        let text = "aaaa aaaa\n\nbbbb bbbb\ncccc cccc";
        assert_eq!(
            check(text, 25, LengthUnit::Chars, true),
            vec!["aaaa aaaa\n\nbbbb bbbb", "cccc cccc"]
        );
        // A paragraph break filling at least half the limit wins.
        assert_eq!(
            check(text, 22, LengthUnit::Chars, true),
            vec!["aaaa aaaa", "bbbb bbbb\ncccc cccc"]
        );
        assert_eq!(
            check(text, 12, LengthUnit::Chars, true),
            vec!["aaaa aaaa", "bbbb bbbb", "cccc cccc"]
        );
        assert_eq!(
            check(text, 6, LengthUnit::Chars, true),
            vec!["aaaa", "aaaa", "bbbb", "bbbb", "cccc", "cccc"]
        );
        // A paragraph break that would leave a small chunk loses to a line
        // break that fills it.
        let text = "short\n\nline one is here\nline two is here\nline three";
        assert_eq!(
            check(text, 40, LengthUnit::Chars, true),
            vec!["short\n\nline one is here\nline two is here", "line three"]
        );
    }

    #[test]
    fn discord_5000_chars_at_2000() {
        let mut rng = Rng(42);
        let mut text = String::new();
        while text.chars().count() < 5000 {
            let n = rng.below(60) + 5;
            text.push_str(&words(&mut rng, n));
            text.push_str(if rng.below(3) == 0 { "\n\n" } else { "\n" });
        }
        let text: String = text.chars().take(5000).collect();
        let chunks = check(&text, 2000, LengthUnit::Chars, true);
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().all(|c| c.chars().count() >= 1000));
    }

    #[test]
    fn telegram_10000_chars_with_code_blocks() {
        let langs = ["rust", "python", "js"];
        let mut text = String::new();
        let mut block = 0;
        while text.chars().count() < 10_000 {
            text.push_str("Some prose about the code 日本語 😀 follows here.\n\n");
            let lang = langs[block % langs.len()];
            text.push_str(&format!("```{lang}\n"));
            for i in 0..(20 + block * 17) {
                text.push_str(&format!("code {lang} line {i} 😀 with some padding text\n"));
                if i % 9 == 8 {
                    text.push('\n');
                }
            }
            text.push_str("```\n\n");
            block += 1;
        }
        assert!(text.chars().count() >= 10_000);
        let chunks = check(&text, 4096, LengthUnit::Utf16, true);
        assert!(chunks.len() >= 3);
        let mut reopened = 0;
        for chunk in &chunks {
            // Every code line sits in a block of its own language.
            let (lines, fences) = scan(chunk);
            for line in &lines {
                let content = &chunk[line.start..line.content_end];
                if let Some(lang) = content
                    .strip_prefix("code ")
                    .and_then(|r| r.split(' ').next())
                {
                    let fence = line.before.and_then(|i| fences.get(i));
                    assert_eq!(
                        fence.map(|f| f.opener.as_str()),
                        Some(format!("```{lang}").as_str())
                    );
                }
            }
            if chunk.starts_with("```") {
                reopened += 1;
            }
        }
        assert!(reopened >= 1, "some chunk reopens a block");
    }

    #[test]
    fn single_line_longer_than_limit() {
        let line = "word ".repeat(100);
        let chunks = check(&line, 48, LengthUnit::Chars, true);
        assert!(
            chunks
                .iter()
                .all(|c| !c.starts_with(' ') && !c.ends_with(' '))
        );
        assert!(chunks.iter().all(|c| c.split(' ').all(|w| w == "word")));

        let solid = "x".repeat(250);
        let chunks = check(&solid, 100, LengthUnit::Bytes, true);
        assert_eq!(
            chunks.iter().map(String::len).collect::<Vec<_>>(),
            [100, 100, 50]
        );
    }

    #[test]
    fn a_long_word_is_cut_inside_rather_than_leaving_short_chunks() {
        // No paragraph, line or whitespace cut fills half a chunk: the
        // word is cut where the chunk is full (an approval's long argument).
        let text = format!(
            "Intro line.\n\n```json\n{{\n  \"k\": \"{}\"\n}}\n```\n\nOutro.",
            "x".repeat(300)
        );
        let chunks = check(&text, 100, LengthUnit::Chars, true);
        let (last, full) = chunks.split_last().expect("chunks");
        assert!(
            full.iter().all(|c| 2 * c.chars().count() >= 100),
            "{chunks:?}"
        );
        assert!(
            chunks[0].starts_with("Intro line.\n\n```json\n{"),
            "{chunks:?}"
        );
        assert!(last.ends_with("Outro."), "{chunks:?}");
    }

    #[test]
    fn long_code_block_is_fenced_in_every_chunk() {
        let mut text = String::from("Intro.\n\n````python\n");
        for i in 0..60 {
            text.push_str(&format!("print({i})  # ```not a fence\n"));
        }
        text.push_str("````\n\nOutro.");
        let chunks = check(&text, 300, LengthUnit::Chars, true);
        assert!(chunks.len() >= 5);
        let middle = &chunks[1..chunks.len() - 1];
        for chunk in middle {
            assert!(chunk.starts_with("````python\n"), "{chunk:?}");
            assert!(chunk.ends_with("\n````"), "{chunk:?}");
        }
        assert!(chunks[0].starts_with("Intro."));
        assert!(chunks.last().is_some_and(|c| c.ends_with("Outro.")));
    }

    #[test]
    fn tilde_and_indented_fences() {
        let mut text = String::from("  ~~~\n");
        for i in 0..30 {
            text.push_str(&format!("  line {i}\n"));
        }
        text.push_str("  ~~~\nafter");
        let chunks = check(&text, 60, LengthUnit::Chars, true);
        assert!(chunks.len() > 2);
        assert!(chunks[1].starts_with("  ~~~\n"));
        // Indentation inside the block survives the cut.
        assert!(chunks[1]["  ~~~\n".len()..].starts_with("  line"));
    }

    #[test]
    fn unclosed_fence_is_closed_in_every_chunk_but_the_last() {
        let mut text = String::from("```sh\n");
        for i in 0..40 {
            text.push_str(&format!("echo {i}\n"));
        }
        let chunks = check(&text, 50, LengthUnit::Chars, false);
        assert!(chunks.iter().all(|c| c.starts_with("```sh\n")));
        // All but the last are closed by the splitter; the last is as unclosed
        // as the original.
        assert!(chunks[..chunks.len() - 1].iter().all(|c| balanced(c)));
    }

    #[test]
    fn tiny_limits_never_loop_or_panic() {
        let text = "```rust\nfn main() { println!(\"😀\"); }\n```\n\nend 中文";
        for unit in ALL_UNITS {
            for limit in 0..40 {
                let chunks = check(text, limit, unit, false);
                assert!(!chunks.is_empty());
            }
        }
        // Limit 1 with a two-unit character: it goes alone, over the limit.
        assert_eq!(
            split_message("😀😀", 1, LengthUnit::Utf16),
            vec!["😀", "😀"]
        );
    }

    #[test]
    fn generated_inputs_keep_the_invariants() {
        let mut rng = Rng(0x5eed_1234_abcd_0001);
        let limits = [1, 2, 3, 5, 8, 13, 21, 40, 64, 100, 150, 333, 1000];
        for round in 0..400 {
            let text = generate(&mut rng);
            let limit = limits[round % limits.len()];
            let unit = ALL_UNITS[rng.below(3)];
            // The generator's fence lines are short and its unbreakable runs
            // short enough that from 64 units on, cuts never need to break a
            // fence line; an unclosed block stays unclosed in the last chunk.
            let closed = scan(&text).0.last().is_none_or(|l| l.after.is_none());
            let chunks = check(&text, limit, unit, false);
            if limit >= 64 {
                let n = chunks.len();
                for (i, chunk) in chunks.iter().enumerate() {
                    if closed || i + 1 < n {
                        assert!(
                            balanced(chunk),
                            "unbalanced {chunk:?}\n{limit} {unit:?}\n{text:?}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn combining_marks_keycaps_and_skin_tones_stay_with_their_base() {
        // "e" + COMBINING ACUTE ACCENT: two chars, one symbol.
        let accented = "e\u{301}".repeat(6);
        let chunks = check(&accented, 5, LengthUnit::Chars, true);
        assert!(
            chunks.iter().all(|c| c == &"e\u{301}".repeat(2)),
            "{chunks:?}"
        );
        // A keycap (digit, variation selector, enclosing keycap) and a thumb
        // with a skin tone.
        let text = "1\u{FE0F}\u{20E3}👍🏽".repeat(3);
        let chunks = check(&text, 5, LengthUnit::Chars, true);
        for chunk in &chunks {
            assert!(
                chunk == "1\u{FE0F}\u{20E3}" || chunk == "👍🏽" || chunk == "1\u{FE0F}\u{20E3}👍🏽",
                "{chunk:?}"
            );
        }
    }

    #[test]
    fn flags_and_zwj_sequences_are_never_cut_apart() {
        let flags = "🇫🇷🇩🇪🇯🇵";
        let chunks = check(flags, 5, LengthUnit::Chars, true);
        assert_eq!(chunks, vec!["🇫🇷🇩🇪", "🇯🇵"]);
        // A family (5 chars) at a limit of 7 chars: one family per chunk.
        let family = "👨\u{200D}👩\u{200D}👧";
        let chunks = check(&family.repeat(3), 7, LengthUnit::Chars, true);
        assert_eq!(chunks, vec![family; 3]);
        // A sequence longer than the limit is cut between characters.
        let chunks = check(family, 3, LengthUnit::Chars, true);
        assert_eq!(chunks.concat(), family);
    }

    #[test]
    fn cjk_without_spaces_is_cut_between_any_two_characters() {
        let text = "日本語の文章".repeat(3);
        let chunks = check(&text, 7, LengthUnit::Chars, true);
        assert_eq!(
            chunks.iter().map(|c| c.chars().count()).collect::<Vec<_>>(),
            [7, 7, 4]
        );
        let chunks = check(&text, 10, LengthUnit::Bytes, true);
        assert!(chunks.iter().all(|c| c.len() == 9));
    }

    #[test]
    fn shorter_fences_inside_a_longer_block_are_content() {
        let mut text = String::from("````md\n");
        for i in 0..12 {
            text.push_str(&format!("```rust\nlet x = {i};\n```\n"));
        }
        text.push_str("````\nafter");
        let chunks = check(&text, 60, LengthUnit::Chars, true);
        assert!(chunks.len() > 2);
        for chunk in &chunks[1..chunks.len() - 1] {
            assert!(chunk.starts_with("````md\n"), "{chunk:?}");
            assert!(chunk.ends_with("\n````"), "{chunk:?}");
        }

        // Backticks inside a tilde block, too.
        let mut text = String::from("~~~\n");
        for _ in 0..12 {
            text.push_str("```\nquoted\n```\n");
        }
        text.push_str("~~~");
        let chunks = check(&text, 40, LengthUnit::Chars, true);
        assert!(chunks.len() > 2);
        assert!(chunks[1].starts_with("~~~\n") && chunks[1].ends_with("\n~~~"));
    }

    #[test]
    fn an_unclosed_tilde_fence_is_closed_with_tildes() {
        let text = format!("~~~~text\n{}", "a line\n".repeat(20));
        let chunks = check(&text, 40, LengthUnit::Chars, false);
        assert!(chunks.len() > 2);
        assert!(chunks.iter().all(|c| c.starts_with("~~~~text\n")));
        assert!(
            chunks[..chunks.len() - 1]
                .iter()
                .all(|c| c.ends_with("\n~~~~"))
        );
        assert!(!chunks[chunks.len() - 1].ends_with("~~~~"));
    }

    #[test]
    fn fences_are_read_as_commonmark_reads_them() {
        // Four spaces of indentation make an indented code line, not a
        // fence; a backtick fence's info string holds no backtick.
        for line in ["    ```", "\t```", "``` a`b", "``", "> ```", "- ```"] {
            assert!(opening_fence(line).is_none(), "{line:?}");
        }
        for line in ["```", "   ```rust", "~~~ a`b", "````"] {
            assert!(opening_fence(line).is_some(), "{line:?}");
        }
        let fence = opening_fence("  ````md  ").unwrap();
        assert_eq!(fence.opener, "  ````md");
        assert_eq!(fence.closer, "  ````");
        for line in ["````", "   `````  ", "  ````"] {
            assert!(closes_fence(&fence, line), "{line:?}");
        }
        for line in ["```", "    ````", "```` x", "~~~~"] {
            assert!(!closes_fence(&fence, line), "{line:?}");
        }
        // So an indented line of backticks is content, and the next
        // chunk is not reopened after the real closing line.
        let text = format!("```\n{}    ```\n```\nafter", "code\n".repeat(10));
        let chunks = check(&text, 30, LengthUnit::Chars, true);
        assert_eq!(chunks[2], "```\ncode\ncode\n    ```\n```");
        assert_eq!(chunks[3], "after");
    }
}
