//! A small time-bounded cache for the answers of `TokenReview` and `SubjectAccessReview`.
//!
//! Prometheus scrapes every few seconds with the same token; asking the API server twice per scrape
//! would put the scheduler's observability on the API server's critical path. Positive and negative
//! answers have their own lifetimes (the `*-cache-ttl` flags); errors are never cached, so a
//! flaking API server is asked again on the next request.

use std::{collections::HashMap, hash::Hash, time::Duration};

use parking_lot::Mutex;
use tokio::time::Instant;

/// Entries kept at most; past it expired entries are dropped, and if that is not enough, all of
/// them (the cache only saves round trips, it never decides anything).
const MAX_ENTRIES: usize = 4096;

/// A map whose entries expire.
#[derive(Debug)]
pub struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (V, Instant)>>,
}

impl<K, V> Default for TtlCache<K, V> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    /// The live entry for `key`, if any.
    pub fn get(&self, key: &K) -> Option<V> {
        let mut entries = self.entries.lock();
        match entries.get(key) {
            Some((value, expires)) if Instant::now() < *expires => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` for `ttl`; a zero `ttl` keeps nothing.
    pub fn insert(&self, key: K, value: V, ttl: Duration) {
        if ttl.is_zero() {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock();
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, (_, expires)| now < *expires);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(key, (value, now + ttl));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn entries_expire_after_their_ttl() {
        let cache = TtlCache::default();
        cache.insert("a", 1, Duration::from_millis(50));
        cache.insert("b", 2, Duration::ZERO);
        assert_eq!(cache.get(&"a"), Some(1));
        assert_eq!(cache.get(&"b"), None);
        tokio::time::sleep(Duration::from_millis(80)).await;
        assert_eq!(cache.get(&"a"), None);
    }
}
