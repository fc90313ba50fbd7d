//! Progress on stderr: one line rewritten in place (`\r`) when stderr is a terminal, a line every
//! few seconds otherwise, nothing when disabled.

use std::{
    io::{IsTerminal, Write},
    time::{Duration, Instant},
};

use parking_lot::Mutex;

/// A progress line.
#[derive(Debug)]
pub struct Progress {
    enabled: bool,
    tty: bool,
    prefix: String,
    last: Mutex<(Instant, usize)>,
}

impl Progress {
    /// Progress for one run, lines prefixed with `prefix`.
    pub fn new(enabled: bool, prefix: &str) -> Self {
        Progress {
            enabled,
            tty: std::io::stderr().is_terminal(),
            prefix: prefix.to_string(),
            last: Mutex::new((Instant::now() - Duration::from_secs(3600), 0)),
        }
    }

    /// Updates the line (rate-limited).
    pub fn update(&self, msg: &str) {
        if !self.enabled {
            return;
        }
        let mut last = self.last.lock();
        let every = if self.tty {
            Duration::from_millis(200)
        } else {
            Duration::from_secs(10)
        };
        if last.0.elapsed() < every {
            return;
        }
        let line = format!("[bench] {} {msg}", self.prefix);
        let mut e = std::io::stderr().lock();
        if self.tty {
            let pad = last.1.saturating_sub(line.chars().count());
            let _ = write!(e, "\r{line}{}", " ".repeat(pad));
        } else {
            let _ = writeln!(e, "{line}");
        }
        let _ = e.flush();
        *last = (Instant::now(), line.chars().count());
    }

    /// Prints a line that stays (ends the in-place line first).
    pub fn note(&self, msg: &str) {
        if !self.enabled {
            return;
        }
        let mut last = self.last.lock();
        let mut e = std::io::stderr().lock();
        if self.tty && last.1 > 0 {
            let _ = write!(e, "\r{}\r", " ".repeat(last.1));
        }
        let _ = writeln!(e, "[bench] {} {msg}", self.prefix);
        *last = (Instant::now() - Duration::from_secs(3600), 0);
    }
}
