//! `ImageLocality`: prefers nodes that already have the pod's container images (upstream
//! `imagelocality`).
//!
//! A node's score is the sum, over the pod's init and regular containers whose image the node has
//! (`NodeInfo::image_states`, filled by the cache from `node.status.images`), of the image size
//! scaled by how widely it has spread (`nodes with the image / all nodes`), so that an image every
//! node has says little about this one. The sum is clamped to `[23 MiB, 1000 MiB × containers]` and
//! mapped linearly onto 0..100. An image without a tag is looked up as `:latest`. No normalisation.

use std::borrow::Cow;

use k8s_openapi::api::core::v1::Container;
use unisched_framework::{
    CycleState, ImageStateSummary, MAX_NODE_SCORE, NodeInfo, Plugin, PodInfo, ScorePlugin, Status,
};

use crate::names::IMAGE_LOCALITY;

const MB: i64 = 1024 * 1024;
/// Below this the score is 0: small images are cheap to pull anyway.
const MIN_THRESHOLD: i64 = 23 * MB;
/// Per container, at and above this the score is 100.
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

/// Image locality scoring.
#[derive(Clone, Copy, Debug, Default)]
pub struct ImageLocality;

impl Plugin for ImageLocality {
    fn name(&self) -> &str {
        IMAGE_LOCALITY
    }
    unisched_framework::serves!(as_score);
}

/// The name under which the runtime reports an image: `:latest` is added when there is no tag.
fn normalized_image_name(name: &str) -> Cow<'_, str> {
    let colon = name.rfind(':');
    let slash = name.rfind('/');
    let has_tag = match (colon, slash) {
        (Some(c), Some(s)) => c > s,
        (Some(_), None) => true,
        (None, _) => false,
    };
    if has_tag {
        Cow::Borrowed(name)
    } else {
        Cow::Owned(format!("{name}:latest"))
    }
}

/// The image size scaled by its spread over the cluster.
fn scaled_image_score(state: &ImageStateSummary, total_nodes: usize) -> i64 {
    // Sizes and node counts are far below 2^52: the float math is exact enough, as upstream's.
    let spread = state.num_nodes as f64 / total_nodes.max(1) as f64;
    (state.size as f64 * spread) as i64
}

/// Maps the summed image scores onto 0..100 for a pod with `containers` containers.
fn calculate_priority(sum: i64, containers: usize) -> i64 {
    let max_threshold =
        MAX_CONTAINER_THRESHOLD.saturating_mul(i64::try_from(containers.max(1)).unwrap_or(i64::MAX));
    let clamped = sum.clamp(MIN_THRESHOLD, max_threshold.max(MIN_THRESHOLD));
    let range = max_threshold - MIN_THRESHOLD;
    if range <= 0 {
        return 0;
    }
    // 100 × (clamped − min) / range, in 128 bits: the product can exceed i64 for huge pods.
    let score = i128::from(MAX_NODE_SCORE) * i128::from(clamped - MIN_THRESHOLD) / i128::from(range);
    i64::try_from(score).unwrap_or(MAX_NODE_SCORE)
}

fn containers(pod: &PodInfo) -> impl Iterator<Item = &Container> {
    let spec = pod.pod.spec.as_ref();
    spec.and_then(|s| s.init_containers.as_deref())
        .unwrap_or_default()
        .iter()
        .chain(spec.map(|s| s.containers.as_slice()).unwrap_or_default())
}

impl ScorePlugin for ImageLocality {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        // No image on the node: the sum is zero, which scores zero however many containers the pod
        // has (below the minimum threshold); most nodes of a large cluster answer here.
        if node.image_states.is_empty() {
            return Ok(0);
        }
        let total_nodes = state.node_count();
        let mut sum: i64 = 0;
        let mut count = 0;
        for c in containers(pod) {
            count += 1;
            let Some(image) = c.image.as_deref() else { continue };
            if let Some(s) = node.image_states.get(normalized_image_name(image).as_ref()) {
                sum = sum.saturating_add(scaled_image_score(s, total_nodes));
            }
        }
        Ok(calculate_priority(sum, count))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use unisched_framework::Snapshot;

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder, with_image_states};

    #[test]
    fn normalized_names() {
        for (name, want) in [
            ("nginx", "nginx:latest"),
            ("nginx:1.27", "nginx:1.27"),
            ("registry:5000/team/app", "registry:5000/team/app:latest"),
            ("registry:5000/team/app:v2", "registry:5000/team/app:v2"),
            ("gcr.io/x/y@sha256:abc", "gcr.io/x/y@sha256:abc"),
        ] {
            assert_eq!(normalized_image_name(name), want, "{name}");
        }
    }

    #[test]
    fn priority_thresholds() {
        struct Case {
            sum: i64,
            containers: usize,
            want: i64,
        }
        let cases = [
            Case {
                sum: 0,
                containers: 1,
                want: 0,
            },
            Case {
                sum: MIN_THRESHOLD,
                containers: 1,
                want: 0,
            },
            Case {
                sum: 1000 * MB,
                containers: 1,
                want: 100,
            },
            Case {
                sum: 5000 * MB,
                containers: 1,
                want: 100,
            },
            // (500 − 23) / (1000 − 23) = 48.8 %
            Case {
                sum: 500 * MB,
                containers: 1,
                want: 48,
            },
            // Two containers double the ceiling: (500 − 23) / (2000 − 23).
            Case {
                sum: 500 * MB,
                containers: 2,
                want: 24,
            },
            Case {
                sum: i64::MAX,
                containers: usize::MAX,
                want: 100,
            },
        ];
        for c in cases {
            assert_eq!(
                calculate_priority(c.sum, c.containers),
                c.want,
                "{} over {}",
                c.sum,
                c.containers
            );
        }
    }

    /// Scores of `pod` on every node of a cluster built from `nodes`.
    fn scores(pod: PodBuilder, nodes: Vec<NodeBuilder>) -> Vec<i64> {
        let infos = with_image_states(nodes.into_iter().map(NodeBuilder::info).collect());
        let snapshot = Arc::new(Snapshot::from_node_infos(infos));
        let state = CycleState::with_snapshot(snapshot.clone());
        let pod = pod.info();
        snapshot
            .nodes()
            .iter()
            .map(|n| ImageLocality.score(&state, &pod, n).unwrap())
            .collect()
    }

    #[test]
    fn score_table() {
        struct Case {
            name: &'static str,
            pod: PodBuilder,
            nodes: Vec<NodeBuilder>,
            want: Vec<i64>,
        }
        let n = NodeBuilder::new;
        let cases = vec![
            Case {
                name: "no images anywhere",
                pod: PodBuilder::new("p").image("app:v1"),
                nodes: vec![n("a"), n("b")],
                want: vec![0, 0],
            },
            Case {
                // 300 MiB on 1 of 2 nodes scales to 150 MiB: 100 × (150 − 23) / 977 = 12.99, truncated.
                name: "one image on one of two nodes",
                pod: PodBuilder::new("p").image("app:v1"),
                nodes: vec![n("a").image(&["app:v1"], 300 * MB), n("b")],
                want: vec![12, 0],
            },
            Case {
                // On both nodes the spread is 1: (300 − 23) / 977 = 28 %.
                name: "an image everywhere counts fully",
                pod: PodBuilder::new("p").image("app:v1"),
                nodes: vec![
                    n("a").image(&["app:v1"], 300 * MB),
                    n("b").image(&["app:v1"], 300 * MB),
                ],
                want: vec![28, 28],
            },
            Case {
                name: "untagged image matches :latest",
                pod: PodBuilder::new("p").image("app"),
                nodes: vec![n("a").image(&["app:latest", "app@sha256:1"], 1000 * MB)],
                want: vec![100],
            },
            Case {
                name: "other tag does not match",
                pod: PodBuilder::new("p").image("app:v2"),
                nodes: vec![n("a").image(&["app:v1"], 1000 * MB)],
                want: vec![0],
            },
            Case {
                // init 400 + main 600 on the single node: (1000 − 23) / (2000 − 23) = 49 %.
                name: "init containers count, and raise the ceiling",
                pod: PodBuilder::new("p").init_image("init", "setup:1").image("app:v1"),
                nodes: vec![n("a").image(&["setup:1"], 400 * MB).image(&["app:v1"], 600 * MB)],
                want: vec![49],
            },
            Case {
                name: "small images score nothing",
                pod: PodBuilder::new("p").image("tiny:1"),
                nodes: vec![n("a").image(&["tiny:1"], 20 * MB)],
                want: vec![0],
            },
        ];
        for c in cases {
            assert_eq!(scores(c.pod, c.nodes), c.want, "{}", c.name);
        }
    }
}
