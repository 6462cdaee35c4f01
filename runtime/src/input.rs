//! Opening the files a user names (models, tokenizers, configs, texts to
//! score): only regular files are read, and a text is refused above a
//! stated size before any of it is read. A device (`/dev/zero`), a FIFO or a
//! directory would otherwise be read until memory runs out, or fail later
//! with a message about the format instead of the file.

use crate::error::{LoadError, Result};
use std::io::Read;
use std::path::Path;

/// The largest JSON file (config, tokenizer, safetensors index) read: a
/// tokenizer.json with a 256k vocabulary and its merges is ~20 MB.
pub const JSON_LIMIT: u64 = 256 << 20;

/// The largest text read as a prompt or to score (wikitext-103's test
/// split is 1.3 MB, its whole training split 540 MB).
pub const TEXT_LIMIT: u64 = 1 << 30;

/// Opens `path` for reading if it is a regular file (after following links).
pub fn open_regular(path: &Path) -> Result<std::fs::File> {
    let io = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let ty = file.metadata().map_err(io)?.file_type();
    if !ty.is_file() {
        return Err(LoadError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(&ty),
        });
    }
    Ok(file)
}

/// Reads a UTF-8 text file of at most `limit` bytes.
pub fn read_text(path: &Path, limit: u64) -> Result<String> {
    let io = |source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = open_regular(path)?;
    let size = file.metadata().map_err(io)?.len();
    let too_large = |size| LoadError::TooLarge {
        path: path.to_path_buf(),
        size,
        limit,
    };
    if size > limit {
        return Err(too_large(size));
    }
    // The file may grow while it is read: never read past the limit.
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|e| LoadError::NotUtf8 {
        path: path.to_path_buf(),
        offset: e.utf8_error().valid_up_to() as u64,
    })
}

fn kind_of(ty: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ty.is_dir() {
        "a directory"
    } else if ty.is_char_device() {
        "a character device"
    } else if ty.is_block_device() {
        "a block device"
    } else if ty.is_fifo() {
        "a FIFO (pipe)"
    } else if ty.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Lets the OS drop the resident pages of `data`, a slice of `map`: those
/// wholly inside it, and the [`FAULT_AROUND`] bytes before it. A model's
/// file pages stay resident once read, and a reader that has copied what it
/// needs (the loader, `quantize`, `convert`) would otherwise hold the file
/// beside its copies. The bytes before `data` are there because a read
/// fault maps the cached pages around it too: reading the start of `data`
/// maps again pages that the reader, going front to back, released with
/// the slice before, and they would stay mapped to the end. The bytes stay
/// readable: a later access faults them in again. A slice outside the map,
/// or a failed hint, changes nothing (the hint is only about memory use).
pub fn release_mapped(map: &memmap2::Mmap, data: &[u8]) {
    let base = map.as_ptr() as usize;
    let (start, end) = (data.as_ptr() as usize, data.as_ptr() as usize + data.len());
    if start < base || end > base + map.len() {
        return;
    }
    let page = 4096;
    let first = (start - base).saturating_sub(FAULT_AROUND) / page * page;
    let last = (end - base) / page * page;
    if last > first {
        // SAFETY: the map is a read-only private mapping of a file that,
        // as for the map itself, nobody modifies while it is open; for
        // such a mapping MADV_DONTNEED only drops the resident copy and
        // the next read repopulates it from the file (madvise(2)), so
        // every slice borrowed from it keeps reading the same bytes.
        let _ = unsafe {
            map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, last - first)
        };
    }
}

/// Linux's default `fault_around_bytes`: a read fault on a file mapping
/// maps up to this much of the cached file around the faulting page.
const FAULT_AROUND: usize = 64 << 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_directories_and_large_texts_are_refused() {
        let e = read_text(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert!(e.to_string().contains("a character device"), "{e}");
        let dir = std::env::temp_dir().join(format!("tiletune-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = open_regular(&dir).unwrap_err();
        assert!(e.to_string().contains("a directory"), "{e}");
        let f = dir.join("t.txt");
        std::fs::write(&f, "héllo").unwrap();
        assert_eq!(read_text(&f, 6).unwrap(), "héllo");
        let e = read_text(&f, 5).unwrap_err();
        assert!(
            e.to_string().contains("6 bytes") && e.to_string().contains("5"),
            "{e}"
        );
        std::fs::write(&f, [b'a', 0xff, b'b']).unwrap();
        let e = read_text(&f, 10).unwrap_err();
        assert!(e.to_string().contains("offset 1"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
