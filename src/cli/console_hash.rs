//! `switchboard console-hash`: reads a password from standard input (not
//! echoed on a terminal) and prints its argon2 hash for
//! `console.password_hash`.

use anyhow::Context;

/// `switchboard console-hash`: reads a password from standard input (not
/// echoed on a terminal) and prints its argon2 hash.
pub fn run() -> anyhow::Result<()> {
    use std::io::{BufRead, IsTerminal};
    let stdin = std::io::stdin();
    let echo_off = stdin.is_terminal().then(|| {
        eprint!("Password for the web console: ");
        EchoOff::new()
    });
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    if echo_off.is_some() {
        eprintln!();
    }
    drop(echo_off);
    read.context("reading the password from standard input")?;
    let password = line.trim_end_matches(['\r', '\n']);
    anyhow::ensure!(!password.is_empty(), "the password is empty");
    let hash = crate::console::auth::hash_password(password)
        .map_err(|err| anyhow::anyhow!("hashing the password: {err}"))?;
    println!("{hash}");
    Ok(())
}

/// Turns the terminal's echo off on standard input until dropped (nothing,
/// where that fails).
struct EchoOff(Option<libc::termios>);

impl EchoOff {
    fn new() -> Self {
        // SAFETY: tcgetattr only writes into the struct we pass.
        let mut saved = unsafe { std::mem::zeroed::<libc::termios>() };
        // SAFETY: fd 0 is this process's standard input; `saved` is a
        // valid, writable termios.
        if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &raw mut saved) } != 0 {
            return Self(None);
        }
        let mut quiet = saved;
        quiet.c_lflag &= !libc::ECHO;
        // SAFETY: `quiet` is a valid termios read from this terminal.
        if unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw const quiet) } != 0 {
            return Self(None);
        }
        Self(Some(saved))
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        if let Some(saved) = self.0 {
            // SAFETY: restores the settings read from this terminal.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, &raw const saved) };
        }
    }
}
