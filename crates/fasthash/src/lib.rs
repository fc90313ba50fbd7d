//! A fast, non-cryptographic hasher for the scheduler's hot maps.
//!
//! Some maps are read per node and plugin of every attempt: the DRA allocator looks up every
//! candidate device in the allocated state (keyed by three strings) and in the per-slice selector
//! cache, and every plugin's Filter and Score read their per-attempt data from the cycle state by
//! key. With std's SipHash the hashing alone was 7–10 % of the DynamicResources Filter's CPU. This
//! is the multiply-rotate scheme rustc uses (FxHash), written out here instead of adding a
//! dependency. It is not resistant to crafted collisions; keys are plugin state keys and device,
//! pool and driver names published by the cluster's own drivers, and a collision only costs time.
#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

/// See the module documentation.
#[derive(Clone, Copy, Debug, Default)]
pub struct FastHasher {
    hash: u64,
}

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// Builds [`FastHasher`]s.
pub type FastBuildHasher = BuildHasherDefault<FastHasher>;
/// A `HashMap` with [`FastHasher`].
pub type FastHashMap<K, V> = HashMap<K, V, FastBuildHasher>;
/// A `HashSet` with [`FastHasher`].
pub type FastHashSet<T> = HashSet<T, FastBuildHasher>;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::hash::{BuildHasher, Hash};

    fn hash<T: Hash>(v: &T) -> u64 {
        FastBuildHasher::default().hash_one(v)
    }

    /// A key of three names, as the allocator's device ids are.
    fn id(driver: &str, pool: &str, device: &str) -> (String, String, String) {
        (driver.to_string(), pool.to_string(), device.to_string())
    }

    #[test]
    fn equal_keys_hash_equal_and_different_keys_spread() {
        let a = id("gpu.example.com", "node-1", "gpu-0");
        assert_eq!(hash(&a), hash(&a.clone()));
        // Same bytes split differently across the three parts must not collide (str hashing
        // writes a terminator after each part).
        let b = id("gpu.example.co", "mnode-1", "gpu-0");
        assert_ne!(hash(&a), hash(&b));
        let distinct: FastHashSet<u64> = (0..10_000)
            .map(|i| {
                hash(&id(
                    "gpu.example.com",
                    &format!("node-{}", i / 10),
                    &format!("gpu-{}", i % 10),
                ))
            })
            .collect();
        assert_eq!(distinct.len(), 10_000);
    }

    #[test]
    fn map_works_as_a_map() {
        let mut m: FastHashMap<(String, String, String), u32> = FastHashMap::default();
        for i in 0..100 {
            *m.entry(id("d", "p", &i.to_string())).or_default() += 1;
        }
        *m.entry(id("d", "p", "7")).or_default() += 1;
        assert_eq!(m.len(), 100);
        assert_eq!(m.get(&id("d", "p", "7")), Some(&2));
    }
}
