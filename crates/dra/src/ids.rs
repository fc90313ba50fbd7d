//! Device and pool identities.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

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
        PoolKey {
            driver: Arc::clone(&self.driver),
            pool: Arc::clone(&self.pool),
        }
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// A resource pool: `<driver>/<pool>`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    /// Driver name.
    pub driver: Arc<str>,
    /// Pool name.
    pub pool: Arc<str>,
}

impl PoolKey {
    /// Builds a pool key.
    pub fn new(driver: &str, pool: &str) -> Self {
        PoolKey {
            driver: Arc::from(driver),
            pool: Arc::from(pool),
        }
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
}

impl PoolKeyView for PoolKey {
    fn driver(&self) -> &str {
        &self.driver
    }
    fn pool(&self) -> &str {
        &self.pool
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

// Hashes exactly as the derived `Hash` of `PoolKey` (an `Arc<str>` hashes as its `str`).
impl Hash for dyn PoolKeyView + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.driver().hash(state);
        self.pool().hash(state);
    }
}

impl PartialEq for dyn PoolKeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.driver() == other.driver() && self.pool() == other.pool()
    }
}

impl Eq for dyn PoolKeyView + '_ {}
