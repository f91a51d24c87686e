//! Following one turn in the terminal: its text printed as the model writes
//! it (the turn's live events, `agent::live`), a spinner while the model
//! thinks or a tool runs, and the stored reply when the streamed text is not
//! it (a command's answer, a stopped turn, a turn run elsewhere). Ctrl-C
//! stops the turn as `/stop` does; a second one quits the chat. A turn that
//! parks shows what it waits for and is answered at the prompt (`press`).

use std::io::Write;
use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::oneshot;

use crate::agent::live::{LiveEvent, LiveSubscription};
use crate::domain::{InboundStatus, SessionId, StopCause};
use crate::session::runner::{Runner, TurnReply};

/// How following a turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Followed {
    /// The reply was shown.
    Shown,
    /// The turn parked: what it waits for was shown (a question, an
    /// approval), the reply comes once it is answered.
    Parked,
    /// No reply in time (or the runner dropped the wait): not shown.
    NotShown,
    /// Ctrl-C twice: the user quits.
    Quit,
}

const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// What is on the screen of the current turn.
struct Screen {
    /// Escape codes (spinner, erasing) only on a terminal.
    tty: bool,
    /// The spinner's label while it turns (`None`: text is being written).
    spinner: Option<String>,
    frame: usize,
    /// The text of the current model call so far.
    text: String,
    /// Whether the cursor is mid-line.
    mid_line: bool,
}

impl Screen {
    fn new(tty: bool) -> Self {
        Self {
            tty,
            spinner: None,
            frame: 0,
            text: String::new(),
            mid_line: false,
        }
    }

    fn write(&mut self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }

    /// Erases the spinner's line, if it shows.
    fn clear_spinner(&mut self) {
        if self.spinner.take().is_some() && self.tty {
            self.write("\r\x1b[2K");
        }
    }

    fn end_line(&mut self) {
        if self.mid_line {
            self.write("\n");
            self.mid_line = false;
        }
    }

    fn spin(&mut self, label: String) {
        self.end_line();
        if self.tty {
            self.spinner = Some(label);
            self.draw_spinner();
        } else if self.spinner.as_ref() != Some(&label) {
            self.write(&format!("[{label}]\n"));
            self.spinner = Some(label);
        }
    }

    fn draw_spinner(&mut self) {
        if let (true, Some(label)) = (self.tty, self.spinner.clone()) {
            self.frame = (self.frame + 1) % FRAMES.len();
            let frame = FRAMES[self.frame];
            self.write(&format!("\r\x1b[2K\x1b[2m{frame} {label}\x1b[0m"));
        }
    }

    /// Prints a line of its own (after the text so far).
    fn note(&mut self, note: &str) {
        let spinner = self.spinner.clone();
        self.clear_spinner();
        self.end_line();
        self.write(&format!("{note}\n"));
        if let Some(label) = spinner {
            self.spin(label);
        }
    }

    fn event(&mut self, event: LiveEvent) {
        match event {
            LiveEvent::Round { .. } => {
                self.end_line();
                self.text.clear();
                self.spin("thinking…".to_owned());
            }
            LiveEvent::Text(text) => {
                self.clear_spinner();
                self.text.push_str(&text);
                if !text.is_empty() {
                    self.mid_line = !text.ends_with('\n');
                }
                self.write(&text);
            }
            LiveEvent::Restart => {
                self.text.clear();
                self.note("(the model call failed; retrying)");
            }
            LiveEvent::ToolCall { name, .. } => {
                self.clear_spinner();
                self.spin(format!("running {name}…"));
            }
            LiveEvent::ToolResult { name, is_error, .. } => {
                self.clear_spinner();
                let mark = if is_error { "✗" } else { "✓" };
                self.note(&format!("{mark} {name}"));
                self.spin("thinking…".to_owned());
            }
            LiveEvent::Finished => self.clear_spinner(),
        }
    }

    /// Shows the stored reply unless the streamed text already was it.
    fn reply(&mut self, reply: &str) {
        self.clear_spinner();
        let reply = reply.trim_end();
        if self.text.trim() == reply.trim() && !reply.is_empty() {
            self.end_line();
            return;
        }
        if !self.text.is_empty() {
            self.end_line();
        }
        self.write(&format!("{reply}\n"));
        self.mid_line = false;
    }
}

/// The next live event; never, without a subscription.
async fn next_live(live: &mut Option<LiveSubscription>) -> Option<LiveEvent> {
    match live {
        Some(live) => live.next().await,
        None => std::future::pending().await,
    }
}

/// The next Ctrl-C; never, without a listener.
async fn next_interrupt(interrupts: &mut Option<Signal>) -> Option<()> {
    match interrupts {
        Some(interrupts) => interrupts.recv().await,
        None => std::future::pending().await,
    }
}

/// Follows a turn of `session` until its reply: `live` events as they
/// come, then the reply from `reply`.
pub async fn follow(
    runner: &Runner,
    session: &SessionId,
    mut live: Option<LiveSubscription>,
    mut reply: oneshot::Receiver<TurnReply>,
    patience: Duration,
    tty: bool,
) -> Followed {
    let mut screen = Screen::new(tty);
    screen.spin("thinking…".to_owned());
    let deadline = tokio::time::sleep(patience);
    tokio::pin!(deadline);
    let mut ticks = tokio::time::interval(Duration::from_millis(100));
    let mut stops = 0;
    // One listener for the whole turn, so that no Ctrl-C falls between two.
    let mut interrupts = match signal(SignalKind::interrupt()) {
        Ok(interrupts) => Some(interrupts),
        Err(err) => {
            tracing::warn!(error = %err, "Ctrl-C cannot be caught; /stop still stops a turn");
            None
        }
    };
    loop {
        tokio::select! {
            biased;
            event = next_live(&mut live) => match event {
                Some(event) => screen.event(event),
                None => live = None,
            },
            answer = &mut reply => {
                return match answer {
                    Ok(answer) => {
                        screen.reply(&answer.text);
                        if answer.status == InboundStatus::Waiting {
                            Followed::Parked
                        } else {
                            Followed::Shown
                        }
                    }
                    Err(_) => {
                        screen.note("(the turn ended without a reply here; it will be shown on the next start)");
                        Followed::NotShown
                    }
                };
            }
            Some(()) = next_interrupt(&mut interrupts) => {
                stops += 1;
                if stops > 1 {
                    screen.note("(quitting; the reply will be shown on the next start)");
                    return Followed::Quit;
                }
                match runner.stop(session, StopCause::User).await {
                    Ok(_) => screen.note("(stopping; Ctrl-C again quits)"),
                    Err(err) => screen.note(&format!("(could not stop the turn: {err})")),
                }
            }
            () = &mut deadline => {
                screen.note("(no reply in time; it will be shown on the next start)");
                return Followed::NotShown;
            }
            _ = ticks.tick() => screen.draw_spinner(),
        }
    }
}
