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
//!
//! **Transient states are not reported.** A file replaced by rename (a new inode) is whole the
//! moment it appears, and is reported as soon as its events settle. A file written in place
//! cannot be told apart from one whose writer is still busy (`cat slow-pipe > file` truncates
//! first and writes later; a copy across filesystems writes in chunks), so a change that kept the
//! file's inode, or a file whose size or modification time changed while it was read, is only a
//! candidate: it is reported once the directory has been quiet for [`IN_PLACE_SETTLE`] and a
//! re-read finds the same content, size and modification time. An empty or whitespace-only file
//! (a truncation in progress, almost always) is likewise kept back, logged, with the last good
//! content still served, until a re-read after [`BLANK_CONFIRM`] of quiet finds it still blank:
//! only then is a deliberate "no services" (or an emptied key) reported.

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
    AGENT_CONFIGURATIONS_KEY, Backoff, DEFAULT_SETTLE, Expect, KeySet, Limits, ReceiverGone, Reporter, Revision,
    Session, SessionEnd, Source, SourceError, StoreContent, Update, supervise,
};

/// The longest a burst of events may delay a re-read.
const MAX_SETTLE: Duration = Duration::from_millis(60);

/// How long the directory must stay quiet before a file changed in place is reported: longer than
/// the pauses of a slow writer (a pipe, a copy, a script writing in steps).
pub const IN_PLACE_SETTLE: Duration = Duration::from_secs(1);

/// How long a file must stay empty (or whitespace only) before that is reported.
pub const BLANK_CONFIRM: Duration = Duration::from_secs(3);

/// What a read saw of one file: which file it was (the inode) and how it looked.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    /// Device, inode and birth time where the platform has them: a rename brings a new one.
    identity: Option<(u64, u64, Option<std::time::SystemTime>)>,
    len: u64,
    modified: Option<std::time::SystemTime>,
    /// The size or modification time changed between the start and the end of the read.
    changed_while_read: bool,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        let identity = {
            use std::os::unix::fs::MetadataExt as _;
            Some((meta.dev(), meta.ino(), meta.created().ok()))
        };
        #[cfg(not(unix))]
        let identity = None;
        Self { identity, len: meta.len(), modified: meta.modified().ok(), changed_while_read: false }
    }

    /// The same file as `before`, with another size or modification time: written in place.
    fn written_in_place_since(&self, before: &Self) -> bool {
        self.identity.is_some()
            && self.identity == before.identity
            && (self.len, self.modified) != (before.len, before.modified)
    }
}

/// The stamps of every file a read took, by path.
type Stamps = BTreeMap<PathBuf, Stamp>;

/// Why a read is not reported yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unsettled {
    /// A file changed in place, or while it was read: its writer may not be done.
    InPlace,
    /// A file became empty or whitespace only.
    Blank,
}

impl Unsettled {
    /// The quiet period before the confirming re-read.
    fn quiet(self) -> Duration {
        match self {
            Self::InPlace => IN_PLACE_SETTLE,
            Self::Blank => BLANK_CONFIRM,
        }
    }
}

/// A read waiting for its confirming re-read.
#[derive(Debug)]
struct Candidate {
    content: StoreContent,
    stamps: Stamps,
    why: Unsettled,
}

/// Why `now` (stamped `stamps`) may be a transient state, given the last reported content and the
/// stamps of the previous read; `None` when it can be reported now.
fn unsettled(last: Option<&StoreContent>, now: &StoreContent, seen: &Stamps, stamps: &Stamps) -> Option<Unsettled> {
    let fresh_blank = |value: &String, before: Option<&String>| value.trim().is_empty() && before != Some(value);
    let blank = now.singles.iter().any(|(key, value)| fresh_blank(value, last.and_then(|l| l.singles.get(key))))
        || now.groups.iter().any(|(group, items)| {
            items.iter().any(|(item, value)| {
                fresh_blank(value, last.and_then(|l| l.groups.get(group)).and_then(|items| items.get(item)))
            })
        });
    if blank {
        return Some(Unsettled::Blank);
    }
    let in_place = stamps.iter().any(|(path, stamp)| {
        stamp.changed_while_read || seen.get(path).is_some_and(|before| stamp.written_in_place_since(before))
    });
    in_place.then_some(Unsettled::InPlace)
}

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

    /// Reads one file, within the size limit, with what it looked like.
    fn read_file(&self, path: &Path) -> Result<(String, Stamp), SourceError> {
        use std::io::Read as _;
        let what = path.display().to_string();
        let io = |cause| SourceError::Io { path: what.clone(), cause };
        let file = std::fs::File::open(path).map_err(io)?;
        let before = Stamp::of(&file.metadata().map_err(io)?);
        let limit = self.limits.max_value_bytes;
        if before.len > limit {
            return Err(SourceError::TooLarge { what, size: before.len, limit });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(before.len).unwrap_or(0));
        // One byte past the limit, to notice a file that grew beyond it while read.
        (&file).take(limit.saturating_add(1)).read_to_end(&mut bytes).map_err(io)?;
        let size = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        if size > limit {
            return Err(SourceError::TooLarge { what, size, limit });
        }
        let after = Stamp::of(&file.metadata().map_err(io)?);
        let stamp = Stamp { changed_while_read: after != before || size != after.len, ..after };
        let text = String::from_utf8(bytes).map_err(|_| SourceError::NotText { what })?;
        Ok((text, stamp))
    }

    /// Reads the single file now.
    pub fn read(&self) -> Result<String, SourceError> {
        self.read_file(&self.path).map(|(text, _)| text)
    }

    /// Everything the store holds now.
    pub fn read_content(&self) -> Result<StoreContent, SourceError> {
        self.read_stamped().map(|(content, _)| content)
    }

    /// Everything the store holds now, with the stamp of every file read.
    fn read_stamped(&self) -> Result<(StoreContent, Stamps), SourceError> {
        let mut content = StoreContent::default();
        let mut stamps = Stamps::new();
        let mut read = |path: PathBuf| -> Result<String, SourceError> {
            let (text, stamp) = self.read_file(&path)?;
            stamps.insert(path, stamp);
            Ok(text)
        };
        match self.form {
            Form::SingleFile => {
                content.singles.insert(AGENT_CONFIGURATIONS_KEY.to_owned(), read(self.path.clone())?);
            }
            Form::Directory => {
                for (name, path) in self.entries(&self.path)? {
                    if path.is_dir() {
                        let mut items = BTreeMap::new();
                        for (item, item_path) in self.entries(&path)? {
                            if item_path.is_file() {
                                items.insert(item, read(item_path)?);
                            }
                        }
                        content.groups.insert(name, items);
                    } else if path.is_file() {
                        content.singles.insert(name, read(path)?);
                    }
                }
            }
        }
        Ok((content, stamps))
    }

    /// Visible entries of a directory (names not starting with `.`), following symlinks.
    fn entries(&self, dir: &Path) -> Result<Vec<(String, PathBuf)>, SourceError> {
        let io = |cause| SourceError::Io { path: dir.display().to_string(), cause };
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
        // A single file that is a symbolic link (to a git checkout, say) changes in its target's
        // directory: watch that one too. Best effort: the periodic re-read covers a target that
        // cannot be watched, or one the link is later pointed away from.
        if self.form == Form::SingleFile
            && let Ok(target) = std::fs::canonicalize(&self.path)
            && let Some(target_dir) = target.parent()
            && std::fs::canonicalize(&dir).ok().as_deref() != Some(target_dir)
            && let Err(error) = watcher.watch(target_dir, RecursiveMode::NonRecursive)
        {
            tracing::warn!(file = %self.path.display(), target = %target.display(), %error,
                "Cannot watch the directory of the file's symlink target; it is re-read periodically.");
        }
        Ok(watcher)
    }

    /// What changed between two reads, as updates.
    fn updates_between(&self, before: Option<&StoreContent>, now: &StoreContent) -> Vec<Update> {
        match (self.form, before) {
            (Form::SingleFile, _) => now
                .agent_configurations()
                .map(|text| Update::single(AGENT_CONFIGURATIONS_KEY, Some(text.to_owned())))
                .into_iter()
                .collect(),
            (Form::Directory, None) => vec![Update::Snapshot(now.clone())],
            (Form::Directory, Some(before)) => crate::changes(before, now),
        }
    }

    /// Re-reads on every settled burst of events (and every `rehash_every`) until the receiver is
    /// gone; a read that may be a transient state waits for its confirming re-read (see the
    /// module header).
    async fn watch_loop(&self, events: &Notify, reporter: &mut Reporter<'_>) -> ReceiverGone {
        let mut last: Option<StoreContent> = None;
        // The stamps of the previous successful read, reported or not.
        let mut seen = Stamps::new();
        let mut candidate: Option<Candidate> = None;
        // The first read is the one below, not an immediate tick.
        let mut rehash = tokio::time::interval_at(tokio::time::Instant::now() + self.rehash_every, self.rehash_every);
        rehash.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let mut confirm_after = None;
            let sent = match self.read_stamped() {
                Ok((now, _)) if last.as_ref() == Some(&now) => {
                    candidate = None;
                    Ok(())
                }
                Ok((now, stamps)) => {
                    let confirmed = candidate.as_ref().is_some_and(|c| c.content == now && c.stamps == stamps);
                    let why = if confirmed { None } else { unsettled(last.as_ref(), &now, &seen, &stamps) };
                    seen.clone_from(&stamps);
                    match why {
                        None => {
                            candidate = None;
                            reporter.established();
                            let batch = self.updates_between(last.as_ref(), &now);
                            last = Some(now);
                            reporter.send_all(batch).await
                        }
                        Some(why) => {
                            let again = candidate.as_ref().map(|c| c.why);
                            self.log_unsettled(why, again);
                            confirm_after = Some(why.quiet());
                            candidate = Some(Candidate { content: now, stamps, why });
                            Ok(())
                        }
                    }
                }
                // Forget what was read so the same content is delivered again after recovery.
                Err(error) => {
                    last = None;
                    candidate = None;
                    reporter.outage(error).await
                }
            };
            if let Err(gone) = sent {
                return gone;
            }
            match confirm_after {
                Some(quiet) => quiet_for(events, quiet).await,
                None => tokio::select! {
                    () = events.notified() => settle(events).await,
                    _ = rehash.tick() => {}
                },
            }
        }
    }

    /// Logs a read kept back: a blank file at WARN when it starts, the rest at DEBUG.
    fn log_unsettled(&self, why: Unsettled, before: Option<Unsettled>) {
        let store = self.describe();
        match why {
            Unsettled::Blank if before != Some(Unsettled::Blank) => tracing::warn!(
                store = %store,
                confirm_after_ms = BLANK_CONFIRM.as_millis(),
                "A file is empty; the last good content stays in service unless it is still empty after a quiet period \
                 (replace files by rename to avoid this)."
            ),
            _ => tracing::debug!(store = %store, ?why, "A file changed in place; waiting for it to settle."),
        }
    }
}

/// Writes `text` to `path` so readers never see half a file.
fn write_atomically(path: &Path, text: &str) -> Result<(), SourceError> {
    crate::fs::write_atomically(path, text.as_bytes())
        .map_err(|cause| SourceError::Write { path: path.display().to_string(), cause })
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

    fn reach(&self) -> crate::Reach {
        crate::Reach::Files
    }

    async fn run(&self, keys: KeySet, updates: mpsc::Sender<Update>, shutdown: CancellationToken) {
        supervise(self, &keys, updates, self.backoff.clone(), shutdown).await;
    }

    async fn put(&self, key: &str, value: Option<&str>, expect: Expect) -> Result<Option<Revision>, SourceError> {
        crate::only_seen(&self.describe(), expect)?;
        self.write(key, value).map(|()| None)
    }
}

impl FileSource {
    /// Writes (or deletes) one key's file.
    fn write(&self, key: &str, value: Option<&str>) -> Result<(), SourceError> {
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
                    Err(SourceError::Write { path: self.path.join(key).display().to_string(), cause: e })
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

/// Waits until no event has arrived for `quiet`, however long the events go on.
async fn quiet_for(events: &Notify, quiet: Duration) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(quiet) => return,
            () = events.notified() => {}
        }
    }
}

/// Waits until no event has arrived for [`DEFAULT_SETTLE`], or [`MAX_SETTLE`] at most, so an
/// editor's truncate-then-write is usually read once, whole.
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

    /// `agent.yaml` holding `text`, in a temporary directory.
    fn agent_file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.yaml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
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
        let (_dir, path) = agent_file("a");
        let (mut rx, stop, task) = spawn(FileSource::new(&path));
        // The first report is the current content, sent once the watch is in place.
        assert_eq!(next_value(&mut rx).await.as_deref(), Some("a"));

        std::fs::write(&path, "b").unwrap();
        assert_eq!(next_value(&mut rx).await.as_deref(), Some("b"));

        replace_by_rename(&path, "c");
        assert_eq!(next_value(&mut rx).await.as_deref(), Some("c"));

        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn a_missing_file_is_a_failure_then_recovers() {
        let (_dir, path) = agent_file("a");
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

        source.put("alarm.default.alarm-settings", Some("rules: {}"), crate::Expect::Seen).await.unwrap();
        match next(&mut rx).await {
            Update::Single { key, value, .. } => {
                assert_eq!(key, "alarm.default.alarm-settings");
                assert_eq!(value.as_deref(), Some("rules: {}"));
            }
            other => panic!("unexpected {other:?}"),
        }
        source.put("alarm.default.alarm-settings", None, crate::Expect::Seen).await.unwrap();
        assert!(matches!(next(&mut rx).await, Update::Single { value: None, .. }));

        std::fs::remove_file(dir.path().join("core.default.endpoint-name-grouping-openapi/a.yaml")).unwrap();
        match next(&mut rx).await {
            Update::Group { items: Some(items), .. } => assert!(items.is_empty()),
            other => panic!("unexpected {other:?}"),
        }
        assert!(source.put("../escape", Some("x"), crate::Expect::Seen).await.is_err());
        stop.cancel();
        task.await.unwrap();
    }

    #[tokio::test]
    async fn single_file_put_replaces_the_file_atomically() {
        let (dir, path) = agent_file("a");
        let source = FileSource::new(&path);
        source.put(AGENT_CONFIGURATIONS_KEY, Some("b"), crate::Expect::Seen).await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "b");
        assert!(source.put("alarm.default.alarm-settings", Some("x"), crate::Expect::Seen).await.is_err());
        assert!(source.put(AGENT_CONFIGURATIONS_KEY, None, crate::Expect::Seen).await.is_err());
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
        source.put(AGENT_CONFIGURATIONS_KEY, Some("b"), crate::Expect::Seen).await.unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "b");
        assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o7777, 0o640);
        // A later edit of the target is what the store reads.
        std::fs::write(&target, "c").unwrap();
        assert_eq!(source.read().unwrap(), "c");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn a_symlinked_file_is_watched_in_its_targets_directory() {
        let (dir, target, link) = crate::fs::linked_file("a");
        // No periodic re-read to fall back on: only a watch on git/ can see the edit.
        let (mut rx, stop, task) = spawn(FileSource::new(&link).with_rehash_every(Duration::from_secs(3600)));
        assert_eq!(next_value(&mut rx).await.as_deref(), Some("a"));

        let staged = dir.path().join("git/.agent.yaml.tmp");
        std::fs::write(&staged, "b").unwrap();
        std::fs::rename(&staged, &target).unwrap();
        assert_eq!(next_value(&mut rx).await.as_deref(), Some("b"));
        stop.cancel();
        task.await.unwrap();
    }

    const GOOD: &str =
        "configurations:\n  svc-a:\n    k: 1\n  svc-b:\n    agent.sample_n_per_3_secs: 20\n  svc-c:\n    k: 3\n";
    const NEW: &str =
        "configurations:\n  svc-a:\n    k: 1\n  svc-b:\n    agent.sample_n_per_3_secs: 30\n  svc-c:\n    k: 4\n";

    /// Replaces `path` the safe way: a temporary file beside it, renamed over it.
    fn replace_by_rename(path: &Path, text: &str) {
        let staged = path.with_file_name(".agent.yaml.tmp");
        std::fs::write(&staged, text).unwrap();
        std::fs::rename(&staged, path).unwrap();
    }

    /// The watch loop of `source` with events sent by hand (`events.notify_one()` after a file
    /// state is written, as the watcher would), so a test on paused time decides what the loop
    /// sees.
    fn watch_by_hand(source: FileSource) -> (mpsc::Receiver<Update>, Arc<Notify>, tokio::task::JoinHandle<()>) {
        let source = source.with_rehash_every(Duration::from_secs(3600));
        let events = Arc::new(Notify::new());
        let (tx, rx) = mpsc::channel(8);
        let loop_events = Arc::clone(&events);
        let task = tokio::spawn(async move {
            let mut reporter = Reporter::new(&tx, "test");
            let _ = source.watch_loop(&loop_events, &mut reporter).await;
        });
        (rx, events, task)
    }

    /// `agent.yaml` holding `GOOD`, watched by hand, its first value read.
    struct Watched {
        _dir: tempfile::TempDir,
        path: PathBuf,
        rx: mpsc::Receiver<Update>,
        events: Arc<Notify>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Watched {
        async fn good_file() -> Self {
            let (dir, path) = agent_file(GOOD);
            let (mut rx, events, task) = watch_by_hand(FileSource::new(&path));
            assert_eq!(next_value(&mut rx).await.as_deref(), Some(GOOD));
            Self { _dir: dir, path, rx, events, task }
        }
    }

    /// Writes `text` into the open file, in place, and reports the event.
    fn write_in_place(file: &mut std::fs::File, text: &str, events: &Notify) {
        use std::io::Write as _;
        file.write_all(text.as_bytes()).unwrap();
        file.flush().unwrap();
        events.notify_one();
    }

    /// Opens `path` for writing the way `>` does: truncated, same inode.
    fn truncate(path: &Path, events: &Notify) -> std::fs::File {
        let file = std::fs::OpenOptions::new().write(true).truncate(true).open(path).unwrap();
        events.notify_one();
        file
    }

    /// Nothing is reported for `period`.
    async fn nothing_for(rx: &mut mpsc::Receiver<Update>, period: Duration) {
        if let Ok(update) = tokio::time::timeout(period, rx.recv()).await {
            panic!("reported {update:?} within {period:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_truncate_then_a_late_write_in_place_never_reports_the_empty_file() {
        let Watched { _dir, path, mut rx, events, task } = Watched::good_file().await;

        // (a) of F2: `>` truncates, the writer pauses for 500 ms, then writes the whole text.
        let mut file = truncate(&path, &events);
        tokio::time::sleep(Duration::from_millis(500)).await;
        write_in_place(&mut file, GOOD, &events);
        nothing_for(&mut rx, BLANK_CONFIRM * 3).await;

        // The same with a new text: only the whole new text is reported.
        let mut file = truncate(&path, &events);
        tokio::time::sleep(Duration::from_millis(500)).await;
        write_in_place(&mut file, NEW, &events);
        assert_eq!(next_value(&mut rx).await.as_deref(), Some(NEW));
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_half_written_file_is_never_reported() {
        let Watched { _dir, path, mut rx, events, task } = Watched::good_file().await;

        // (b) and (c) of F2: cut between services, and inside a value (`2` of `30`).
        for cut in [NEW.find("  svc-b:").unwrap(), NEW.find("30").unwrap() + 1] {
            let mut file = truncate(&path, &events);
            write_in_place(&mut file, &NEW[..cut], &events);
            let started = tokio::time::Instant::now();
            tokio::time::sleep(Duration::from_millis(500)).await;
            write_in_place(&mut file, &NEW[cut..], &events);
            assert_eq!(next_value(&mut rx).await.as_deref(), Some(NEW), "cut at {cut}");
            let waited = started.elapsed();
            assert!(waited >= Duration::from_millis(500) + IN_PLACE_SETTLE, "reported after {waited:?}");

            // Back to GOOD by rename, for the next round.
            replace_by_rename(&path, GOOD);
            events.notify_one();
            assert_eq!(next_value(&mut rx).await.as_deref(), Some(GOOD));
        }
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_rename_is_reported_at_once_and_an_in_place_write_after_it_settles() {
        let Watched { _dir, path, mut rx, events, task } = Watched::good_file().await;

        replace_by_rename(&path, NEW);
        events.notify_one();
        let started = tokio::time::Instant::now();
        assert_eq!(next_value(&mut rx).await.as_deref(), Some(NEW));
        assert!(started.elapsed() <= MAX_SETTLE, "a rename is reported after {:?}", started.elapsed());

        std::fs::write(&path, GOOD).unwrap();
        events.notify_one();
        let started = tokio::time::Instant::now();
        assert_eq!(next_value(&mut rx).await.as_deref(), Some(GOOD));
        let waited = started.elapsed();
        assert!(
            (IN_PLACE_SETTLE..IN_PLACE_SETTLE * 2).contains(&waited),
            "an in-place write is reported after {waited:?}"
        );
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_file_that_stays_empty_is_reported_after_the_confirming_read() {
        let Watched { _dir, path, mut rx, events, task } = Watched::good_file().await;

        // Even by rename: whitespace only is kept back until it is confirmed.
        replace_by_rename(&path, " \n\n");
        events.notify_one();
        nothing_for(&mut rx, BLANK_CONFIRM).await;
        assert_eq!(next_value(&mut rx).await.as_deref(), Some(" \n\n"), "a deliberate \"no services\" still works");

        std::fs::write(&path, GOOD).unwrap();
        events.notify_one();
        assert_eq!(next_value(&mut rx).await.as_deref(), Some(GOOD));
        // Emptied in place and left so.
        drop(truncate(&path, &events));
        nothing_for(&mut rx, BLANK_CONFIRM).await;
        assert_eq!(next_value(&mut rx).await.as_deref(), Some(""));
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn in_the_directory_form_an_emptied_key_file_waits_for_its_confirmation() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("alarm.default.alarm-settings");
        std::fs::write(&key, "rules: {}").unwrap();
        let (mut rx, events, task) = watch_by_hand(FileSource::directory(dir.path()));
        assert!(matches!(next(&mut rx).await, Update::Snapshot(_)));
        let mut file = truncate(&key, &events);
        tokio::time::sleep(Duration::from_millis(500)).await;
        write_in_place(&mut file, "rules: {a: 1}", &events);
        match next(&mut rx).await {
            Update::Single { value, .. } => assert_eq!(value.as_deref(), Some("rules: {a: 1}")),
            other => panic!("unexpected {other:?}"),
        }
        task.abort();
    }

    #[test]
    fn refuses_oversized_files() {
        let (_dir, path) = agent_file(&"x".repeat(100));
        let source = FileSource::new(&path).with_limits(Limits { max_value_bytes: 10 });
        assert!(matches!(source.read(), Err(SourceError::TooLarge { size: 100, .. })));
    }
}
