//! Scaffolding the runtime's unit tests share: a `unisched` profile with its queue over a
//! registry, and a cache holding some nodes.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use unisched_cache::Cache;
use unisched_framework::{Framework, config::KubeSchedulerProfile};
use unisched_plugins::Registry;
use unisched_queue::{QueueConfig, SchedulingQueue};

/// The framework of a profile named `unisched` over `registry`, and a queue serving it.
pub(crate) fn unisched_profile(registry: &Registry) -> (Arc<Framework>, Arc<SchedulingQueue>) {
    let profile = KubeSchedulerProfile {
        scheduler_name: Some("unisched".into()),
        ..Default::default()
    };
    let fwk = Arc::new(Framework::new(&profile, registry).expect("the in-tree profile builds"));
    let queue = SchedulingQueue::new(vec![fwk.clone()], QueueConfig::default()).expect("one profile");
    (fwk, Arc::new(queue))
}

/// A cache that knows `nodes`.
pub(crate) fn cache_with(nodes: impl IntoIterator<Item = Node>) -> Arc<Cache> {
    let cache = Arc::new(Cache::new());
    for node in nodes {
        cache.add_node(Arc::new(node));
    }
    cache
}
