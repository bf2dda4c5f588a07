//! Durability off the serving path: one writer thread that makes release files and the last good
//! copy durable (write, fsync, rename, fsync the directory) after the change is already served.
//!
//! A store change reaches agents through the reloader and the served table; nothing on that path
//! waits for a disk. The reloader and the store task hand their files to the [`Persister`] and go
//! on. Writes are applied in the order they were handed in; when several writes of one path are
//! pending, only the newest is written (the last good copy is replaced on every change, and only
//! the last one matters). [`Persister::flush`] waits until everything handed in before it is on
//! disk: tests and shutdown use it.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::mpsc;

use skyconf_sources::fs::write_atomically;

/// Told whether a write reached the disk.
pub type WriteDone = Box<dyn FnOnce(std::io::Result<()>) + Send>;

enum Job {
    Write { path: PathBuf, bytes: Vec<u8>, done: Option<WriteDone> },
    Remove(PathBuf),
    Flush(mpsc::SyncSender<()>),
}

impl Job {
    fn path(&self) -> Option<&PathBuf> {
        match self {
            Self::Write { path, .. } | Self::Remove(path) => Some(path),
            Self::Flush(_) => None,
        }
    }
}

/// A handle on the writer thread; clones share it. The thread ends when the last handle is gone,
/// after writing what is pending.
#[derive(Clone)]
pub struct Persister {
    jobs: mpsc::Sender<Job>,
}

impl std::fmt::Debug for Persister {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persister").finish_non_exhaustive()
    }
}

impl Persister {
    /// Starts the writer thread.
    pub fn spawn() -> Self {
        let (jobs, pending) = mpsc::channel();
        std::thread::Builder::new()
            .name("skyconf-persist".into())
            .spawn(move || run(&pending))
            .expect("the persister thread starts");
        Self { jobs }
    }

    /// Replaces `path` with `bytes`, durably; `done` learns whether it worked (a write superseded
    /// by a newer one of the same path counts as done).
    pub fn write(&self, path: PathBuf, bytes: Vec<u8>, done: Option<WriteDone>) {
        if let Err(mpsc::SendError(Job::Write { done: Some(done), .. })) =
            self.jobs.send(Job::Write { path, bytes, done })
        {
            done(Err(std::io::Error::other("the persister has stopped")));
        }
    }

    /// Removes `path` (a missing file is not an error).
    pub fn remove(&self, path: PathBuf) {
        let _ = self.jobs.send(Job::Remove(path));
    }

    /// Blocks until everything handed in before this call is on disk. Not for async threads.
    pub fn flush(&self) {
        let (tx, rx) = mpsc::sync_channel(1);
        if self.jobs.send(Job::Flush(tx)).is_ok() {
            let _ = rx.recv();
        }
    }
}

fn run(pending: &mpsc::Receiver<Job>) {
    while let Ok(first) = pending.recv() {
        let mut batch = vec![first];
        batch.extend(pending.try_iter());
        // A path written or removed again later in the batch need not be written now.
        let mut later = HashSet::new();
        let mut superseded = vec![false; batch.len()];
        for (i, job) in batch.iter().enumerate().rev() {
            if let Some(path) = job.path() {
                superseded[i] = matches!(job, Job::Write { .. }) && !later.insert(path.clone());
            }
        }
        for (job, superseded) in batch.into_iter().zip(superseded) {
            match job {
                Job::Write { done, .. } if superseded => {
                    if let Some(done) = done {
                        done(Ok(()));
                    }
                }
                Job::Write { path, bytes, done } => {
                    let result = write_atomically(&path, &bytes);
                    if let Err(error) = &result {
                        tracing::warn!(path = %path.display(), %error, "Cannot write a file to disk.");
                    }
                    if let Some(done) = done {
                        done(result);
                    }
                }
                Job::Remove(path) => {
                    if let Err(error) = std::fs::remove_file(&path)
                        && error.kind() != std::io::ErrorKind::NotFound
                    {
                        tracing::warn!(path = %path.display(), %error, "Cannot delete a file.");
                    }
                }
                Job::Flush(tx) => {
                    let _ = tx.send(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn writes_in_order_keeps_the_newest_of_a_path_and_reports_results() {
        let dir = tempfile::tempdir().unwrap();
        let persister = Persister::spawn();
        let results = Arc::new(Mutex::new(Vec::new()));
        let report = |name: &'static str| -> Option<WriteDone> {
            let results = Arc::clone(&results);
            Some(Box::new(move |r: std::io::Result<()>| results.lock().unwrap().push((name, r.is_ok()))))
        };
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        for i in 0..50 {
            persister.write(a.clone(), format!("{i}").into_bytes(), None);
        }
        persister.write(b.clone(), b"gone".to_vec(), report("b"));
        persister.remove(b.clone());
        // A directory in the way: the write fails and says so.
        std::fs::create_dir_all(dir.path().join("c/inner")).unwrap();
        persister.write(dir.path().join("c"), b"x".to_vec(), report("c"));
        persister.flush();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "49");
        assert!(!b.exists());
        assert_eq!(*results.lock().unwrap(), [("b", true), ("c", false)]);
    }
}
