//! Logging that never blocks or stops the program: every log line goes into a bounded queue that
//! one thread writes to stderr.
//!
//! A logging call only formats its line and offers it to the queue; when the queue is full (stderr
//! is a pipe nobody reads, or a slow terminal) the line is dropped and counted, and the count is
//! logged once stderr takes lines again. Write errors (a closed pipe: EPIPE) are ignored. So a
//! closed or full stderr cannot panic a task (tracing-subscriber's own error path uses
//! `eprintln!`, which panics on a closed stderr), nor stall reloads, health checks or shutdown.
//! [`Logging::finish`] writes what is queued, and a last line, with a time limit.

use std::io::{IsTerminal as _, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;

use crate::LogFormat;

/// How many formatted lines wait for stderr before new ones are dropped.
const QUEUE_LINES: usize = 8192;

/// How long [`Logging::finish`] waits for stderr to take the queued lines.
const FINISH_WITHIN: Duration = Duration::from_secs(1);

/// What the writer thread receives.
enum Message {
    /// One formatted log line (or several, when a caller wrote them at once).
    Line(Vec<u8>),
    /// Write the last words and stop.
    Finish,
}

/// The logging set up by [`init`]; [`Logging::finish`] flushes it at exit.
#[derive(Debug)]
pub(crate) struct Logging {
    queue: SyncSender<Message>,
    last_words: Arc<Mutex<Option<String>>>,
    finished: Receiver<()>,
}

/// Installs the global subscriber (filter from `SKYCONF_LOG`, default `info`) and starts the thread
/// that writes to stderr.
pub(crate) fn init(format: LogFormat) -> Logging {
    let (queue, lines) = mpsc::sync_channel(QUEUE_LINES);
    let dropped = Arc::new(AtomicU64::new(0));
    let last_words = Arc::new(Mutex::new(None));
    let (done, finished) = mpsc::channel();
    let writer = Writer { dropped: Arc::clone(&dropped), last_words: Arc::clone(&last_words) };
    let spawned =
        std::thread::Builder::new().name("skyconf-log".to_owned()).spawn(move || writer.run(&lines, &done)).is_ok();
    let make = QueueWriter { queue: queue.clone(), dropped, spawned };

    let filter = tracing_subscriber::EnvFilter::try_from_env("SKYCONF_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colours())
        .log_internal_errors(false)
        .with_writer(make);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
    Logging { queue, last_words, finished }
}

/// Colours only on a terminal, and not when `NO_COLOR` is set to anything (https://no-color.org).
fn colours() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty())
}

impl Logging {
    /// Writes the queued lines, then `last_words` (the reason for a failure) if any, giving up
    /// after [`FINISH_WITHIN`] when stderr does not take them (a full pipe). Never blocks longer,
    /// never panics.
    pub(crate) fn finish(self, last_words: Option<String>) {
        if let Ok(mut slot) = self.last_words.lock() {
            *slot = last_words;
        }
        let give_up = Instant::now() + FINISH_WITHIN;
        let mut message = Message::Finish;
        loop {
            match self.queue.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => {
                    // No writer thread: the last words, if any, straight to stderr, errors ignored.
                    if let Some(text) = self.last_words.lock().ok().and_then(|mut slot| slot.take()) {
                        let _ = writeln!(std::io::stderr(), "{text}");
                    }
                    return;
                }
                Err(TrySendError::Full(back)) => {
                    if Instant::now() >= give_up {
                        return;
                    }
                    message = back;
                    // The writer thread is behind; it frees a slot per line written.
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        let _ = self.finished.recv_timeout(give_up.saturating_duration_since(Instant::now()));
    }
}

/// The thread that owns stderr.
struct Writer {
    dropped: Arc<AtomicU64>,
    last_words: Arc<Mutex<Option<String>>>,
}

impl Writer {
    fn run(self, lines: &Receiver<Message>, done: &mpsc::Sender<()>) {
        let mut stderr = std::io::stderr();
        // After a write error (a closed pipe) lines are still taken from the queue, and dropped.
        let mut broken = false;
        while let Ok(Message::Line(line)) = lines.recv() {
            if !broken {
                broken = stderr.write_all(&line).is_err();
            }
            let dropped = self.dropped.swap(0, Ordering::Relaxed);
            if dropped > 0 && !broken {
                tracing::warn!(dropped, "Log lines were dropped: stderr did not take them fast enough.");
            }
        }
        let last_words = self.last_words.lock().ok().and_then(|mut slot| slot.take());
        if let Some(text) = last_words
            && !broken
        {
            let _ = writeln!(stderr, "{text}");
        }
        let _ = stderr.flush();
        let _ = done.send(());
    }
}

/// The `MakeWriter` the fmt layer formats into: each event's bytes go to the queue, or are
/// counted as dropped.
#[derive(Debug)]
struct QueueWriter {
    queue: SyncSender<Message>,
    dropped: Arc<AtomicU64>,
    /// Whether the writer thread started; without it nothing is logged.
    spawned: bool,
}

impl<'a> MakeWriter<'a> for QueueWriter {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter { sink: self, line: Vec::new() }
    }
}

/// One event's bytes, queued when dropped (the fmt layer writes an event at once, then drops its
/// writer).
#[derive(Debug)]
struct LineWriter<'a> {
    sink: &'a QueueWriter,
    line: Vec<u8>,
}

impl std::io::Write for LineWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.line.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter<'_> {
    fn drop(&mut self) {
        if self.line.is_empty() || !self.sink.spawned {
            return;
        }
        let line = std::mem::take(&mut self.line);
        if let Err(TrySendError::Full(_)) = self.sink.queue.try_send(Message::Line(line)) {
            self.sink.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    #[test]
    fn a_full_queue_drops_and_counts_lines_instead_of_waiting() {
        let (queue, lines) = mpsc::sync_channel(1);
        let sink = QueueWriter { queue, dropped: Arc::new(AtomicU64::new(0)), spawned: true };
        for text in ["one\n", "two\n", "three\n"] {
            let mut writer = sink.make_writer();
            writer.write_all(text.as_bytes()).unwrap();
        }
        assert_eq!(sink.dropped.load(Ordering::Relaxed), 2);
        let Ok(Message::Line(first)) = lines.try_recv() else { panic!("the first line is queued") };
        assert_eq!(first, b"one\n");
        assert!(lines.try_recv().is_err());
    }
}
