//! Writing a file so that no reader, and no crash, ever sees half of it.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// How many symbolic links [`write_atomically`] follows before it gives up (Linux's limit).
const MAX_SYMLINK_HOPS: usize = 40;

/// Replaces `path` with `bytes`: writes a temporary file beside it, flushes it to disk, renames it
/// over `path` and flushes the directory, so after a crash the file holds either the old or the
/// new content, whole. The temporary file is removed when any step fails.
///
/// When `path` is a symbolic link, the file it points to is replaced, in its own directory, and
/// the link stays a link (a file managed elsewhere, such as a git checkout, keeps receiving the
/// write). The new file keeps the permissions and, on Unix, the owner and group of the file it
/// replaces; an owner this process may not give (not running as root) is logged and the file is
/// left owned by this process.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let path = &resolve_symlinks(path)?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let staged = dir.join(format!(".{name}.skyconf-{}.tmp", std::process::id()));
    let existing = std::fs::metadata(path).ok();
    let written = (|| {
        // A staging file left by a crash of a process with the same id may be read-only.
        let _ = std::fs::remove_file(&staged);
        let mut file = std::fs::File::create(&staged)?;
        file.write_all(bytes)?;
        if let Some(existing) = &existing {
            keep_owner(&file, existing, path);
            // After the owner: changing it may clear set-id bits.
            file.set_permissions(existing.permissions())?;
        }
        file.sync_all()?;
        std::fs::rename(&staged, path)
    })();
    if let Err(error) = written {
        let _ = std::fs::remove_file(&staged);
        return Err(error);
    }
    // The rename is durable only once the directory entry is.
    std::fs::File::open(dir)?.sync_all()
}

/// The file `path` names once every symbolic link is followed; a link to a file that does not
/// exist yet resolves to that file. Relative targets are relative to the link's directory.
fn resolve_symlinks(path: &Path) -> std::io::Result<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_SYMLINK_HOPS {
        match std::fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = std::fs::read_link(&current)?;
                current = match current.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            _ => return Ok(current),
        }
    }
    Err(std::io::Error::other(format!("{}: too many levels of symbolic links", path.display())))
}

/// Gives `file` the owner and group of `existing`, where this process may.
#[cfg(unix)]
fn keep_owner(file: &std::fs::File, existing: &std::fs::Metadata, path: &Path) {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(staged) = file.metadata() else { return };
    if (staged.uid(), staged.gid()) == (existing.uid(), existing.gid()) {
        return;
    }
    if let Err(error) = std::os::unix::fs::fchown(file, Some(existing.uid()), Some(existing.gid())) {
        tracing::warn!(
            path = %path.display(),
            uid = existing.uid(),
            gid = existing.gid(),
            %error,
            "cannot keep the owner of the replaced file; the new file is owned by this process"
        );
    }
}

#[cfg(not(unix))]
fn keep_owner(_file: &std::fs::File, _existing: &std::fs::Metadata, _path: &Path) {}

/// A temporary directory with `git/agent.yaml` holding `text` and `etc/agent.yaml` a relative
/// link to it, as a checkout or a mounted volume links a file: the directory, the target and the
/// link.
#[cfg(all(test, unix))]
pub(crate) fn linked_file(text: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("git")).unwrap();
    std::fs::create_dir_all(dir.path().join("etc")).unwrap();
    let target = dir.path().join("git/agent.yaml");
    std::fs::write(&target, text).unwrap();
    let link = dir.path().join("etc/agent.yaml");
    std::os::unix::fs::symlink("../git/agent.yaml", &link).unwrap();
    (dir, target, link)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_file_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/file.json");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let names: Vec<_> =
            std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["file.json"]);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_is_written_through_to_its_target_which_keeps_its_mode_and_owner() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let (dir, target, link) = linked_file("old");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o444)).unwrap();
        // Owned by someone else, where this process may give files away (root, as in CI images).
        let foreign = std::os::unix::fs::chown(&target, Some(65534), Some(65534)).is_ok();
        let before = std::fs::metadata(&target).unwrap();
        // A relative link, then a link to that link.
        let outer = dir.path().join("outer.yaml");
        std::os::unix::fs::symlink(&link, &outer).unwrap();

        write_atomically(&outer, b"new").unwrap();
        for l in [&link, &outer] {
            assert!(std::fs::symlink_metadata(l).unwrap().file_type().is_symlink(), "{} is still a link", l.display());
        }
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        let after = std::fs::metadata(&target).unwrap();
        assert_eq!(after.permissions().mode() & 0o7777, 0o444);
        assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
        if foreign {
            assert_eq!(after.uid(), 65534);
        }
        for d in ["etc", "git"] {
            let names: Vec<_> =
                std::fs::read_dir(dir.path().join(d)).unwrap().map(|e| e.unwrap().file_name()).collect();
            assert_eq!(names, ["agent.yaml"], "no staging file left in {d}");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_dangling_symlink_creates_its_target_and_a_loop_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("sub/target", &link).unwrap();
        write_atomically(&link, b"x").unwrap();
        assert_eq!(std::fs::read(dir.path().join("sub/target")).unwrap(), b"x");
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());

        let a = dir.path().join("a");
        std::os::unix::fs::symlink("b", &a).unwrap();
        std::os::unix::fs::symlink("a", dir.path().join("b")).unwrap();
        assert!(write_atomically(&a, b"x").is_err());
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("file");
        write_atomically(&path, b"old").unwrap();
        // A directory where the file should be: the rename fails.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir_all(blocked.join("inner")).unwrap();
        assert!(write_atomically(&blocked, b"new").is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }
}
