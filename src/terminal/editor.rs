//! The prompt's line editor (`rustyline`): editing keys, the history kept in
//! a file across runs, and multi-line input — a paste (bracketed paste)
//! arrives as one message, and Alt-Enter starts a new line in it.
//!
//! `rustyline` reads blocking, so the editor lives on a thread of its own
//! and the chat asks it for one line at a time. Between reads the terminal
//! is in its normal mode, where Ctrl-C is a signal the chat catches.

use std::path::PathBuf;

use rustyline::config::Config;
use rustyline::error::ReadlineError;
use rustyline::{Cmd, DefaultEditor, EventHandler, KeyCode, KeyEvent, Modifiers};
use tokio::sync::oneshot;

/// What one read at the prompt gave.
#[derive(Debug)]
pub enum Read {
    /// A message (several lines when pasted or typed with Alt-Enter).
    Line(String),
    /// Ctrl-C at the prompt.
    Interrupted,
    /// Ctrl-D at an empty prompt, or the end of input.
    Eof,
    /// The terminal failed.
    Failed(String),
}

struct Request {
    prompt: String,
    reply: oneshot::Sender<Read>,
}

/// The editor's thread, asked for lines.
#[derive(Debug)]
pub struct LineEditor {
    requests: std::sync::mpsc::Sender<Request>,
}

impl LineEditor {
    /// Starts the editor with the history in `history` (read when present,
    /// appended to after every line).
    ///
    /// # Errors
    /// The terminal cannot be set up.
    pub fn start(history: Option<PathBuf>) -> Result<Self, ReadlineError> {
        let config = Config::builder()
            .auto_add_history(false)
            .max_history_size(1000)?
            .history_ignore_dups(true)?
            .history_ignore_space(true)
            .bracketed_paste(true)
            .build();
        let mut editor = DefaultEditor::with_config(config)?;
        editor.bind_sequence(
            KeyEvent(KeyCode::Enter, Modifiers::ALT),
            EventHandler::Simple(Cmd::Newline),
        );
        if let Some(path) = &history
            && path.exists()
            && let Err(err) = editor.load_history(path)
        {
            tracing::warn!(error = %err, path = %path.display(), "could not read the chat history");
        }
        let (requests, incoming) = std::sync::mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("chat-editor".to_owned())
            .spawn(move || {
                while let Ok(request) = incoming.recv() {
                    let read = match editor.readline(&request.prompt) {
                        Ok(line) => Read::Line(line),
                        Err(ReadlineError::Interrupted) => Read::Interrupted,
                        Err(ReadlineError::Eof) => Read::Eof,
                        Err(err) => Read::Failed(err.to_string()),
                    };
                    if let (Read::Line(line), Some(path)) = (&read, &history)
                        && !line.trim().is_empty()
                        && editor.add_history_entry(line.as_str()).unwrap_or(false)
                        && let Err(err) = editor.append_history(path)
                    {
                        tracing::warn!(error = %err, path = %path.display(), "could not save the chat history");
                    }
                    let _ = request.reply.send(read);
                }
            })
            .map_err(ReadlineError::Io)?;
        Ok(Self { requests })
    }

    /// Reads one message at `prompt`.
    pub async fn read(&self, prompt: &str) -> Read {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            prompt: prompt.to_owned(),
            reply,
        };
        if self.requests.send(request).is_err() {
            return Read::Failed("the line editor stopped".to_owned());
        }
        answer
            .await
            .unwrap_or_else(|_| Read::Failed("the line editor stopped".to_owned()))
    }
}
