//! Where haloscope puts a file that another program must open by path (the injection library
//! CUDA loads): never at a name another user can predict or write. First choice, an anonymous
//! memory file (`memfd_create`), sealed against any change and named `/proc/self/fd/N` (the
//! descriptor is inherited by the children, so each opens its own copy of it); where there is
//! no memfd or no /proc, a private folder (`mkdtemp`, 0700) under `TMPDIR` holding the file,
//! created `O_EXCL | O_NOFOLLOW`. Either goes away with the [`Placed`] value.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::Result;
use rustix::fs::{MemfdFlags, Mode, OFlags, SealFlags};

use crate::error::UsageError;

/// A file placed for another program to open: `path()` names it while this value lives.
pub struct Placed {
    path: PathBuf,
    /// What keeps it: the memory file's descriptor, or the private folder.
    _keep: Keep,
}

enum Keep {
    Memory(#[allow(dead_code)] OwnedFd),
    Folder(#[allow(dead_code)] tempfile::TempDir),
}

impl Placed {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether it is a memory file (no file system holds it).
    pub fn in_memory(&self) -> bool {
        matches!(self._keep, Keep::Memory(_))
    }
}

/// `bytes` as a file named `name` that children of this process can open by `path()`:
/// a sealed memory file where the system has one, else a private folder's file.
pub fn place(name: &str, bytes: &[u8]) -> Result<Placed> {
    match in_memory(name, bytes) {
        Ok(p) => Ok(p),
        Err(_) => in_private_folder(&std::env::temp_dir(), name, bytes),
    }
}

/// The memory file: written, sealed (no write, shrink or grow, no seal removed), left open
/// across `exec` (not close-on-exec) so that `/proc/self/fd/N` names it in each child too.
fn in_memory(name: &str, bytes: &[u8]) -> std::io::Result<Placed> {
    let fd = rustix::fs::memfd_create(name, MemfdFlags::ALLOW_SEALING)?;
    let mut f = File::from(fd);
    f.write_all(bytes)?;
    f.flush()?;
    rustix::fs::fcntl_add_seals(
        &f,
        SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL,
    )?;
    let fd = OwnedFd::from(f);
    let path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    // No /proc (a chroot, a container without it): the caller falls back to a folder.
    let seen = std::fs::metadata(&path)?;
    if seen.len() != bytes.len() as u64 {
        return Err(std::io::Error::other(
            "/proc/self/fd does not show the memory file",
        ));
    }
    Ok(Placed {
        path,
        _keep: Keep::Memory(fd),
    })
}

/// The fallback: a folder of our own under `tmp` (made 0700 with a random name, removed with
/// the value), the file in it created `O_EXCL | O_NOFOLLOW`, 0700.
pub(crate) fn in_private_folder(tmp: &Path, name: &str, bytes: &[u8]) -> Result<Placed> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("haloscope-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(tmp)
        .map_err(|e| {
            UsageError(format!(
                "TMPDIR {}: cannot make a private folder there: {e}",
                tmp.display()
            ))
        })?;
    let path = dir.path().join(name);
    let mut f = create_new(&path).map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    f.write_all(bytes)
        .and_then(|()| f.flush())
        .map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    Ok(Placed {
        path,
        _keep: Keep::Folder(dir),
    })
}

/// A new file at `path`, 0700: never one that is there already, nor through a symlink.
pub(crate) fn create_new(path: &Path) -> std::io::Result<File> {
    let fd = rustix::fs::open(
        path,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o700),
    )?;
    Ok(File::from(fd))
}

/// A private folder for haloscope's own scratch files (0700, a random name under `TMPDIR`,
/// removed when dropped); an unusable `TMPDIR` named in the error.
pub fn scratch_folder(prefix: &str) -> Result<tempfile::TempDir> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = std::env::temp_dir();
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir_in(&tmp)
        .map_err(|e| {
            UsageError(format!(
                "TMPDIR {}: cannot make a private folder there: {e}",
                tmp.display()
            ))
            .into()
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn the_memory_file_is_on_no_file_system_and_cannot_be_changed() {
        let p = place("haloscope-inject.so", b"\x7fELF library bytes").unwrap();
        assert!(p.in_memory(), "this system has memfd_create and /proc");
        let link = std::fs::read_link(p.path()).unwrap();
        assert!(
            link.to_string_lossy().starts_with("/memfd:haloscope-inject.so"),
            "{}",
            link.display()
        );
        assert_eq!(std::fs::read(p.path()).unwrap(), b"\x7fELF library bytes");
        // Sealed: no one with the descriptor (every child has it) can rewrite it.
        let w = std::fs::OpenOptions::new().write(true).open(p.path());
        let rewritten = w.and_then(|mut f| f.write_all(b"evil"));
        assert!(rewritten.is_err(), "a sealed memory file refuses writes");
    }

    #[test]
    fn the_fallback_is_a_private_folder_and_a_new_file_removed_at_the_end() {
        let tmp = tempfile::tempdir().unwrap();
        let p = in_private_folder(tmp.path(), "haloscope-inject.so", b"lib").unwrap();
        assert!(!p.in_memory());
        let dir = p.path().parent().unwrap().to_path_buf();
        assert_eq!(dir.parent().unwrap(), tmp.path());
        assert!(
            dir.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("haloscope-")
        );
        let d = std::fs::symlink_metadata(&dir).unwrap();
        assert!(d.is_dir());
        assert_eq!(d.permissions().mode() & 0o777, 0o700, "only its owner enters it");
        let f = std::fs::symlink_metadata(p.path()).unwrap();
        assert!(f.is_file());
        assert_eq!(
            f.permissions().mode() & 0o077,
            0,
            "no one else reads or writes it"
        );
        assert_eq!(f.uid(), rustix::process::geteuid().as_raw());
        assert_eq!(std::fs::read(p.path()).unwrap(), b"lib");
        drop(p);
        assert!(!dir.exists(), "removed at the end");
    }

    #[test]
    fn a_new_file_is_never_one_planted_before_nor_a_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let planted = tmp.path().join("planted");
        std::fs::write(&planted, b"the attacker's").unwrap();
        let e = create_new(&planted).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists, "O_EXCL");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(create_new(&link).is_err(), "a symlink is not followed");
        let dangling = tmp.path().join("dangling");
        std::os::unix::fs::symlink(tmp.path().join("nothing"), &dangling).unwrap();
        assert!(create_new(&dangling).is_err(), "nor a dangling one");
        assert!(!tmp.path().join("nothing").exists());
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&planted).unwrap(), b"the attacker's");
    }

    #[test]
    fn an_unusable_tmpdir_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("no-such-folder");
        let e = in_private_folder(&missing, "x.so", b"x")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(&missing.display().to_string()), "{e}");
    }
}
