//! Device and pool identities.
//!
//! Driver and pool names are interned ([`shared_name`]): every id and key naming the same pool
//! holds the same allocation, so looking a slice's pool up in the allocated state compares two
//! pointers instead of reading both names (the DRA Filter does that for every node it checks, in
//! every layer of the allocated state; the name comparisons were the largest item of the
//! scheduling thread in the real-control-plane profile).

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, LazyLock};

use parking_lot::Mutex;
use unisched_fasthash::{FastBuildHasher, FastHashSet};

/// The interned driver and pool names, and the size at which the next insertion first drops the
/// names nobody else holds any more.
struct Names {
    set: FastHashSet<Arc<str>>,
    prune_at: usize,
}

/// The smallest [`Names::prune_at`]: below it the set is never pruned.
const MIN_PRUNE_AT: usize = 1024;

static NAMES: LazyLock<Mutex<Names>> = LazyLock::new(|| {
    Mutex::new(Names {
        set: FastHashSet::default(),
        prune_at: MIN_PRUNE_AT,
    })
});

/// `name` as the one shared allocation every driver or pool name equal to it uses.
///
/// The set keeps only names something else still holds: when it has grown to twice the live
/// names (at least [`MIN_PRUNE_AT`]), the next insertion drops the ones only the set holds, so
/// a cluster whose nodes come and go does not accumulate the names of nodes long gone. Interning
/// happens when slices are prepared and claim allocations recorded, never per node in Filter.
pub fn shared_name(name: &str) -> Arc<str> {
    let mut names = NAMES.lock();
    if let Some(shared) = names.set.get(name) {
        return Arc::clone(shared);
    }
    if names.set.len() >= names.prune_at {
        names.set.retain(|n| Arc::strong_count(n) > 1);
        names.prune_at = (names.set.len() * 2).max(MIN_PRUNE_AT);
    }
    let shared: Arc<str> = Arc::from(name);
    names.set.insert(Arc::clone(&shared));
    shared
}

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
    /// Builds an id from its three parts (the driver and pool names interned).
    pub fn new(driver: &str, pool: &str, device: &str) -> Self {
        DeviceId {
            driver: shared_name(driver),
            pool: shared_name(pool),
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
    /// Builds a pool key (the names interned).
    pub fn new(driver: &str, pool: &str) -> Self {
        PoolKey::from_names(shared_name(driver), shared_name(pool))
    }

    /// Builds a pool key from names already shared (e.g. a [`DeviceId`]'s).
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

/// String equality that skips the comparison when both are the same allocation (interned names:
/// every true match in the allocated state's look-ups).
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

    #[test]
    fn equal_names_share_one_allocation() {
        let a = PoolKey::new("interned.example.com", "pool-a");
        let b = DeviceId::new("interned.example.com", "pool-a", "dev-0").pool_key();
        assert!(Arc::ptr_eq(&a.driver, &b.driver));
        assert!(Arc::ptr_eq(&a.pool, &b.pool));
        assert_eq!(a, b);
        let other = PoolKey::new("interned.example.com", "pool-b");
        assert!(!Arc::ptr_eq(&a.pool, &other.pool));
        assert_ne!(a, other);
    }

    #[test]
    fn names_nobody_holds_are_dropped_and_come_back_equal() {
        // Other tests intern names concurrently, so the threshold is not known here; insert
        // names nobody keeps until a pruning has visibly dropped some of them.
        let kept = shared_name("pruning-test-kept");
        let ours = || {
            NAMES
                .lock()
                .set
                .iter()
                .filter(|n| n.starts_with("pruning-test-") && &***n != "pruning-test-kept")
                .count()
        };
        let mut inserted = 0;
        while inserted < 100 * MIN_PRUNE_AT && ours() == inserted {
            drop(shared_name(&format!("pruning-test-{inserted}")));
            inserted += 1;
        }
        assert!(
            ours() < inserted,
            "no name held by nobody else was dropped in {inserted} insertions"
        );
        // A name still held survives every pruning and is handed out again.
        assert!(Arc::ptr_eq(&kept, &shared_name("pruning-test-kept")));
        // A dropped name comes back, with the same text.
        assert_eq!(&*shared_name("pruning-test-0"), "pruning-test-0");
    }
}
