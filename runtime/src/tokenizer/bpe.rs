//! Byte-level BPE: the GPT-2 byte↔unicode map and the merge loop.
//!
//! The merge loop is the priority-queue form (as in llama.cpp's
//! `llm_tokenizer_bpe_session`): symbols form a linked list, candidate pairs
//! sit in a min-heap keyed by (merge rank, position), and stale entries are
//! skipped when popped. That is O(n log n) per word, so a pathological word
//! (a megabyte without spaces) cannot make encoding quadratic.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// GPT-2's reversible map from bytes to printable unicode characters: the
/// printable Latin-1 bytes map to themselves, the others to U+0100 onwards.
pub fn byte_to_unicode() -> [char; 256] {
    let mut map = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        map[b as usize] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(256 + n).expect("valid scalar");
            n += 1;
            c
        };
    }
    map
}

/// Merge table: (left id, right id) → (rank, merged id).
pub type Merges = HashMap<(u32, u32), (u32, u32)>;

#[derive(Clone, Copy)]
struct Sym {
    id: u32,
    prev: usize,
    next: usize,
    alive: bool,
}

const NONE: usize = usize::MAX;

/// Applies merges to `ids` (the initial per-byte symbols) and appends the
/// result to `out`.
pub fn merge(ids: &[u32], merges: &Merges, out: &mut Vec<u32>) {
    if ids.len() < 2 {
        out.extend_from_slice(ids);
        return;
    }
    let mut syms: Vec<Sym> = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| Sym {
            id,
            prev: if i == 0 { NONE } else { i - 1 },
            next: if i + 1 == ids.len() { NONE } else { i + 1 },
            alive: true,
        })
        .collect();
    // Heap of Reverse((rank, left index, left id, right id)).
    let mut heap = BinaryHeap::new();
    let push = |heap: &mut BinaryHeap<_>, syms: &[Sym], left: usize| {
        let right = syms[left].next;
        if right == NONE {
            return;
        }
        if let Some(&(rank, _)) = merges.get(&(syms[left].id, syms[right].id)) {
            heap.push(Reverse((rank, left, syms[left].id, syms[right].id)));
        }
    };
    for i in 0..syms.len() - 1 {
        push(&mut heap, &syms, i);
    }
    while let Some(Reverse((_, left, lid, rid))) = heap.pop() {
        let right = syms[left].next;
        // Skip entries made stale by an earlier merge.
        if !syms[left].alive || right == NONE || syms[left].id != lid || syms[right].id != rid {
            continue;
        }
        let merged = merges[&(lid, rid)].1;
        syms[left].id = merged;
        syms[right].alive = false;
        let after = syms[right].next;
        syms[left].next = after;
        if after != NONE {
            syms[after].prev = left;
        }
        let before = syms[left].prev;
        if before != NONE {
            push(&mut heap, &syms, before);
        }
        push(&mut heap, &syms, left);
    }
    let mut i = 0;
    while i != NONE {
        out.push(syms[i].id);
        i = syms[i].next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_map_is_a_bijection_matching_gpt2() {
        let m = byte_to_unicode();
        let mut seen = std::collections::HashSet::new();
        for c in m {
            assert!(seen.insert(c));
        }
        assert_eq!(m[b' ' as usize], 'Ġ');
        assert_eq!(m[b'\n' as usize], 'Ċ');
        assert_eq!(m[b'a' as usize], 'a');
    }

    #[test]
    fn merges_follow_rank_not_position() {
        // ids: a=0 b=1 c=2 ab=3 bc=4 abc=5; "bc" ranks before "ab".
        let mut m = Merges::new();
        m.insert((0, 1), (1, 3));
        m.insert((1, 2), (0, 4));
        m.insert((0, 4), (2, 5));
        let mut out = Vec::new();
        merge(&[0, 1, 2], &m, &mut out);
        assert_eq!(out, [5]);
        out.clear();
        merge(&[0, 1, 0, 1], &m, &mut out);
        assert_eq!(out, [3, 3]);
        out.clear();
        merge(&[2], &m, &mut out);
        assert_eq!(out, [2]);
    }
}
