//! Durability off the serving path: one writer thread that makes release files and the last good
//! copy durable (write, fsync, rename, fsync the directory) after the change is already served.
//!
//! A store change reaches agents through the reloader and the served table; nothing on that path
//! waits for a disk. The reloader and the store task hand their files to the [`Persister`] and go
//! on. Writes are applied in the order they were handed in; when several writes of one path are
//! pending, only the newest is written (the last good copy is replaced on every change, and only
//! the last one matters), and the older writes are told they are done when the newest is on disk,
//! never before. [`Persister::flush`] waits until everything handed in before it is on disk:
//! tests and shutdown use it.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::mpsc;

use skyconf_sources::fs::write_atomically;

/// Told whether a write reached the disk.
pub(crate) type WriteDone = Box<dyn FnOnce(std::io::Result<()>) + Send>;

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
    /// by a newer one of the same path learns it when the newer one is on disk, with its result).
    /// A failure is logged here only when no `done` is told of it.
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
        // A path written or removed again later in the batch need not be written now. Its `done`
        // is told when the later job is done, with that job's result: a write is reported done
        // only once its bytes, or newer ones, are on disk.
        let mut latest: HashMap<PathBuf, usize> = HashMap::new();
        let mut carried: Vec<Vec<WriteDone>> = batch.iter().map(|_| Vec::new()).collect();
        let mut superseded = vec![false; batch.len()];
        for i in (0..batch.len()).rev() {
            let Some(path) = batch[i].path().cloned() else { continue };
            match latest.get(&path) {
                Some(&later) => {
                    if let Job::Write { done, .. } = &mut batch[i] {
                        superseded[i] = true;
                        carried[later].extend(done.take());
                    }
                }
                None => {
                    latest.insert(path, i);
                }
            }
        }
        for ((job, superseded), carried) in batch.into_iter().zip(superseded).zip(carried) {
            match job {
                Job::Write { .. } if superseded => {}
                Job::Write { path, bytes, done } => {
                    let result = write_atomically(&path, &bytes);
                    let told: Vec<WriteDone> = done.into_iter().chain(carried).collect();
                    match &result {
                        // Whoever is told reports it, once.
                        Err(error) if told.is_empty() => {
                            tracing::warn!(path = %path.display(), %error, "Cannot write a file to disk.");
                        }
                        _ => {}
                    }
                    for done in told {
                        done(result.as_ref().map(|_| ()).map_err(|e| std::io::Error::new(e.kind(), e.to_string())));
                    }
                }
                Job::Remove(path) => {
                    if let Err(error) = std::fs::remove_file(&path)
                        && error.kind() != std::io::ErrorKind::NotFound
                    {
                        tracing::warn!(path = %path.display(), %error, "Cannot delete a file.");
                    }
                    for done in carried {
                        done(Ok(()));
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

    /// N11: a superseded write is done only once the newer bytes are on disk, so whoever waits
    /// for it (a durable answer) never goes ahead while the file holds older ones.
    #[test]
    fn a_superseded_write_is_done_only_when_the_newer_one_is_on_disk_with_its_result() {
        let dir = tempfile::tempdir().unwrap();
        let persister = Persister::spawn();
        let (release, hold) = std::sync::mpsc::channel::<()>();
        // Holds the writer thread while the writes to test queue up behind it, into one batch.
        let holding: WriteDone = Box::new(move |_| {
            let _ = hold.recv();
        });
        persister.write(dir.path().join("held"), b"x".to_vec(), Some(holding));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (copy, blocked) = (dir.path().join("copy"), dir.path().join("blocked"));
        for (path, bytes) in [(&copy, "old"), (&copy, "new"), (&blocked, "old"), (&blocked, "new")] {
            let (seen, path_seen) = (Arc::clone(&seen), path.clone());
            let done: WriteDone = Box::new(move |result: std::io::Result<()>| {
                let on_disk = std::fs::read_to_string(&path_seen).unwrap_or_default();
                seen.lock().unwrap().push((bytes, result.is_ok(), on_disk));
            });
            persister.write(path.clone(), bytes.as_bytes().to_vec(), Some(done));
        }
        // A directory in the way of the newest write of `blocked`: both of its writes failed.
        std::fs::create_dir_all(blocked.join("inner")).unwrap();
        release.send(()).unwrap();
        persister.flush();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                ("new", true, "new".to_owned()),
                ("old", true, "new".to_owned()),
                ("new", false, String::new()),
                ("old", false, String::new())
            ]
        );
    }
}
