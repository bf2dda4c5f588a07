//! The file store, in two forms:
//!
//! - **single file** (the embedded default): the file *is* the agent-configurations document;
//! - **directory**: one file per key, named after the key
//!   (`configuration-discovery.default.agentConfigurations`, `alarm.default.alarm-settings`, ...),
//!   and one subdirectory per group key holding one file per sub-item — the layout of a
//!   Kubernetes ConfigMap mounted as a volume. Names starting with `.` are skipped (the mount's
//!   `..data` machinery, editors' swap files).
//!
//! The watch is on the *directory* (the parent, for a single file), because editors and ConfigMap
//! mounts replace files by rename (or swap a `..data` symlink) rather than write in place, and a
//! watch on the file itself would stay on the old inode. Every event triggers a re-read once the
//! burst settles; the content decides whether anything changed. A slow periodic re-read is the
//! safety net for missed events (network filesystems, a replaced directory).
//!
//! A single file that disappears or cannot be read is reported as [`Update::Failed`], not as a
//! delete: for a file the absence is almost always a deploy in progress or a mistake. In the
//! directory form, removing a key's file deletes the key.

mod settings;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

pub use self::settings::FileSettings;
use crate::{
    AGENT_CONFIGURATIONS_KEY, Backoff, DEFAULT_SETTLE, KeySet, Limits, ReceiverGone, Reporter, Session, SessionEnd,
    Source, SourceError, StoreContent, Update, supervise,
};

/// The longest a burst of events may delay a re-read.
const MAX_SETTLE: Duration = Duration::from_millis(60);

/// Which layout the path has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// One agent-configurations file.
    SingleFile,
    /// One file per key, one subdirectory per group.
    Directory,
}

/// A file or directory store.
#[derive(Debug, Clone)]
pub struct FileSource {
    path: PathBuf,
    form: Form,
    limits: Limits,
    rehash_every: Duration,
    backoff: Backoff,
}

impl FileSource {
    /// A single agent-configurations file, re-read at least every 10 s.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            form: Form::SingleFile,
            limits: Limits::default(),
            rehash_every: Duration::from_secs(10),
            backoff: Backoff::default(),
        }
    }

    /// A directory with one file per key.
    pub fn directory(path: impl Into<PathBuf>) -> Self {
        Self { form: Form::Directory, ..Self::new(path) }
    }

    /// A directory store when `path` is a directory, a single-file store otherwise.
    pub fn open(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        if path.is_dir() { Self::directory(path) } else { Self::new(path) }
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

    /// Sets the back-off between attempts to set up the watch.
    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The file or directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The layout.
    pub fn form(&self) -> Form {
        self.form
    }

    /// Reads one file, within the size limit.
    fn read_file(&self, path: &Path) -> Result<String, SourceError> {
        let what = path.display().to_string();
        let io = |source| SourceError::Io { path: what.clone(), source };
        let size = std::fs::metadata(path).map_err(io)?.len();
        if size > self.limits.max_value_bytes {
            return Err(SourceError::TooLarge { what, size, limit: self.limits.max_value_bytes });
        }
        let bytes = std::fs::read(path).map_err(io)?;
        String::from_utf8(bytes).map_err(|_| SourceError::NotText { what })
    }

    /// Reads the single file now.
    pub fn read(&self) -> Result<String, SourceError> {
        self.read_file(&self.path)
    }

    /// Everything the store holds now.
    pub fn read_content(&self) -> Result<StoreContent, SourceError> {
        let mut content = StoreContent::default();
        match self.form {
            Form::SingleFile => {
                content.singles.insert(AGENT_CONFIGURATIONS_KEY.to_owned(), self.read()?);
            }
            Form::Directory => {
                for (name, path) in self.entries(&self.path)? {
                    if path.is_dir() {
                        let mut items = BTreeMap::new();
                        for (item, item_path) in self.entries(&path)? {
                            if item_path.is_file() {
                                items.insert(item, self.read_file(&item_path)?);
                            }
                        }
                        content.groups.insert(name, items);
                    } else if path.is_file() {
                        content.singles.insert(name, self.read_file(&path)?);
                    }
                }
            }
        }
        Ok(content)
    }

    /// Visible entries of a directory (names not starting with `.`), following symlinks.
    fn entries(&self, dir: &Path) -> Result<Vec<(String, PathBuf)>, SourceError> {
        let io = |source| SourceError::Io { path: dir.display().to_string(), source };
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let Ok(name) = entry.file_name().into_string() else { continue };
            if !name.starts_with('.') {
                out.push((name, entry.path()));
            }
        }
        Ok(out)
    }

    /// The directory to watch.
    fn watched_dir(&self) -> PathBuf {
        match self.form {
            Form::Directory => self.path.clone(),
            Form::SingleFile => match self.path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            },
        }
    }

    fn directory_watcher(&self, events: Arc<Notify>) -> Result<notify::RecommendedWatcher, SourceError> {
        let dir = self.watched_dir();
        let watch_error =
            |e: notify::Error| SourceError::Watch { what: dir.display().to_string(), message: e.to_string() };
        let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if let Ok(event) = event
                && !event.kind.is_access()
            {
                events.notify_one();
            }
        })
        .map_err(watch_error)?;
        let mode = match self.form {
            Form::SingleFile => RecursiveMode::NonRecursive,
            Form::Directory => RecursiveMode::Recursive,
        };
        watcher.watch(&dir, mode).map_err(watch_error)?;
        Ok(watcher)
    }

    /// What changed between two reads, as updates.
    fn updates_between(&self, before: Option<&StoreContent>, now: &StoreContent) -> Vec<Update> {
        match (self.form, before) {
            (Form::SingleFile, _) => now
                .agent_configurations()
                .map(|text| Update::Single { key: AGENT_CONFIGURATIONS_KEY.to_owned(), value: Some(text.to_owned()) })
                .into_iter()
                .collect(),
            (Form::Directory, None) => vec![Update::Snapshot(now.clone())],
            (Form::Directory, Some(before)) => crate::changes(before, now),
        }
    }

    /// Re-reads on every settled burst of events (and every `rehash_every`) until the receiver is
    /// gone.
    async fn watch_loop(&self, events: &Notify, reporter: &mut Reporter<'_>) -> ReceiverGone {
        let mut last: Option<StoreContent> = None;
        let mut rehash = tokio::time::interval(self.rehash_every);
        rehash.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let sent = match self.read_content() {
                Ok(now) if last.as_ref() == Some(&now) => Ok(()),
                Ok(now) => {
                    reporter.established();
                    let batch = self.updates_between(last.as_ref(), &now);
                    last = Some(now);
                    reporter.send_all(batch).await
                }
                // Forget what was read so the same content is delivered again after recovery.
                Err(error) => {
                    last = None;
                    reporter.outage(error).await
                }
            };
            if let Err(gone) = sent {
                return gone;
            }
            tokio::select! {
                () = events.notified() => settle(events).await,
                _ = rehash.tick() => {}
            }
        }
    }
}

/// Writes `text` to `path` so readers never see half a file.
fn write_atomically(path: &Path, text: &str) -> Result<(), SourceError> {
    crate::fs::write_atomically(path, text.as_bytes())
        .map_err(|source| SourceError::Io { path: path.display().to_string(), source })
}

impl Source for FileSource {
    fn describe(&self) -> String {
        match self.form {
            Form::SingleFile => format!("file {}", self.path.display()),
            Form::Directory => format!("directory {}", self.path.display()),
        }
    }

    async fn load(&self, _keys: &KeySet) -> Result<StoreContent, SourceError> {
        self.read_content()
    }

    async fn run(&self, keys: KeySet, updates: mpsc::Sender<Update>, shutdown: CancellationToken) {
        supervise(self, &keys, updates, self.backoff.clone(), shutdown).await;
    }

    async fn put(&self, key: &str, value: Option<&str>) -> Result<(), SourceError> {
        match (self.form, value) {
            (Form::SingleFile, Some(text)) if key == AGENT_CONFIGURATIONS_KEY => write_atomically(&self.path, text),
            (Form::SingleFile, _) => Err(SourceError::Unsupported(format!(
                "the single-file store holds only {AGENT_CONFIGURATIONS_KEY} and cannot delete it"
            ))),
            (Form::Directory, _) if key.is_empty() || key.starts_with('.') || key.contains(['/', '\\']) => {
                Err(SourceError::Unsupported(format!("`{key}` cannot be a file name")))
            }
            (Form::Directory, Some(text)) => write_atomically(&self.path.join(key), text),
            (Form::Directory, None) => match std::fs::remove_file(self.path.join(key)) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(SourceError::Io { path: self.path.join(key).display().to_string(), source: e })
                }
                _ => Ok(()),
            },
        }
    }
}

/// A session is the directory watch: it fails only if the watch cannot be set up; a file that
/// cannot be read is an outage within it, over at the next good read.
impl Session for FileSource {
    async fn run_once(&self, _keys: &KeySet, reporter: &mut Reporter<'_>) -> SessionEnd {
        let events = Arc::new(Notify::new());
        // The watch first, then the first read: no change can fall between the two.
        let watcher = match self.directory_watcher(Arc::clone(&events)) {
            Ok(watcher) => watcher,
            Err(error) => return SessionEnd::Failed(error),
        };
        let gone = self.watch_loop(&events, reporter).await;
        drop(watcher);
        gone.into()
    }
}

/// Waits until no event has arrived for [`DEFAULT_SETTLE`], or [`MAX_SETTLE`] at most, so an
/// editor's truncate-then-write is read once, whole.
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

    async fn next(rx: &mut mpsc::Receiver<Update>) -> Update {
        tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("an update within 5 s")
            .expect("source running")
    }

    async fn next_value(rx: &mut mpsc::Receiver<Update>) -> Option<String> {
        match next(rx).await {
            Update::Single { value, .. } => value,
            other => panic!("unexpected {other:?}"),
        }
    }

    fn spawn(source: FileSource) -> (mpsc::Receiver<Update>, CancellationToken, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(8);
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move { source.run(KeySet::oap(), tx, token).await });
        (rx, stop, task)
    }

    #[tokio::test]
    async fn single_file_reports_in_place_writes_and_rename_replacements() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.yaml");
        std::fs::write(&path, "a").unwrap();
        let (mut rx, stop, task) = spawn(FileSource::new(&path));
        // The first report is the current content, sent once the watch is in place.
        assert_eq!(next_value(&mut rx).await.as_deref(), Some("a"));

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
        let (mut rx, stop, task) = spawn(FileSource::new(&path));
        assert_eq!(next_value(&mut rx).await.as_deref(), Some("a"));

        std::fs::remove_file(&path).unwrap();
        assert!(matches!(next(&mut rx).await, Update::Failed(SourceError::Io { .. })));

        std::fs::write(&path, "a").unwrap();
        assert_eq!(next_value(&mut rx).await.as_deref(), Some("a"), "same content is delivered again after a failure");
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_that_cannot_be_set_up_is_one_failure_however_often_it_is_retried() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let backoff = Backoff::new(Duration::from_millis(10), Duration::from_millis(40));
        let (mut rx, stop, task) = spawn(FileSource::directory(&missing).with_backoff(backoff));
        assert!(matches!(next(&mut rx).await, Update::Failed(SourceError::Watch { .. })));
        let quiet = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
        assert!(quiet.is_err(), "retried for 10 s without a second failure: {quiet:?}");

        std::fs::create_dir(&missing).unwrap();
        assert!(matches!(next(&mut rx).await, Update::Snapshot(content) if content == StoreContent::default()));
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn directory_form_maps_files_to_keys_and_subdirectories_to_groups() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(AGENT_CONFIGURATIONS_KEY), "configurations: {}\n").unwrap();
        std::fs::write(dir.path().join("..data"), "ignored").unwrap();
        std::fs::create_dir(dir.path().join("core.default.endpoint-name-grouping-openapi")).unwrap();
        std::fs::write(dir.path().join("core.default.endpoint-name-grouping-openapi/a.yaml"), "x").unwrap();
        let source = FileSource::open(dir.path());
        assert_eq!(source.form(), Form::Directory);
        let (mut rx, stop, task) = spawn(source.clone());
        let Update::Snapshot(content) = next(&mut rx).await else { panic!("a snapshot first") };
        assert_eq!(content.agent_configurations(), Some("configurations: {}\n"));
        assert_eq!(content.singles.len(), 1, "{content:?}");
        assert_eq!(content.groups["core.default.endpoint-name-grouping-openapi"]["a.yaml"], "x");

        source.put("alarm.default.alarm-settings", Some("rules: {}")).await.unwrap();
        match next(&mut rx).await {
            Update::Single { key, value } => {
                assert_eq!(key, "alarm.default.alarm-settings");
                assert_eq!(value.as_deref(), Some("rules: {}"));
            }
            other => panic!("unexpected {other:?}"),
        }
        source.put("alarm.default.alarm-settings", None).await.unwrap();
        assert!(matches!(next(&mut rx).await, Update::Single { value: None, .. }));

        std::fs::remove_file(dir.path().join("core.default.endpoint-name-grouping-openapi/a.yaml")).unwrap();
        match next(&mut rx).await {
            Update::Group { items: Some(items), .. } => assert!(items.is_empty()),
            other => panic!("unexpected {other:?}"),
        }
        assert!(source.put("../escape", Some("x")).await.is_err());
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn single_file_put_replaces_the_file_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.yaml");
        std::fs::write(&path, "a").unwrap();
        let source = FileSource::new(&path);
        source.put(AGENT_CONFIGURATIONS_KEY, Some("b")).await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "b");
        assert!(source.put("alarm.default.alarm-settings", Some("x")).await.is_err());
        assert!(source.put(AGENT_CONFIGURATIONS_KEY, None).await.is_err());
        let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no staging file left behind");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_put_to_a_symlinked_file_replaces_the_target_and_keeps_the_link() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("git")).unwrap();
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        let target = dir.path().join("git/agent.yaml");
        std::fs::write(&target, "a").unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).unwrap();
        let link = dir.path().join("etc/agent.yaml");
        std::os::unix::fs::symlink(&target, &link).unwrap();

        let source = FileSource::new(&link);
        source.put(AGENT_CONFIGURATIONS_KEY, Some("b")).await.unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "b");
        assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o7777, 0o640);
        // A later edit of the target is what the store reads.
        std::fs::write(&target, "c").unwrap();
        assert_eq!(source.read().unwrap(), "c");
    }

    #[test]
    fn refuses_oversized_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.yaml");
        std::fs::write(&path, "x".repeat(100)).unwrap();
        let source = FileSource::new(&path).with_limits(Limits { max_value_bytes: 10 });
        assert!(matches!(source.read(), Err(SourceError::TooLarge { size: 100, .. })));
    }
}
