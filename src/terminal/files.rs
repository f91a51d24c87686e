//! Where the terminal chat keeps its own files: the line history, the log,
//! and the turns sent but not yet shown (so that a reply written while the
//! chat was not running is shown on its next start).
//!
//! They live next to a SQLite database, or else in the user's data folder
//! (`$XDG_DATA_HOME/switchboard`, `~/.local/share/switchboard`).

use crate::domain::{InboundId, SessionId};
use std::path::{Path, PathBuf};

use tracing_subscriber::EnvFilter;

use crate::config::LogSettings;

/// The chat's files, all in one folder.
#[derive(Debug, Clone)]
pub struct ChatFiles {
    folder: PathBuf,
}

impl ChatFiles {
    /// The files for the database at `database_url`: next to it when it is
    /// a SQLite file, else in the user's data folder.
    pub fn for_database(database_url: &str) -> Self {
        let beside_database = crate::config::sqlite_path(database_url)
            .and_then(|(path, _)| Path::new(path).parent().map(Path::to_path_buf))
            .filter(|folder| !folder.as_os_str().is_empty());
        let folder = beside_database
            .or_else(user_data_folder)
            .unwrap_or_else(|| PathBuf::from("data"));
        Self { folder }
    }

    /// The files in `folder`.
    pub fn in_folder(folder: PathBuf) -> Self {
        Self { folder }
    }

    /// Lines typed at the prompt, kept across runs.
    pub fn history(&self) -> PathBuf {
        self.folder.join("switchboard-chat.history")
    }

    /// The log of the chat's process (never printed into the chat).
    pub fn log(&self) -> PathBuf {
        self.folder.join("switchboard-chat.log")
    }

    /// The turns sent whose reply was not shown yet.
    fn unshown(&self) -> PathBuf {
        self.folder.join("switchboard-chat.unshown")
    }

    /// Creates the folder when missing.
    ///
    /// # Errors
    /// The folder cannot be created.
    pub fn create_folder(&self) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.folder)
    }

    /// The turns (session, inbound message id) whose reply was not shown.
    /// A missing or unreadable file holds none; lines that do not parse are
    /// skipped.
    pub fn unshown_turns(&self) -> Vec<(SessionId, InboundId)> {
        let Ok(text) = std::fs::read_to_string(self.unshown()) else {
            return Vec::new();
        };
        text.lines()
            .filter_map(|line| {
                let (session, id) = line.split_once(' ')?;
                Some((
                    SessionId::parse(session).ok()?,
                    InboundId::new(id.parse().ok()?),
                ))
            })
            .collect()
    }

    /// Writes the turns whose reply was not shown (none: the file goes).
    ///
    /// # Errors
    /// The file cannot be written.
    pub fn set_unshown_turns(&self, turns: &[(SessionId, InboundId)]) -> std::io::Result<()> {
        if turns.is_empty() {
            return match std::fs::remove_file(self.unshown()) {
                Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(err),
                _ => Ok(()),
            };
        }
        let text: String = turns
            .iter()
            .map(|(session, id)| format!("{session} {id}\n"))
            .collect();
        std::fs::write(self.unshown(), text)
    }
}

fn user_data_folder() -> Option<PathBuf> {
    let nonempty = |name| std::env::var_os(name).filter(|value| !value.is_empty());
    nonempty("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| nonempty("HOME").map(|home| PathBuf::from(home).join(".local/share")))
        .map(|folder| folder.join("switchboard"))
}

/// Sends the chat process's log to `path` (appended; text without colour,
/// or JSON lines with `log.json`) at the level of `settings.filter`, or
/// `RUST_LOG`.
///
/// # Errors
/// The file cannot be opened.
pub fn log_to_file(settings: &LogSettings, path: &Path) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| settings.filter.clone());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::sync::Mutex::new(file));
    // A second init (tests) keeps the first subscriber.
    let _ = if settings.json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_sit_next_to_a_sqlite_database() {
        let files = ChatFiles::for_database("sqlite:///srv/sb/data/switchboard.db?mode=rwc");
        assert_eq!(
            files.history(),
            PathBuf::from("/srv/sb/data/switchboard-chat.history")
        );
        assert_eq!(
            files.log(),
            PathBuf::from("/srv/sb/data/switchboard-chat.log")
        );
    }

    #[test]
    fn unshown_turns_survive_a_restart_and_bad_lines_are_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let files = ChatFiles::in_folder(dir.path().to_path_buf());
        assert!(files.unshown_turns().is_empty());
        let session = SessionId::generate();
        files
            .set_unshown_turns(&[(session.clone(), InboundId::new(7))])
            .expect("written");
        std::fs::write(
            dir.path().join("switchboard-chat.unshown"),
            format!("{session} 7\nnot a line\n"),
        )
        .expect("written");
        assert_eq!(files.unshown_turns(), vec![(session, InboundId::new(7))]);
        files.set_unshown_turns(&[]).expect("removed");
        assert!(files.unshown_turns().is_empty());
        files.set_unshown_turns(&[]).expect("nothing to remove");
    }
}
