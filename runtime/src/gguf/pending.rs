//! An output file that appears at its path whole or not at all.
//!
//! A model file takes minutes to write, and a user stops a `convert` or a
//! `quantize` with Ctrl-C, or the OOM killer does. On Linux the file is
//! therefore made without a name (`O_TMPFILE`) and linked into its directory
//! only once it is complete: a process that dies mid-write leaves nothing on
//! disk, not even gigabytes under a hidden name. Where the system or the
//! filesystem has no unnamed files, it is written as
//! `.tiletune-write-….tmp<pid>` beside its path and renamed; the conversion
//! cache's `clean` recognises that name.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// A file being written in one directory, named only by [`PendingFile::persist`].
pub(crate) struct PendingFile {
    backing: Backing,
}

enum Backing {
    /// The file and the directory it is linked into when complete.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    Unnamed(File, PathBuf),
    Named(tempfile::NamedTempFile),
}

/// The start of every temporary name a writer gives a file beside its output.
const TEMP_PREFIX: &str = ".tiletune-write-";

/// `.tmp<pid>`, the end of a temporary name that tells `clean` which
/// process wrote it.
fn pid_suffix() -> String {
    format!(".tmp{}", std::process::id())
}

fn builder(suffix: &str) -> tempfile::Builder<'_, '_> {
    let mut b = tempfile::Builder::new();
    b.prefix(TEMP_PREFIX).suffix(suffix);
    // A model file is readable by all, as any file the user makes (the
    // umask applies); the temporary file's own default is owner-only.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        b.permissions(std::fs::Permissions::from_mode(0o666));
    }
    b
}

impl PendingFile {
    /// A new empty file in `dir`, with no name where the system allows it.
    pub(crate) fn create_in(dir: &Path) -> io::Result<Self> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Some(file) = unnamed::create_in(dir) {
            return Ok(Self {
                backing: Backing::Unnamed(file, dir.to_path_buf()),
            });
        }
        let file = builder(&pid_suffix()).tempfile_in(dir)?;
        Ok(Self {
            backing: Backing::Named(file),
        })
    }

    /// Whether the file has no name while it is written.
    #[cfg(test)]
    fn is_unnamed(&self) -> bool {
        match self.backing {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Backing::Unnamed(..) => true,
            Backing::Named(_) => false,
        }
    }

    pub(crate) fn as_file(&self) -> &File {
        match &self.backing {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Backing::Unnamed(f, _) => f,
            Backing::Named(t) => t.as_file(),
        }
    }

    /// Flushes the file to disk and gives it the name `path`, which must be
    /// in the directory it was made in, replacing any file there.
    pub(crate) fn persist(self, path: &Path) -> io::Result<()> {
        self.as_file().sync_all()?;
        match self.backing {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Backing::Unnamed(file, dir) => {
                // A link cannot replace a file, and the output may exist
                // already: link under a temporary name, then rename over it.
                let linked =
                    builder(&pid_suffix()).make_in(&dir, |name| unnamed::link(&file, name))?;
                linked.persist(path).map_err(|e| e.error)?;
                Ok(())
            }
            Backing::Named(t) => t.persist(path).map(drop).map_err(|e| e.error),
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod unnamed {
    use std::ffi::CString;
    use std::fs::File;
    use std::io;
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};

    fn fd_path(file: &File) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
    }

    fn c_path(p: &Path) -> io::Result<CString> {
        CString::new(p.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    }

    /// An unnamed file in `dir`, or `None` where the kernel or the
    /// filesystem cannot make one (or where it could not be named later).
    pub(super) fn create_in(dir: &Path) -> Option<File> {
        let c = c_path(dir).ok()?;
        // SAFETY: `c` is a NUL-terminated path; the mode argument is read
        // because O_TMPFILE is given.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC,
                0o666 as libc::c_uint,
            )
        };
        if fd < 0 {
            return None;
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        let file = unsafe { File::from_raw_fd(fd) };
        // The file is named through /proc (linking by descriptor alone needs
        // a capability): without /proc, the finished file could not be named.
        std::fs::metadata(fd_path(&file)).ok()?;
        Some(file)
    }

    /// Gives the unnamed `file` the name `name`, which must not exist.
    pub(super) fn link(file: &File, name: &Path) -> io::Result<()> {
        let from = c_path(&fd_path(file))?;
        let to = c_path(name)?;
        // SAFETY: both are NUL-terminated paths that live across the call.
        let r = unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                libc::AT_SYMLINK_FOLLOW,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// Whether `dir`'s filesystem can make unnamed files that can be named
/// later, asked of the kernel directly (for the tests).
#[cfg(test)]
pub(crate) fn unnamed_files_in(dir: &Path) -> bool {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_TMPFILE | libc::O_WRONLY, 0o600) };
        if fd < 0 {
            return false;
        }
        // SAFETY: `fd` was opened above and is not used after this.
        unsafe { libc::close(fd) };
        Path::new("/proc/self/fd").is_dir()
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = dir;
        false
    }
}

/// The names in `dir`, sorted (for the tests).
#[cfg(test)]
pub(crate) fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn the_file_appears_only_when_persisted_and_replaces_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.gguf");
        std::fs::write(&path, b"old").unwrap();
        let p = PendingFile::create_in(dir.path()).unwrap();
        (&mut p.as_file()).write_all(b"new bytes").unwrap();
        let during = names(dir.path());
        if p.is_unnamed() {
            assert_eq!(during, ["out.gguf"]);
        } else {
            assert_eq!(during.len(), 2, "{during:?}");
        }
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        p.persist(&path).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new bytes");
        assert_eq!(names(dir.path()), ["out.gguf"]);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_ne!(
                mode & 0o044,
                0,
                "readable by others as the umask allows: {mode:o}"
            );
        }
    }

    #[test]
    fn a_file_dropped_unfinished_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = PendingFile::create_in(dir.path()).unwrap();
        (&mut p.as_file()).write_all(&[7; 4096]).unwrap();
        drop(p);
        assert!(names(dir.path()).is_empty());
    }

    /// Where the directory's filesystem can make an unnamed file (ext4, xfs,
    /// btrfs, tmpfs, f2fs: where models live), the writer makes one, so a
    /// process killed mid-write leaves no file.
    #[test]
    fn where_the_filesystem_allows_the_file_has_no_name_while_it_is_written() {
        let dir = tempfile::tempdir().unwrap();
        let p = PendingFile::create_in(dir.path()).unwrap();
        assert_eq!(
            p.is_unnamed(),
            unnamed_files_in(dir.path()),
            "O_TMPFILE in {}",
            dir.path().display()
        );
    }
}
