//! What a streamed answer has shown of a turn's text, so that the text a
//! client accumulates is exactly the turn's visible reply
//! (`Store::api().visible_reply`): the text of every model call, a later
//! call's after a blank line.
//!
//! A model call that fails after sending text and is retried (or handed to
//! the fallback model) starts over: its retried text is held while it
//! repeats what was shown, and only what goes beyond it is sent. A retried
//! text that departs from what was shown cannot be taken back: the stream
//! then ends with an error (`stream_diverged`) instead of text the stored
//! reply does not have, and the reply can be read back whole.

use crate::agent::live::LiveEvent;
use crate::store::VISIBLE_SEPARATOR;

/// The text a streamed answer has shown, and of its current model call.
#[derive(Debug, Default)]
pub struct Shown {
    /// Every piece of text sent, separators included.
    sent: String,
    /// The text sent of the current model call.
    round: String,
    /// Whether the current model call has sent no text yet.
    fresh: bool,
    /// After a restart: the retried call's text so far, held while it
    /// repeats `round`.
    replay: Option<String>,
    /// A retried call's text departed from what was shown.
    diverged: bool,
}

/// The streamed text and the turn's visible reply disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Diverged;

impl Shown {
    /// The text to send for a live event, if any.
    pub fn text(&mut self, event: &LiveEvent) -> Option<String> {
        match event {
            LiveEvent::Round { .. } => {
                self.round.clear();
                self.fresh = true;
                self.replay = None;
                None
            }
            LiveEvent::Restart if self.round.is_empty() => None,
            LiveEvent::Restart => {
                self.replay = Some(String::new());
                None
            }
            LiveEvent::Text(text) => self.piece(text),
            _ => None,
        }
    }

    /// A piece of the current model call's text.
    fn piece(&mut self, text: &str) -> Option<String> {
        if self.diverged {
            return None;
        }
        if let Some(replay) = &mut self.replay {
            replay.push_str(text);
            if self.round.starts_with(replay.as_str()) {
                return None;
            }
            let Some(beyond) = replay.strip_prefix(self.round.as_str()) else {
                self.diverged = true;
                return None;
            };
            let beyond = beyond.to_owned();
            self.round.push_str(&beyond);
            self.sent.push_str(&beyond);
            self.replay = None;
            return Some(beyond);
        }
        let separator = if self.fresh && !self.sent.is_empty() {
            VISIBLE_SEPARATOR
        } else {
            ""
        };
        self.fresh = false;
        self.round.push_str(text);
        let piece = format!("{separator}{text}");
        self.sent.push_str(&piece);
        Some(piece)
    }

    /// What is left to send of the turn's visible reply: nothing when the
    /// stream showed all of it, the missing end when it showed a beginning,
    /// the whole reply when it showed nothing (a turn run by another
    /// instance, a retry joining a turn).
    ///
    /// # Errors
    /// [`Diverged`] when what was shown is not the beginning of the reply.
    pub fn rest_of(&self, visible: &str) -> Result<Option<String>, Diverged> {
        if self.diverged {
            return Err(Diverged);
        }
        let rest = visible.strip_prefix(self.sent.as_str()).ok_or(Diverged)?;
        Ok((!rest.is_empty()).then(|| rest.to_owned()))
    }

    /// What is left to send of a parked turn, whose reply for now is the
    /// request it waits for (`request`): the request after what was shown
    /// of the model's text (a blank line between), or only its missing end
    /// when what was shown is its beginning (a retry joining the turn).
    #[must_use]
    pub fn rest_of_parked(&self, request: &str) -> Option<String> {
        match self.rest_of(request) {
            Ok(rest) => rest,
            Err(Diverged) if self.sent.is_empty() => {
                (!request.is_empty()).then(|| request.to_owned())
            }
            Err(Diverged) => Some(format!("{VISIBLE_SEPARATOR}{request}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parked_turns_request_follows_the_shown_text() {
        let mut shown = Shown::default();
        assert_eq!(
            shown.rest_of_parked("Approval needed"),
            Some("Approval needed".to_owned())
        );
        feed(
            &mut shown,
            &[LiveEvent::Round { round: 1 }, text("Let me look.")],
        );
        assert_eq!(
            shown.rest_of_parked("Approval needed"),
            Some("\n\nApproval needed".to_owned())
        );
    }

    /// Feeds `events`; returns the text they sent.
    fn feed(shown: &mut Shown, events: &[LiveEvent]) -> String {
        events
            .iter()
            .filter_map(|event| shown.text(event))
            .collect()
    }

    fn text(piece: &str) -> LiveEvent {
        LiveEvent::Text(piece.to_owned())
    }

    #[test]
    fn the_text_of_every_model_call_is_shown_a_blank_line_apart() {
        let mut shown = Shown::default();
        let sent = feed(
            &mut shown,
            &[
                LiveEvent::Round { round: 1 },
                text("Let me"),
                text(" check."),
                LiveEvent::Round { round: 2 },
                text("It is 4."),
                LiveEvent::Finished,
            ],
        );
        assert_eq!(sent, "Let me check.\n\nIt is 4.");
        assert_eq!(shown.rest_of("Let me check.\n\nIt is 4."), Ok(None));
        assert_eq!(
            shown.rest_of("Let me check.\n\nIt is 4. Done."),
            Ok(Some(" Done.".to_owned()))
        );
        assert_eq!(shown.rest_of("It is 4."), Err(Diverged));
        assert_eq!(
            Shown::default().rest_of("echo: hi"),
            Ok(Some("echo: hi".to_owned()))
        );
        assert_eq!(Shown::default().rest_of(""), Ok(None));
    }

    #[test]
    fn a_retried_call_continues_from_what_was_shown() {
        let mut shown = Shown::default();
        let sent = feed(
            &mut shown,
            &[
                LiveEvent::Round { round: 1 },
                text("Hello wor"),
                LiveEvent::Restart,
                text("Hel"),
                text("lo w"),
                text("orld."),
            ],
        );
        assert_eq!(sent, "Hello world.", "never repeated, never garbled");
        assert_eq!(shown.rest_of("Hello world."), Ok(None));
    }

    #[test]
    fn a_retried_call_that_departs_from_what_was_shown_diverges() {
        let mut shown = Shown::default();
        let sent = feed(
            &mut shown,
            &[
                LiveEvent::Round { round: 1 },
                text("Hello wor"),
                LiveEvent::Restart,
                text("Hi there."),
            ],
        );
        assert_eq!(sent, "Hello wor");
        assert_eq!(shown.rest_of("Hi there."), Err(Diverged));
    }
}
