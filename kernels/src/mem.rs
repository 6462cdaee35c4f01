//! Long-lived buffers (a model's weights), laid side by side in memory the
//! operating system may back with transparent huge pages.
//!
//! Decode reads every weight once per token. With 4 KiB pages a 100 MB model
//! is 25 000 pages per token: each a TLB miss (in a VM a two-level page
//! walk) and a point where the hardware prefetchers stop, since they do not
//! cross pages. Advising each buffer on its own would not help most models:
//! a small model's matrices are far smaller than a 2 MiB huge page, and only
//! whole aligned 2 MiB ranges can be backed by one. So [`HugeBuf`]s are
//! carved one after another out of large chunks, aligned to the huge-page
//! size and advised (Linux `madvise(MADV_HUGEPAGE)`, which the common THP
//! setting `madvise` waits for) before anything touches them. The advice is
//! a hint: refused (THP off, another OS) it changes nothing but the speed.
//!
//! A chunk is returned to the OS when the last buffer carved from it is
//! dropped. Nothing is reused inside a chunk, so a buffer's memory is always
//! fresh, zeroed by the OS, and never touched until the buffer's owner
//! writes it.

use std::alloc::Layout;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// Size of a chunk (virtual; only the pages buffers touch are resident).
const CHUNK: usize = 64 << 20;

/// Alignment of each buffer in its chunk: a cache line.
const ALIGN: usize = 64;

/// Element types for which all-zero bytes are a valid value.
///
/// # Safety
/// Implementors must be plain data whose all-zero bit pattern is a value.
pub unsafe trait Zeroable: Copy + Send + Sync + 'static {}

// SAFETY: integers and IEEE floats are valid (zero) when all bytes are 0.
unsafe impl Zeroable for u8 {}
// SAFETY: as above.
unsafe impl Zeroable for i8 {}
// SAFETY: as above.
unsafe impl Zeroable for u16 {}
// SAFETY: as above.
unsafe impl Zeroable for i16 {}
// SAFETY: as above.
unsafe impl Zeroable for u32 {}
// SAFETY: as above.
unsafe impl Zeroable for i32 {}
// SAFETY: as above.
unsafe impl Zeroable for f32 {}
// SAFETY: as above.
unsafe impl Zeroable for f64 {}
// SAFETY: as above (binary16's zero is all-zero bits).
unsafe impl Zeroable for half::f16 {}

/// A fixed-length, zero-initialised buffer in huge-page-advised memory; it
/// dereferences to a slice.
pub struct HugeBuf<T: Zeroable> {
    ptr: NonNull<T>,
    len: usize,
    /// Keeps the chunk mapped; `None` for an empty buffer.
    _chunk: Option<Arc<Chunk>>,
}

// SAFETY: a HugeBuf owns its elements exclusively (no other buffer's range
// overlaps it); the shared chunk is only unmapped when the last owner drops.
unsafe impl<T: Zeroable> Send for HugeBuf<T> {}
// SAFETY: shared access only hands out `&[T]`, and `T: Sync`.
unsafe impl<T: Zeroable> Sync for HugeBuf<T> {}

impl<T: Zeroable> HugeBuf<T> {
    /// `len` zeros.
    pub fn zeroed(len: usize) -> Self {
        let bytes = len
            .checked_mul(size_of::<T>())
            .filter(|&b| b <= isize::MAX as usize)
            .expect("buffer size overflows");
        if bytes == 0 {
            return HugeBuf {
                ptr: NonNull::dangling(),
                len,
                _chunk: None,
            };
        }
        let (ptr, chunk) = carve(bytes, ALIGN.max(align_of::<T>()));
        HugeBuf {
            ptr: ptr.cast(),
            len,
            _chunk: Some(chunk),
        }
    }

    /// A copy of `s`.
    pub fn from_slice(s: &[T]) -> Self {
        let mut b = Self::zeroed(s.len());
        b.copy_from_slice(s);
        b
    }
}

impl<T: Zeroable> Deref for HugeBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: ptr is valid for len elements (zeroed: Zeroable), aligned,
        // and lives as long as the chunk this buffer holds.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Zeroable> DerefMut for HugeBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in deref; the range is this buffer's alone.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Zeroable> Clone for HugeBuf<T> {
    fn clone(&self) -> Self {
        Self::from_slice(self)
    }
}

impl<T: Zeroable> Default for HugeBuf<T> {
    fn default() -> Self {
        Self::zeroed(0)
    }
}

impl<T: Zeroable + PartialEq> PartialEq for HugeBuf<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Zeroable + fmt::Debug> fmt::Debug for HugeBuf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

/// One mapping that buffers are carved from.
struct Chunk {
    base: NonNull<u8>,
    size: usize,
}

// SAFETY: the chunk is plain memory; who writes which bytes is the buffers'
// business (disjoint ranges).
unsafe impl Send for Chunk {}
// SAFETY: as above.
unsafe impl Sync for Chunk {}

/// Where the next buffer goes: the current chunk (weak, so that a chunk whose
/// buffers are all gone is unmapped) and how much of it is taken.
struct Cursor {
    chunk: Weak<Chunk>,
    used: usize,
}

static CURSOR: Mutex<Option<Cursor>> = Mutex::new(None);

/// `bytes` fresh zeroed bytes aligned to `align`, and the chunk holding them.
fn carve(bytes: usize, align: usize) -> (NonNull<u8>, Arc<Chunk>) {
    // Poisoning cannot leave the cursor inconsistent (it is written last).
    let mut cursor = CURSOR.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = cursor.as_mut()
        && let Some(chunk) = c.chunk.upgrade()
    {
        let at = c.used.next_multiple_of(align);
        if at.checked_add(bytes).is_some_and(|end| end <= chunk.size) {
            c.used = at + bytes;
            // SAFETY: at + bytes <= size: inside the chunk.
            let p = unsafe { chunk.base.add(at) };
            return (p, chunk);
        }
    }
    let huge = huge_page_size();
    let size = bytes.max(CHUNK).next_multiple_of(huge);
    let chunk = Arc::new(Chunk::map(size, huge));
    let p = chunk.base;
    // A buffer bigger than half a chunk gets a chunk of its own and leaves
    // the cursor where it was, so the rest of the current chunk is still used.
    let keep = cursor
        .as_ref()
        .is_some_and(|c| c.chunk.strong_count() > 0 && bytes > CHUNK / 2);
    if !keep {
        *cursor = Some(Cursor {
            chunk: Arc::downgrade(&chunk),
            used: bytes,
        });
    }
    (p, chunk)
}

/// The size of a transparent huge page: what one page-table entry one level
/// above the last maps (a page's worth of 8-byte entries, each a page): 2 MiB
/// with 4 KiB pages, 32 MiB with 16 KiB pages. Kernels with 64 KiB pages have
/// 512 MiB huge pages, more than a chunk: chunks are only aligned to 2 MiB
/// there, and no huge page ever backs them.
fn huge_page_size() -> usize {
    static SIZE: OnceLock<usize> = OnceLock::new();
    *SIZE.get_or_init(|| {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        // SAFETY: sysconf reads a constant of the running kernel.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let page = 4096usize;
        let huge = page.saturating_mul(page) / 8;
        if huge.is_power_of_two() && huge <= CHUNK {
            huge
        } else {
            2 << 20
        }
    })
}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl Chunk {
    /// `size` bytes (a multiple of `huge`) of zeroed memory aligned to `huge`.
    fn map(size: usize, huge: usize) -> Chunk {
        let fail = || std::alloc::handle_alloc_error(Layout::from_size_align(size, huge).unwrap());
        let span = size.checked_add(huge).unwrap_or_else(fail);
        // SAFETY: an anonymous private mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            fail();
        }
        let start = p as usize;
        let base = start.next_multiple_of(huge);
        // SAFETY: the head and tail trimmed lie inside the mapping just made
        // and outside [base, base + size); both are page multiples.
        unsafe {
            if base > start {
                libc::munmap(p, base - start);
            }
            let end = base + size;
            if start + span > end {
                libc::munmap(end as *mut libc::c_void, start + span - end);
            }
        }
        advise_huge(base, size);
        Chunk {
            // SAFETY: mmap succeeded, so base is not null.
            base: unsafe { NonNull::new_unchecked(base as *mut u8) },
            size,
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl Drop for Chunk {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by Chunk::map and no buffer refers to
        // it any more (each holds an Arc of this chunk).
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.size) };
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
impl Chunk {
    fn map(size: usize, huge: usize) -> Chunk {
        let layout = Layout::from_size_align(size, huge).unwrap();
        // SAFETY: size is not zero.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let base = NonNull::new(p).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Chunk { base, size }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
impl Drop for Chunk {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.size, huge_page_size()).unwrap();
        // SAFETY: allocated by Chunk::map with this layout.
        unsafe { std::alloc::dealloc(self.base.as_ptr(), layout) };
    }
}

/// Offers `[start, start + len)` (inside one allocation the caller owns and
/// has not touched yet) to the kernel for transparent huge pages: the whole
/// huge pages inside it. A hint; refused, it changes nothing.
pub(crate) fn advise_huge(start: usize, len: usize) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let huge = huge_page_size();
        let (a, b) = (start.next_multiple_of(huge), (start + len) & !(huge - 1));
        if b > a {
            // SAFETY: MADV_HUGEPAGE changes no contents, only how later faults
            // in the range are served; the range lies in the caller's
            // allocation.
            unsafe { libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = (start, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_zeroed_disjoint_and_aligned() {
        let mut bufs: Vec<HugeBuf<u16>> = (0..200).map(|i| HugeBuf::zeroed(1 + i * 37)).collect();
        for (i, b) in bufs.iter_mut().enumerate() {
            assert_eq!(b.as_ptr() as usize % ALIGN, 0);
            assert!(b.iter().all(|&x| x == 0));
            b.fill(i as u16);
        }
        for (i, b) in bufs.iter().enumerate() {
            assert!(
                b.iter().all(|&x| x == i as u16),
                "buffer {i} was overwritten"
            );
        }
    }

    #[test]
    fn a_buffer_bigger_than_a_chunk_and_an_empty_one() {
        let mut big = HugeBuf::<u8>::zeroed(CHUNK + 12345);
        assert!(big.iter().all(|&x| x == 0));
        big[CHUNK + 12344] = 7;
        let small = HugeBuf::<f32>::from_slice(&[1.0, 2.0]);
        assert_eq!(&*small, &[1.0, 2.0]);
        assert_eq!(big[CHUNK + 12344], 7);
        let empty = HugeBuf::<u32>::zeroed(0);
        assert!(empty.is_empty());
        assert_eq!(empty.clone(), empty);
    }

    /// Whether the mapping holding address `at` carries the huge-page advice
    /// (`hg` in its `/proc/self/smaps` `VmFlags`); `None` if no mapping
    /// holds it or the file has no flags for it.
    #[cfg(target_os = "linux")]
    fn advised(at: usize) -> Option<bool> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((lo, hi)) = range.split_once('-')
                && let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = (lo..hi).contains(&at);
            } else if inside && let Some(f) = line.strip_prefix("VmFlags:") {
                return Some(f.split_whitespace().any(|f| f == "hg"));
            }
        }
        None
    }

    /// The mapping holding a buffer carries the huge-page advice wherever a
    /// mapping advised by hand shows it (not where the kernel has no THP,
    /// nor under qemu-user, which accepts the advice and drops it).
    #[cfg(target_os = "linux")]
    #[test]
    fn chunks_are_advised_for_huge_pages() {
        const LEN: usize = 4 << 20;
        // SAFETY: a fresh anonymous mapping, advised, inspected, unmapped.
        let control = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            libc::madvise(p, LEN, libc::MADV_HUGEPAGE);
            p
        };
        let reported = advised(control as usize) == Some(true);
        // SAFETY: mapped above, no longer used.
        unsafe { libc::munmap(control, LEN) };
        if !reported {
            eprintln!("skipped: MADV_HUGEPAGE does not show in /proc/self/smaps here");
            return;
        }
        let b = HugeBuf::<u8>::zeroed(1 << 20);
        assert_eq!(advised(b.as_ptr() as usize), Some(true));
    }

    #[test]
    fn memory_freed_by_dropped_buffers_comes_back_zeroed() {
        for round in 0..3u8 {
            let mut b = HugeBuf::<u8>::zeroed(3 << 20);
            assert!(b.iter().all(|&x| x == 0), "round {round}");
            b.fill(0xAB);
        }
    }
}
