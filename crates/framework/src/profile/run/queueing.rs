//! The points the queue runs before a pod's attempt: PreEnqueue gates and QueueSort.

use super::{FailureReport, run_until_failure};
use crate::{Framework, PodInfo, QueuedPodInfo, Status};

/// PreEnqueue's gates may hold a pod back (a rejection); anything else is an error.
const PRE_ENQUEUE: FailureReport = FailureReport::rejections_stand("PreEnqueue");

impl Framework {
    /// PreEnqueue: the first rejecting plugin gates the pod. Not timed: the queue runs it for
    /// every pod it adds, outside any attempt.
    pub fn run_pre_enqueue(&self, pod: &PodInfo) -> Status {
        run_until_failure(&self.pre_enqueue, PRE_ENQUEUE, |p| Some(p.pre_enqueue(pod))).0
    }

    /// QueueSort.
    pub fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        self.queue_sort.less(a, b)
    }

    /// The QueueSort plugin's name (all profiles must agree).
    pub fn queue_sort_name(&self) -> &str {
        self.queue_sort.name()
    }
}
