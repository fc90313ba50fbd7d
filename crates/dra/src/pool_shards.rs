//! The exclusively allocated devices of an [`AllocatedState`](crate::state::AllocatedState), by
//! pool, in shards that are copied on write one at a time.
//!
//! Why: the cache clones an allocated state whenever a claim (or an in-flight allocation) changes
//! while a snapshot still holds the old state, which is a few times per scheduled pod. With one map
//! entry per pool (one pool per node for node-local slices) that clone copied, and later dropped,
//! an entry per node: 5,000 of them per change on 5,000 nodes, a visible share of the runtime's CPU.
//! Split into [`SHARDS`] maps behind their own `Arc`s, a clone copies [`SHARDS`] pointers and a
//! change copies the one shard it touches.

use std::{fmt, sync::Arc};

use unisched_fasthash::FastHashMap;

use crate::ids::{PoolKey, PoolKeyView};

/// The exclusively allocated devices of one pool: device name -> number of results naming it.
pub(crate) type PoolExclusive = FastHashMap<Arc<str>, u32>;

/// How many shards a non-empty map has (a power of two).
pub(crate) const SHARDS: usize = 64;

type Shard = FastHashMap<PoolKey, Arc<PoolExclusive>>;

/// See the module documentation. Holds no empty pool maps.
#[derive(Clone, Default)]
pub(crate) struct PoolShards {
    /// Empty until the first insertion, then [`SHARDS`] long.
    shards: Vec<Arc<Shard>>,
}

fn shard_of(key: &dyn PoolKeyView) -> usize {
    // The hasher's last step is a multiplication, so the top bits are the well-mixed ones.
    (key.key_hash() >> (64 - SHARDS.trailing_zeros())) as usize
}

impl PoolShards {
    /// The devices in use in `pool`, if any.
    pub(crate) fn get(&self, pool: &dyn PoolKeyView) -> Option<&Arc<PoolExclusive>> {
        self.shards.get(shard_of(pool))?.get(pool)
    }

    /// The devices of `pool`, created empty when missing; copies the pool's shard if it is shared.
    pub(crate) fn entry(&mut self, pool: PoolKey) -> &mut Arc<PoolExclusive> {
        if self.shards.is_empty() {
            self.shards = (0..SHARDS).map(|_| Arc::default()).collect();
        }
        let shard = Arc::make_mut(&mut self.shards[shard_of(&pool)]);
        shard.entry(pool).or_default()
    }

    /// The devices of `pool` for changing; copies the pool's shard only when the pool is there.
    pub(crate) fn get_mut(&mut self, pool: &dyn PoolKeyView) -> Option<&mut Arc<PoolExclusive>> {
        let shard = self.shards.get_mut(shard_of(pool))?;
        if !shard.contains_key(pool) {
            return None;
        }
        Arc::make_mut(shard).get_mut(pool)
    }

    /// Forgets `pool`.
    pub(crate) fn remove(&mut self, pool: &dyn PoolKeyView) {
        if let Some(shard) = self.shards.get_mut(shard_of(pool))
            && shard.contains_key(pool)
        {
            Arc::make_mut(shard).remove(pool);
        }
    }

    /// Every pool with devices in use, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&PoolKey, &Arc<PoolExclusive>)> {
        self.shards.iter().flat_map(|s| s.iter())
    }

    /// The number of pools with devices in use.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }
}

impl PartialEq for PoolShards {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().all(|(k, v)| other.get(k) == Some(v))
    }
}

impl Eq for PoolShards {}

impl fmt::Debug for PoolShards {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: usize) -> PoolKey {
        PoolKey::new("driver.example.com", &format!("node-{i}"))
    }

    #[test]
    fn a_change_copies_one_shard_and_a_clone_shares_the_rest() {
        let mut pools = PoolShards::default();
        for i in 0..1_000 {
            Arc::make_mut(pools.entry(key(i))).insert(Arc::from("dev-0"), 1);
        }
        assert_eq!(pools.len(), 1_000);
        let before = pools.clone();
        Arc::make_mut(pools.entry(key(7))).insert(Arc::from("dev-1"), 1);
        let copied = pools
            .shards
            .iter()
            .zip(&before.shards)
            .filter(|(a, b)| !Arc::ptr_eq(a, b))
            .count();
        assert_eq!(copied, 1, "one shard copied");
        assert_eq!(
            before.get(&key(7)).map(|p| p.len()),
            Some(1),
            "the clone is unchanged"
        );
        assert_eq!(pools.get(&key(7)).map(|p| p.len()), Some(2));
        assert_ne!(pools, before);

        // Removing an absent pool or changing an absent one copies nothing.
        let again = pools.clone();
        pools.remove(&("driver.example.com", "no-such-node") as &dyn PoolKeyView);
        assert!(pools.get_mut(&("x", "y") as &dyn PoolKeyView).is_none());
        assert!(
            pools
                .shards
                .iter()
                .zip(&again.shards)
                .all(|(a, b)| Arc::ptr_eq(a, b))
        );

        pools.remove(&key(7));
        assert!(pools.get(&key(7)).is_none());
        assert_eq!(pools.len(), 999);
        // Every shard is used: the pools spread over all of them.
        assert!(before.shards.iter().all(|s| !s.is_empty()));
    }

    #[test]
    fn equality_is_by_content() {
        let mut a = PoolShards::default();
        let b = PoolShards::default();
        assert_eq!(a, b);
        Arc::make_mut(a.entry(key(1))).insert(Arc::from("d"), 1);
        assert_ne!(a, b);
        a.remove(&key(1));
        assert_eq!(a, b, "an emptied map equals a never-used one");
    }
}
