//! Device and pool identities.

use std::fmt;
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
