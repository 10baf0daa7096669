//! Hash maps keyed by ids the driver hands out itself (block ids,
//! connection ids): a multiply-and-rotate hash (rustc's FxHash, as
//! `rustc-hash` 2 does it) instead of std's SipHash.
//!
//! The driver hashes a block's id about five times per block (in flight,
//! held by a worker, released), and SipHash made those lookups a tenth of
//! the driver's instructions per block (docs/benchmarks-history.md, "Round 5").
//! SipHash resists keys chosen to collide; these keys are not chosen by a
//! peer (a worker can only name ids it was given, and a lookup of any
//! other id inserts nothing), so that resistance buys nothing here.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` for keys the driver chose.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// A `HashSet` for keys the driver chose.
pub type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

/// An odd constant with its bits well spread (rustc-hash's).
const SEED: u64 = 0xf135_7aea_2e62_a9c5;

/// FxHash over 64-bit words; see the module's doc for when to use it.
#[derive(Clone, Copy, Debug, Default)]
pub struct IdHasher(u64);

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.0 = self.0.wrapping_add(word).wrapping_mul(SEED);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let mut last = [0u8; 8];
        let rest = chunks.remainder();
        last[..rest.len()].copy_from_slice(rest);
        self.add(u64::from_le_bytes(last) ^ rest.len() as u64);
    }

    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    /// The multiply leaves the high bits best mixed; hashbrown takes the
    /// bucket from the low ones, so they are rotated down.
    fn finish(&self) -> u64 {
        self.0.rotate_left(26)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BlockId, TaskIdx};
    use std::hash::BuildHasher;

    fn hash<T: std::hash::Hash>(value: T) -> u64 {
        BuildHasherDefault::<IdHasher>::default().hash_one(value)
    }

    #[test]
    fn neighbouring_ids_spread_over_the_low_bits() {
        let buckets: IdSet<u64> = (0..1024u64)
            .map(|spatial| {
                hash(BlockId {
                    task: TaskIdx(0),
                    spatial,
                }) & 1023
            })
            .collect();
        assert!(buckets.len() > 600, "{} of 1024 buckets", buckets.len());
    }

    #[test]
    fn bytes_of_any_length_hash_apart() {
        assert_ne!(hash("ab"), hash("ab\0"));
        assert_ne!(hash([1u8; 9]), hash([1u8; 8]));
    }

    #[test]
    fn a_map_finds_what_it_holds() {
        let mut map = IdMap::default();
        for spatial in 0..10_000u64 {
            map.insert(
                BlockId {
                    task: TaskIdx(1),
                    spatial,
                },
                spatial,
            );
        }
        assert!((0..10_000).all(|s| map[&BlockId {
            task: TaskIdx(1),
            spatial: s
        }] == s));
    }
}
