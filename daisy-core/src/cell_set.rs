//! `CellSet`: a set of one task's blocks, keyed by their cell index
//! ([`crate::geometry::BlockGrid::cell_index_of`]), at one bit per block.
//!
//! The scheduler remembers which blocks completed and which died in these
//! rather than in hash sets of block ids (16 bytes of key, a hash table
//! around it: ~50 bytes per block). Bits live in 4 KiB pages allocated
//! when a block in their range is first added, so a set costs what its
//! blocks' neighbourhood costs, never the whole grid up front: a task of
//! 10⁸ blocks all completed is 12.5 MB, one whose blocks never ran is
//! nothing.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// 64-bit words per page: 4 KiB, 32,768 blocks.
const PAGE_WORDS: usize = 512;
const PAGE_BITS: u64 = PAGE_WORDS as u64 * 64;

type Page = Box<[u64; PAGE_WORDS]>;

/// A set of cell indices of one task.
#[derive(Clone, Debug, Default)]
pub struct CellSet {
    pages: HashMap<u64, Page, BuildHasherDefault<PageHasher>>,
}

impl CellSet {
    pub fn contains(&self, cell: u64) -> bool {
        let (page, word, bit) = locate(cell);
        self.pages.get(&page).is_some_and(|p| p[word] & bit != 0)
    }

    /// Adds `cell`; false if it was there already.
    pub fn insert(&mut self, cell: u64) -> bool {
        let (page, word, bit) = locate(cell);
        let words = (self.pages.entry(page)).or_insert_with(|| Box::new([0; PAGE_WORDS]));
        let added = words[word] & bit == 0;
        words[word] |= bit;
        added
    }
}

/// The page, the word in it and the bit in that word of `cell`.
#[inline]
fn locate(cell: u64) -> (u64, usize, u64) {
    let in_page = cell % PAGE_BITS;
    (
        cell / PAGE_BITS,
        (in_page / 64) as usize,
        1 << (in_page % 64),
    )
}

/// Page numbers are small neighbouring integers: one multiplication
/// spreads them over the table (the low bits pick the bucket, the high
/// ones the tag) at a fraction of SipHash's cost, and nothing here comes
/// from a peer that could aim at collisions.
#[derive(Default)]
struct PageHasher(u64);

impl Hasher for PageHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(self.0.rotate_left(8) ^ byte as u64);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_added_once_and_found_across_pages() {
        let mut set = CellSet::default();
        let cells = [
            0,
            1,
            63,
            64,
            PAGE_BITS - 1,
            PAGE_BITS,
            5 * PAGE_BITS + 7,
            u64::MAX,
        ];
        for &cell in &cells {
            assert!(!set.contains(cell), "{cell}");
            assert!(set.insert(cell), "{cell}");
            assert!(!set.insert(cell), "{cell}");
        }
        for &cell in &cells {
            assert!(set.contains(cell), "{cell}");
        }
        for near in [2, 62, 65, PAGE_BITS + 1, 5 * PAGE_BITS + 6, u64::MAX - 1] {
            assert!(!set.contains(near), "{near}");
        }
        assert_eq!(set.pages.len(), 4);
    }
}
