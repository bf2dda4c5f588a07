//! The releases on disk: one JSON file per release, `<data dir>/releases/<id, 20 digits>.json`,
//! written by the persister off the serving path, read back at start-up (files that cannot be
//! trusted are moved aside as `*.corrupt`), removed by retention.

#[allow(clippy::wildcard_imports)]
use super::*;

/// What a release file holds: the release and the document text.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct ReleaseFile {
    pub(super) format: u32,
    #[serde(flatten)]
    pub(super) release: Release,
    pub(super) document: Option<String>,
}

pub(super) fn release_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.json"))
}

pub(super) fn read_release_file(path: &Path) -> Result<ReleaseFile, ReleaseError> {
    let display = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|cause| ReleaseError::Io { path: display.clone(), cause })?;
    let file: ReleaseFile = serde_json::from_str(&text)
        .map_err(|e| ReleaseError::Format { path: display.clone(), message: e.to_string() })?;
    if file.format != 1 {
        return Err(ReleaseError::Format { path: display, message: format!("unknown format {}", file.format) });
    }
    Ok(file)
}

/// The id a file name starts with (`00000000000000000005.json`, `.00000000000000000005.json.*.tmp`,
/// `00000000000000000005.json.corrupt`), if any.
pub(super) fn id_in_name(name: &str) -> Option<u64> {
    let digits: String = name.trim_start_matches('.').chars().take_while(char::is_ascii_digit).collect();
    if digits.is_empty() {
        return None;
    }
    // Too many digits for a u64: as high as can be, so it is never trusted.
    Some(digits.parse().unwrap_or(u64::MAX))
}

/// Moves a release file that cannot be trusted aside (`*.corrupt`), so it is neither read again nor
/// overwritten, and says so.
pub(super) fn quarantine(path: &Path, error: &ReleaseError) {
    let mut aside = path.as_os_str().to_owned();
    aside.push(".corrupt");
    match std::fs::rename(path, &aside) {
        Ok(()) => {
            tracing::error!(%error, to = %Path::new(&aside).display(), "A release file cannot be trusted; moved it aside.")
        }
        Err(rename) => {
            tracing::error!(%error, %rename, "A release file cannot be trusted, nor moved aside; skipping it.")
        }
    }
}

impl ReleaseLog {
    /// The log in `<data_dir>/releases`, with the releases already there (files that cannot be
    /// trusted are moved aside; the directory is created on the first release), written by a
    /// persister of its own. A directory that cannot be read is logged and the log starts empty:
    /// its releases then fail to be written, and writes say so.
    pub fn open(data_dir: &Path, retention: usize) -> Result<Self, ReleaseError> {
        Self::open_with(data_dir, retention, Persister::spawn())
    }

    /// [`Self::open`], writing through `persister`.
    pub fn open_with(data_dir: &Path, retention: usize, persister: Persister) -> Result<Self, ReleaseError> {
        let dir = data_dir.join("releases");
        let log = Self { dir: Some(dir.clone()), persister: Some(persister), ..Self::in_memory(retention) };
        let mut releases = Vec::new();
        // Every id any file name claims, trusted or not: the next id is above all of them.
        let mut highest_seen = 0;
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => Some(entries),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(cause) => {
                let error = ReleaseError::Io { path: dir.display().to_string(), cause };
                tracing::error!(%error, "Cannot read the release history; new releases will fail to be written.");
                None
            }
        };
        for entry in entries.into_iter().flatten() {
            let entry = entry.map_err(|cause| ReleaseError::Io { path: dir.display().to_string(), cause })?;
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let named = id_in_name(&name);
            if let Some(id) = named.filter(|&id| id <= MAX_ID) {
                highest_seen = highest_seen.max(id);
            }
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let checked = read_release_file(&path).and_then(|file| match named {
                Some(id) if id == file.release.meta.id && id <= MAX_ID && name == format!("{id:020}.json") => Ok(file),
                _ => Err(ReleaseError::Format {
                    path: path.display().to_string(),
                    message: format!(
                        "it holds release {} under another name, or an id above {MAX_ID}",
                        file.release.meta.id
                    ),
                }),
            });
            match checked {
                Ok(file) => releases.push(file.release),
                Err(error) => quarantine(&path, &error),
            }
        }
        releases.sort_by_key(|r| r.meta.id);
        let mut last_changes = HashMap::new();
        for release in &releases {
            for change in &release.changes {
                last_changes.insert(change.service.clone(), (release.meta.id, release.meta.at_ms));
            }
        }
        let releases: VecDeque<_> = releases.iter().map(|r| Arc::new(ReleaseSummary::of(r))).collect();
        let (next_id, reserved) = reserve_at_start(data_dir, highest_seen);
        {
            let mut state = log.lock();
            state.next_id = next_id;
            state.reserved = reserved;
            state.reserving = reserved;
            state.releases = releases;
            state.last_changes = last_changes;
        }
        log.enforce_retention();
        Ok(log)
    }

    /// Writes an appended release's file (off the serving path), the reservation it needs and
    /// the removal of the files retention dropped.
    pub(super) fn save(&self, release: &Arc<Release>, text: Option<&str>, appended: Appended) -> Arc<ReleaseSummary> {
        let Appended { summary, evicted, reserve } = appended;
        if let (Some(dir), Some(persister)) = (&self.dir, &self.persister) {
            if let Some(target) = reserve {
                self.write_reservation(dir, persister, target);
            }
            let file = ReleaseFile { format: 1, release: (**release).clone(), document: text.map(str::to_owned) };
            match serde_json::to_vec_pretty(&file) {
                Ok(bytes) => {
                    let (state, persisted, id) =
                        (Arc::clone(&self.state), Arc::clone(&self.persisted), release.meta.id);
                    let done = Box::new(move |result: std::io::Result<()>| {
                        match result {
                            Ok(()) => {
                                lock_state(&state).documents.remove(&id);
                            }
                            Err(error) => {
                                let why = format!("release {id}'s file could not be written: {error}");
                                lock_state(&state).unsaved.insert(id, why);
                                tracing::error!(release = id, %error, "Cannot write the release to disk: its change is served, but its history is kept in memory only until the server stops.");
                            }
                        }
                        persisted.send_modify(|n| *n = n.wrapping_add(1));
                    });
                    persister.write(release_path(dir, release.meta.id), bytes, Some(done));
                }
                Err(error) => {
                    self.lock()
                        .unsaved
                        .insert(release.meta.id, format!("release {} could not be encoded: {error}", release.meta.id));
                    tracing::error!(release = release.meta.id, %error, "Cannot encode the release; it is kept in memory.")
                }
            }
            self.delete_files(&evicted);
        }
        summary
    }

    pub(super) fn delete_files(&self, ids: &[u64]) {
        let (Some(dir), Some(persister)) = (&self.dir, &self.persister) else { return };
        for id in ids {
            persister.remove(release_path(dir, *id));
        }
    }
}
