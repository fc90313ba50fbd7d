//! Phase 1, gathering: the pools, slices and devices of one node that its claims may use.
//!
//! Only the newest generation of each pool counts, filtered by node selection. Pools are ordered
//! by (driver, pool) with pools whose devices have binding conditions last, slices by position,
//! devices in slice order, so the search is deterministic. Incomplete and invalid pools are set
//! aside here: never allocated from, but reported when allocation fails. The counters a pool has
//! left once other claims' devices are charged are also computed here, once per allocator.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use unisched_resource::Quantity;

use super::Allocator;
use crate::error::{AllocationError, FatalError};
use crate::ids::PoolKey;
use crate::pools::{DraSnapshotIndex, PoolRecord, PreparedDevice, PreparedSlice};

/// A gathered device: where it lives for this call.
#[derive(Clone, Copy)]
pub(super) struct GatheredDevice<'i> {
    pub(super) slice: &'i PreparedSlice,
    /// Position of the slice within its pool record.
    pub(super) slice_position: u32,
    /// Index of the device within its slice.
    pub(super) index_in_slice: u32,
    /// Index into `GatheredInventory::pools`.
    pub(super) gathered_pool: u32,
}

impl<'i> GatheredDevice<'i> {
    pub(super) fn prepared(&self) -> &'i PreparedDevice {
        &self.slice.devices()[self.index_in_slice as usize]
    }
}

pub(super) struct GatheredPool<'i> {
    pub(super) index: u32,
    pub(super) rec: &'i PoolRecord,
}

#[derive(Default)]
pub(super) struct GatheredInventory<'i> {
    pub(super) pools: Vec<GatheredPool<'i>>,
    pub(super) devices: Vec<GatheredDevice<'i>>,
    pub(super) incomplete: Vec<&'i PoolKey>,
    pub(super) invalid: Vec<(&'i PoolKey, &'i str)>,
}

impl Allocator {
    pub(super) fn gather<'i>(&'i self, node: &Node) -> Result<GatheredInventory<'i>, AllocationError> {
        let index: &'i DraSnapshotIndex = &self.index;
        let node_name = node.metadata.name.as_deref().unwrap_or_default();
        // (binding-last, pool order, slice position, slice index, pool index)
        let mut relevant: Vec<(bool, u32, u32, u32, u32)> = Vec::new();
        for si in index.candidate_slices(node_name) {
            let Some((pool, pos)) = index.slice_position(si) else {
                continue;
            };
            let slice = index.slice_at(si);
            if !self.features.partitionable_devices
                && (slice.per_device_node_selection() || slice.has_shared_counters())
            {
                continue;
            }
            let targets = slice.targets(node).map_err(|source| {
                AllocationError::from(FatalError::NodeSelector {
                    slice: slice.name().to_string(),
                    source,
                })
            })?;
            if targets {
                let rec = index.pool_at(pool);
                relevant.push((rec.has_binding_conditions, rec.order, pos, si, pool));
            }
        }
        relevant.sort_unstable();
        let mut g = GatheredInventory::default();
        let mut last_pool = None;
        for (_, _, pos, si, pool) in relevant {
            let rec = index.pool_at(pool);
            if last_pool != Some(pool) {
                last_pool = Some(pool);
                if !rec.complete {
                    g.incomplete.push(&rec.key);
                    continue;
                }
                if let Some(why) = &rec.invalid {
                    g.invalid.push((&rec.key, why.as_str()));
                    continue;
                }
                g.pools.push(GatheredPool { index: pool, rec });
            } else if !rec.complete || rec.invalid.is_some() {
                continue;
            }
            let slice = index.slice_at(si);
            let gathered_pool = (g.pools.len() - 1) as u32;
            for dev in 0..slice.devices().len() {
                g.devices.push(GatheredDevice {
                    slice,
                    slice_position: pos,
                    index_in_slice: dev as u32,
                    gathered_pool,
                });
            }
        }
        Ok(g)
    }

    pub(super) fn available_counters(&self, pool_index: u32, rec: &PoolRecord) -> Arc<Vec<Quantity>> {
        if let Some(hit) = self.available_counters.read().get(&pool_index) {
            return Arc::clone(hit);
        }
        let mut avail: Vec<Quantity> = rec.counters.iter().map(|c| c.total.clone()).collect();
        for (pos, &si) in rec.slices.iter().enumerate() {
            let slice = self.index.slice_at(si);
            for (di, dev) in slice.devices().iter().enumerate() {
                if !self.state.is_allocated(&dev.id) {
                    continue;
                }
                for (ci, amount) in rec
                    .consumption
                    .get(pos)
                    .and_then(|p| p.get(di))
                    .into_iter()
                    .flatten()
                {
                    if let Some(slot) = avail.get_mut(*ci as usize) {
                        // Overdrawn counters stay at the most negative representable value.
                        *slot = slot
                            .checked_sub(amount)
                            .unwrap_or_else(|| Quantity::from_nanos(i128::MIN, slot.format()));
                    }
                }
            }
        }
        let avail = Arc::new(avail);
        self.available_counters
            .write()
            .insert(pool_index, Arc::clone(&avail));
        avail
    }
}
