//! `PrioritySort`: orders the active queue by pod priority, highest first, then by the time the pod
//! entered the queue, oldest first (upstream `queuesort.PrioritySort`).

use unisched_framework::{Plugin, QueueSortPlugin, QueuedPodInfo};

use crate::names::PRIORITY_SORT;

/// Higher `spec.priority` first; equal priorities in queue order.
#[derive(Clone, Copy, Debug, Default)]
pub struct PrioritySort;

impl Plugin for PrioritySort {
    fn name(&self) -> &str {
        PRIORITY_SORT
    }
    unisched_framework::serves!(as_queue_sort);
}

impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        let (pa, pb) = (a.pod_info.priority, b.pod_info.priority);
        pa > pb || (pa == pb && a.timestamp < b.timestamp)
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::Arc,
        time::{Duration, Instant},
    };

    use super::*;
    use crate::testing::PodBuilder;

    #[test]
    fn less_table() {
        struct Case {
            name: &'static str,
            a: (Option<i32>, u64),
            b: (Option<i32>, u64),
            want: bool,
        }
        let cases = [
            Case {
                name: "higher priority first",
                a: (Some(10), 5),
                b: (Some(1), 0),
                want: true,
            },
            Case {
                name: "lower priority later",
                a: (Some(1), 0),
                b: (Some(10), 5),
                want: false,
            },
            Case {
                name: "same priority older first",
                a: (Some(3), 1),
                b: (Some(3), 2),
                want: true,
            },
            Case {
                name: "same priority newer later",
                a: (Some(3), 2),
                b: (Some(3), 1),
                want: false,
            },
            Case {
                name: "identical is not less",
                a: (Some(3), 1),
                b: (Some(3), 1),
                want: false,
            },
            Case {
                name: "unset priority is zero",
                a: (None, 0),
                b: (Some(-1), 0),
                want: true,
            },
        ];
        let base = Instant::now();
        let queued = |name: &str, (prio, secs): (Option<i32>, u64)| {
            let mut b = PodBuilder::new(name);
            if let Some(p) = prio {
                b = b.priority(p);
            }
            QueuedPodInfo::new(Arc::new(b.info()), base + Duration::from_secs(secs))
        };
        for c in cases {
            let (a, b) = (queued("a", c.a), queued("b", c.b));
            assert_eq!(PrioritySort.less(&a, &b), c.want, "{}", c.name);
        }
    }
}
