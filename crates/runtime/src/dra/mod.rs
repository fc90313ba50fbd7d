//! DRA in the runtime: the watches feeding the [`DraCache`](unisched_cache::DraCache) and the
//! queue ([`watch`]), and the blocking [`DraApi`](unisched_plugins::DraApi) the DynamicResources
//! plugin's binding cycle writes through ([`writer`]), built from the claim calls
//! ([`claim_calls`]) and the recovery of a lost claim create ([`lost_create`]).

mod claim_calls;
mod lost_create;
mod watch;
mod writer;

pub use claim_calls::DELETE_PROTECTION_FINALIZER;
pub(crate) use watch::observe_own_claim_changes;
pub use watch::{DraHandler, DraKind};
pub use writer::RuntimeDraApi;
