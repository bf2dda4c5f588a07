//! The file store: one agent-configurations YAML file, hot-reloaded.
//!
//! The watch is on the file's *parent directory*, because editors and Kubernetes ConfigMap mounts
//! replace files by rename (or swap a `..data` symlink) rather than write in place, and a watch on
//! the file itself would be left on the old inode. Every event in the directory triggers a re-read
//! once the burst settles; the content hash decides whether anything changed. A slow periodic
//! re-read is the safety net for missed events (network filesystems, a replaced directory).
//!
//! A file that disappears or cannot be read is reported as [`Update::Failed`], not as a delete:
//! for a file the absence is almost always a deploy in progress or a mistake.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

use crate::{AGENT_CONFIGURATIONS_KEY, DEFAULT_SETTLE, Limits, SourceError, Update, content_hash};

/// The longest a burst of events may delay a re-read.
const MAX_SETTLE: Duration = Duration::from_millis(60);

/// One agent-configurations file.
#[derive(Debug, Clone)]
pub struct FileSource {
    path: PathBuf,
    limits: Limits,
    rehash_every: Duration,
}

impl FileSource {
    /// A source for `path`, re-read at least every 10 s.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            limits: Limits::default(),
            rehash_every: Duration::from_secs(10),
        }
    }

    /// Sets the size limit.
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets the safety-net period.
    pub fn with_rehash_every(mut self, every: Duration) -> Self {
        self.rehash_every = every;
        self
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file now.
    pub fn read(&self) -> Result<String, SourceError> {
        let what = self.path.display().to_string();
        let io = |source| SourceError::Io {
            path: what.clone(),
            source,
        };
        let size = std::fs::metadata(&self.path).map_err(io)?.len();
        if size > self.limits.max_value_bytes {
            return Err(SourceError::TooLarge {
                what,
                size,
                limit: self.limits.max_value_bytes,
            });
        }
        let bytes = std::fs::read(&self.path).map_err(io)?;
        String::from_utf8(bytes).map_err(|_| SourceError::NotText { what })
    }

    /// Starts watching: the directory watch is in place when this returns, so a write after it is
    /// seen. The returned future runs until `shutdown`, sending an [`Update`] for every content
    /// change after `initial` (the text the caller already has) and for every failed read.
    pub fn watch(
        self,
        initial: Option<&str>,
        updates: mpsc::Sender<Update>,
        shutdown: CancellationToken,
    ) -> Result<impl Future<Output = ()> + Send + 'static, SourceError> {
        let events = Arc::new(Notify::new());
        let watcher = self.directory_watcher(Arc::clone(&events))?;
        let initial = initial.map(content_hash);
        Ok(async move {
            let _watcher = watcher;
            self.watch_loop(initial, &events, &updates, &shutdown).await;
        })
    }

    async fn watch_loop(
        &self,
        mut last_hash: Option<[u8; 32]>,
        events: &Notify,
        updates: &mpsc::Sender<Update>,
        shutdown: &CancellationToken,
    ) {
        let mut last_failed = false;
        let mut rehash = tokio::time::interval(self.rehash_every);
        rehash.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        rehash.tick().await;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = events.notified() => settle(events).await,
                _ = rehash.tick() => {}
            }
            let update = match self.read() {
                Ok(text) => {
                    last_failed = false;
                    let hash = content_hash(&text);
                    if last_hash == Some(hash) {
                        continue;
                    }
                    last_hash = Some(hash);
                    Update::Value {
                        key: AGENT_CONFIGURATIONS_KEY.to_owned(),
                        value: Some(text),
                    }
                }
                Err(error) => {
                    // Report a failure once until the file reads again; forget the hash so the
                    // same content is delivered again after recovery.
                    if last_failed {
                        continue;
                    }
                    last_failed = true;
                    last_hash = None;
                    Update::Failed(error)
                }
            };
            if updates.send(update).await.is_err() {
                return;
            }
        }
    }

    fn directory_watcher(
        &self,
        events: Arc<Notify>,
    ) -> Result<notify::RecommendedWatcher, SourceError> {
        let dir = match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let watch_error = |e: notify::Error| SourceError::Watch {
            what: dir.display().to_string(),
            message: e.to_string(),
        };
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                if let Ok(event) = event
                    && !event.kind.is_access()
                {
                    events.notify_one();
                }
            })
            .map_err(watch_error)?;
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(watch_error)?;
        Ok(watcher)
    }
}

/// Waits until no event has arrived for [`DEFAULT_SETTLE`], or [`MAX_SETTLE`] at most, so an editor's
/// truncate-then-write is read once, whole.
async fn settle(events: &Notify) {
    let deadline = tokio::time::Instant::now() + MAX_SETTLE;
    loop {
        let quiet = tokio::time::sleep(DEFAULT_SETTLE);
        tokio::select! {
            () = quiet => return,
            () = events.notified() => {}
            () = tokio::time::sleep_until(deadline) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn next_value(rx: &mut mpsc::Receiver<Update>) -> Option<String> {
        match tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("an update within 5 s")
        {
            Some(Update::Value { value, .. }) => value,
            Some(Update::Failed(e)) => panic!("unexpected failure: {e}"),
            None => panic!("source stopped"),
        }
    }

    #[tokio::test]
    async fn reports_in_place_writes_and_rename_replacements() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.yaml");
        std::fs::write(&path, "a").unwrap();
        let source = FileSource::new(&path);
        assert_eq!(source.read().unwrap(), "a");
        let (tx, mut rx) = mpsc::channel(8);
        let stop = CancellationToken::new();
        let task = tokio::spawn(source.watch(Some("a"), tx, stop.clone()).unwrap());

        std::fs::write(&path, "b").unwrap();
        assert_eq!(next_value(&mut rx).await.as_deref(), Some("b"));

        let staged = dir.path().join(".agent.yaml.tmp");
        std::fs::write(&staged, "c").unwrap();
        std::fs::rename(&staged, &path).unwrap();
        assert_eq!(next_value(&mut rx).await.as_deref(), Some("c"));

        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_missing_file_is_a_failure_then_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.yaml");
        std::fs::write(&path, "a").unwrap();
        let (tx, mut rx) = mpsc::channel(8);
        let stop = CancellationToken::new();
        let task = tokio::spawn(
            FileSource::new(&path)
                .watch(Some("a"), tx, stop.clone())
                .unwrap(),
        );

        std::fs::remove_file(&path).unwrap();
        let update = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(
            matches!(update, Update::Failed(SourceError::Io { .. })),
            "{update:?}"
        );

        std::fs::write(&path, "a").unwrap();
        assert_eq!(
            next_value(&mut rx).await.as_deref(),
            Some("a"),
            "same content is delivered again after a failure"
        );
        stop.cancel();
        task.await.unwrap();
    }

    #[test]
    fn refuses_oversized_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.yaml");
        std::fs::write(&path, "x".repeat(100)).unwrap();
        let source = FileSource::new(&path).with_limits(Limits {
            max_value_bytes: 10,
        });
        assert!(matches!(
            source.read(),
            Err(SourceError::TooLarge { size: 100, .. })
        ));
    }
}
