//! Device and pool identities.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::Arc;

use unisched_fasthash::FastBuildHasher;

/// A device, identified as the API does: `<driver>/<pool>/<device>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    /// Driver name.
    pub driver: Arc<str>,
    /// Pool name.
    pub pool: Arc<str>,
    /// Device name, unique in the pool.
    pub device: Arc<str>,
}

impl DeviceId {
    /// Builds an id from its three parts.
    pub fn new(driver: &str, pool: &str, device: &str) -> Self {
        DeviceId {
            driver: Arc::from(driver),
            pool: Arc::from(pool),
            device: Arc::from(device),
        }
    }

    /// The pool the device belongs to.
    pub fn pool_key(&self) -> PoolKey {
        PoolKey::from_names(Arc::clone(&self.driver), Arc::clone(&self.pool))
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// A resource pool: `<driver>/<pool>`.
///
/// It carries the hash of its two names, computed once: the DRA Filter looks a node's pools up in
/// every layer of the allocated state for every node it checks, and hashing the names there (twice:
/// shard, then map) was a tenth of the scheduling thread on the DRA benchmark. The fields are
/// read-only by convention; build keys with [`PoolKey::new`] or [`PoolKey::from_names`].
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PoolKey {
    /// Driver name.
    pub driver: Arc<str>,
    /// Pool name.
    pub pool: Arc<str>,
    /// [`pool_hash`] of the two names.
    hash: u64,
}

/// The hash of a pool's names, the same for a [`PoolKey`] and any [`PoolKeyView`] of it.
pub fn pool_hash(driver: &str, pool: &str) -> u64 {
    let mut h = FastBuildHasher::default().build_hasher();
    driver.hash(&mut h);
    pool.hash(&mut h);
    h.finish()
}

impl PoolKey {
    /// Builds a pool key.
    pub fn new(driver: &str, pool: &str) -> Self {
        PoolKey::from_names(Arc::from(driver), Arc::from(pool))
    }

    /// Builds a pool key from shared names.
    pub fn from_names(driver: Arc<str>, pool: Arc<str>) -> Self {
        let hash = pool_hash(&driver, &pool);
        PoolKey { driver, pool, hash }
    }
}

impl Hash for PoolKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl fmt::Debug for PoolKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolKey")
            .field("driver", &self.driver)
            .field("pool", &self.pool)
            .finish()
    }
}

impl fmt::Display for PoolKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.driver, self.pool)
    }
}

/// A pool key seen as two strings, so that maps keyed by [`PoolKey`] can be searched with borrowed
/// names (`(&str, &str)`), without building a key.
pub trait PoolKeyView {
    /// Driver name.
    fn driver(&self) -> &str;
    /// Pool name.
    fn pool(&self) -> &str;
    /// [`pool_hash`] of the names (a [`PoolKey`] has it at hand).
    fn key_hash(&self) -> u64 {
        pool_hash(self.driver(), self.pool())
    }
}

impl PoolKeyView for PoolKey {
    fn driver(&self) -> &str {
        &self.driver
    }
    fn pool(&self) -> &str {
        &self.pool
    }
    fn key_hash(&self) -> u64 {
        self.hash
    }
}

impl PoolKeyView for (&str, &str) {
    fn driver(&self) -> &str {
        self.0
    }
    fn pool(&self) -> &str {
        self.1
    }
}

impl<'a> Borrow<dyn PoolKeyView + 'a> for PoolKey {
    fn borrow(&self) -> &(dyn PoolKeyView + 'a) {
        self
    }
}

// Hashes exactly as `PoolKey` does.
impl Hash for dyn PoolKeyView + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.key_hash());
    }
}

impl PartialEq for dyn PoolKeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        same_name(self.driver(), other.driver()) && same_name(self.pool(), other.pool())
    }
}

/// String equality that skips the comparison when both are the same allocation (keys cloned from
/// one slice's names).
fn same_name(a: &str, b: &str) -> bool {
    (std::ptr::eq(a.as_ptr(), b.as_ptr()) && a.len() == b.len()) || a == b
}

impl Eq for dyn PoolKeyView + '_ {}

#[cfg(test)]
mod tests {
    use unisched_fasthash::FastHashMap;

    use super::*;

    #[test]
    fn a_key_and_a_view_of_its_names_find_each_other() {
        let mut pools: FastHashMap<PoolKey, u32> = FastHashMap::default();
        for i in 0..100 {
            pools.insert(PoolKey::new("gpu.example.com", &format!("node-{i}")), i);
        }
        for i in 0..100 {
            let name = format!("node-{i}");
            let view: &dyn PoolKeyView = &("gpu.example.com", name.as_str());
            assert_eq!(pools.get(view), Some(&i));
            let key = DeviceId::new("gpu.example.com", &name, "gpu-0").pool_key();
            assert_eq!(view.key_hash(), key.key_hash());
            assert_eq!(pools.get(&key), Some(&i));
        }
        assert!(!pools.contains_key(&("gpu.example.com", "node-100") as &dyn PoolKeyView));
        // The boundary between the names counts.
        assert_ne!(PoolKey::new("ab", "c"), PoolKey::new("a", "bc"));
        assert_ne!(pool_hash("ab", "c"), pool_hash("a", "bc"));
        assert!(!pools.contains_key(&("gpu.example.co", "mnode-1") as &dyn PoolKeyView));
    }
}
