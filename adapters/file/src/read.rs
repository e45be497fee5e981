//! Reading one watched file: only regular files, only up to a limit, never a blocking open.
//!
//! A watched directory is writable by whoever writes configuration, and what sits in it is
//! not always a file. The rules, for the File registry, the config source and
//! `wayfinder validate` alike:
//!
//! - **Only regular files are read.** A FIFO, a socket or a device (or a symlink to one, such
//!   as `/dev/zero`) is refused as [`ReadError::NotRegular`] without being read. The path is
//!   looked at first (`stat`, which never blocks), so a device is normally not even opened;
//!   since it may be replaced between that look and the open, the open itself is
//!   non-blocking (`O_NONBLOCK`: opening a FIFO without a writer would wait for one forever)
//!   and does not adopt a terminal (`O_NOCTTY`), and the opened handle is checked again before
//!   anything is read from it.
//! - **Only files up to the limit are read.** A file whose size is over the limit is refused
//!   as [`ReadError::TooLarge`] before a byte is read (a sparse file of 2 GiB costs nothing to
//!   make); a file that grows past the limit while it is read is refused too, after reading
//!   at most the limit and one byte.
//! - **A path that holds no file is not an error.** Gone, replaced by a directory, or a
//!   dangling symlink: `Ok(None)`, which the watchers take as a deletion.
//! - Anything else (permission denied, an I/O error) is [`ReadError::Io`].

use std::fs::{self, File, Metadata};
use std::io::{self, ErrorKind, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

use wayfinder_registry::RegistryError;

/// The default of [`crate::Config::max_file_bytes`] and `--max-file-bytes`: 64 MiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The path is a FIFO, a socket or a device, or a symlink to one.
    #[error("not a regular file ({kind}); only regular files are read")]
    NotRegular {
        /// What it is: `a FIFO`, `a socket`, `a character device`, `a block device`.
        kind: &'static str,
    },
    /// The file is larger than the limit.
    #[error("the file is {size} bytes, over the limit of {limit} bytes (--max-file-bytes)")]
    TooLarge {
        /// Its size when it was refused (for a file that grew while read: the limit + 1).
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// It cannot be opened or read (permission denied, an I/O error).
    #[error("cannot read the file: {0}")]
    Io(#[from] io::Error),
}

impl ReadError {
    /// The error as a stream item naming `path`: a file that is not regular or too large is
    /// [`RegistryError::Invalid`]; one that cannot be read is [`RegistryError::Unavailable`].
    pub fn at(&self, path: &Path) -> RegistryError {
        let origin = path.display().to_string();
        let detail = format!("{self}; its last good contents stay");
        match self {
            Self::NotRegular { .. } | Self::TooLarge { .. } => {
                RegistryError::Invalid { origin, detail }
            }
            Self::Io(_) => RegistryError::Unavailable { origin, detail },
        }
    }
}

/// The bytes of the regular file at `path`, at most `limit` of them; `None` when the path
/// holds no file (see the module docs). Blocking: call it where blocking is fine.
pub fn read(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, ReadError> {
    let file = match open(path) {
        Ok(file) => file,
        Err(ReadError::Io(err)) if is_absent(&err) => return Ok(None),
        Err(err) => return Err(err),
    };
    let metadata = file.metadata()?;
    if metadata.is_dir() {
        return Ok(None);
    }
    regular(&metadata)?;
    if metadata.len() > limit {
        return Err(ReadError::TooLarge {
            size: metadata.len(),
            limit,
        });
    }
    // The size is a hint (the file may change while read): never trust it past the limit.
    let capacity = usize::try_from(metadata.len()).unwrap_or(0);
    let mut bytes = Vec::with_capacity(capacity);
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    let read = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
    if read > limit {
        return Err(ReadError::TooLarge { size: read, limit });
    }
    Ok(Some(bytes))
}

/// Opens `path` for reading if it is a regular file (or a directory, which the caller sorts
/// out), without blocking and without opening anything else when it can tell beforehand.
pub(crate) fn open(path: &Path) -> Result<File, ReadError> {
    let metadata = fs::metadata(path)?;
    if !metadata.is_dir() {
        regular(&metadata)?;
    }
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)?;
    Ok(file)
}

/// Whether an error means that there is no file at the path (any more).
fn is_absent(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        ErrorKind::NotFound | ErrorKind::IsADirectory | ErrorKind::NotADirectory
    )
}

fn regular(metadata: &Metadata) -> Result<(), ReadError> {
    let file_type = metadata.file_type();
    let kind = if file_type.is_file() {
        return Ok(());
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else {
        "not a file"
    };
    Err(ReadError::NotRegular { kind })
}

#[cfg(test)]
mod tests;
