//! The conformance backend of the file store, in its directory form (one file per key, one
//! subdirectory per group): written with `std::fs`, by rename as editors and ConfigMap mounts do;
//! an outage is the directory moved away and back.

use std::path::{Path, PathBuf};
use std::time::Duration;

use skyconf_sources::file::FileSource;

use super::{Capabilities, StoreBackend};

/// A store directory in a temporary directory.
#[derive(Debug)]
pub struct FileBackend {
    dir: tempfile::TempDir,
}

impl FileBackend {
    /// An empty store directory.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::create_dir(dir.path().join("store")).unwrap();
        Self { dir }
    }

    fn store(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    fn away(&self) -> PathBuf {
        self.dir.path().join("away")
    }
}

impl Default for FileBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// Writes `path` by rename, so the source never reads half a file.
fn write(path: &Path, value: &str) {
    let staged = path.with_file_name(format!(".{}.tmp", path.file_name().unwrap().to_string_lossy()));
    std::fs::write(&staged, value).unwrap();
    std::fs::rename(&staged, path).unwrap();
}

impl StoreBackend for FileBackend {
    type Source = FileSource;

    fn name(&self) -> &str {
        "file (directory)"
    }

    fn capabilities(&self) -> Capabilities {
        // A file has no compare-and-swap: the store writes what it is given.
        Capabilities { compare_and_swap: false, ..Capabilities::default() }
    }

    fn source(&self) -> FileSource {
        // Re-read often: a directory moved back is noticed by the periodic re-read.
        FileSource::directory(self.store()).with_rehash_every(Duration::from_millis(100))
    }

    async fn put(&mut self, key: &str, value: &str) {
        write(&self.store().join(key), value);
    }

    async fn delete(&mut self, key: &str) {
        std::fs::remove_file(self.store().join(key)).unwrap();
    }

    async fn put_item(&mut self, group: &str, item: &str, value: &str) {
        let dir = self.store().join(group);
        std::fs::create_dir_all(&dir).unwrap();
        write(&dir.join(item), value);
    }

    async fn delete_item(&mut self, group: &str, item: &str) {
        std::fs::remove_file(self.store().join(group).join(item)).unwrap();
    }

    async fn stop(&mut self) {
        std::fs::rename(self.store(), self.away()).unwrap();
    }

    async fn restart(&mut self) {
        std::fs::rename(self.away(), self.store()).unwrap();
    }
}
