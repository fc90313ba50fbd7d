//! The placement algorithm of one attempt: PreFilter, Filter over nodes (split over the worker
//! pool when the work pays for it, see [`crate::SPLIT_MIN_WORK`]), PostFilter when nothing fits,
//! PreScore/Score, and host selection.
//!
//! Filtering stops once `num_feasible_nodes_to_find` nodes pass (upstream's adaptive percentage),
//! starting where the previous attempt stopped so every node gets its turn. Unlike upstream, which
//! keeps whichever nodes its goroutines reached first, we evaluate in order in parallel batches and
//! keep the first N feasible nodes *in order*: the same inputs always give the same choice.

use std::{
    borrow::Cow,
    collections::{BTreeSet, HashMap},
    sync::Arc,
    time::{Duration, Instant},
};

use rayon::prelude::*;

use crate::{
    Code, CycleState, DIAGNOSIS_DETAIL_KEY, Diagnosis, DiagnosisDetail, FilterChain, FitError, Framework,
    NODE_VETO_KEY, NodeInfo, NodePluginScores, NodeVeto, NodeVetoHandle, PluginTiming, PodInfo,
    PreFilterResult, SPLIT_MIN_WORK, ScoreTable, SeededRng, Snapshot, Status, TimingBatch, WeightedScore,
    extender, split::WorkEstimate,
};

/// Below this many nodes every node is evaluated.
pub(crate) const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// The adaptive percentage never drops below this.
pub(crate) const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: i64 = 5;

/// How many feasible nodes to find before scoring, as upstream.
pub(crate) fn num_feasible_nodes_to_find(percentage: Option<i32>, num_all_nodes: usize) -> usize {
    let n = num_all_nodes as i64;
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return num_all_nodes;
    }
    let mut p = i64::from(percentage.unwrap_or(0));
    if p == 0 {
        p = (50 - n / 125).max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND);
    }
    if p >= 100 {
        return num_all_nodes;
    }
    let found = n * p / 100;
    (found.max(MIN_FEASIBLE_NODES_TO_FIND as i64)) as usize
}

/// Pods nominated to nodes (set by preemption); the queue implements this.
pub trait PodNominator: Send + Sync {
    /// Pods nominated to `node`.
    fn nominated_pods_for_node(&self, node: &str) -> Vec<Arc<PodInfo>>;

    /// Every nomination, by node, taken once per attempt so that Filter (run for every node on
    /// several threads) never touches the nominator's lock. Usually empty.
    fn nominations(&self) -> HashMap<String, Vec<Arc<PodInfo>>>;
}

/// No nominations (tests, simple loops).
#[derive(Debug, Default)]
pub struct NoNominations;

impl PodNominator for NoNominations {
    fn nominated_pods_for_node(&self, _node: &str) -> Vec<Arc<PodInfo>> {
        Vec::new()
    }

    fn nominations(&self) -> HashMap<String, Vec<Arc<PodInfo>>> {
        HashMap::new()
    }
}

/// The chosen node and how it was chosen.
#[derive(Clone, Debug)]
pub struct ScheduleResult {
    /// The node.
    pub suggested_host: String,
    /// Nodes evaluated by Filter (feasible + rejected).
    pub evaluated_nodes: usize,
    /// Nodes that passed Filter.
    pub feasible_nodes: usize,
    /// The best-scored nodes (up to 3), highest first, with per-plugin scores, for explanations.
    pub top_scores: Vec<NodePluginScores>,
}

/// Why an attempt produced no node.
#[derive(Clone, Debug)]
pub enum ScheduleError {
    /// No node fits; PostFilter may have run.
    Fit(Box<FitError>, Option<crate::PostFilterResult>),
    /// Something failed (a plugin error): retried after the error backoff.
    Error(Status),
}

/// Algorithm settings and the state that carries across attempts.
#[derive(Debug)]
pub struct SchedulingAlgorithm {
    percentage_of_nodes_to_score: Option<i32>,
    next_start_node_index: usize,
    rng: SeededRng,
    /// Worker pool; `None` (one thread, or threads could not be spawned) runs everything on the
    /// calling thread.
    pool: Option<Arc<rayon::ThreadPool>>,
    /// Whether a Filter section is worth splitting over `pool` (see [`crate::SPLIT_MIN_WORK`]).
    filter_work: WorkEstimate,
    /// The same for Score sections.
    score_work: WorkEstimate,
}

impl SchedulingAlgorithm {
    /// An algorithm with `parallelism` worker threads (capped to the machine) and a tie-break seed.
    /// Build it on the thread that will run its attempts: that thread becomes one of the workers.
    pub fn new(parallelism: usize, percentage_of_nodes_to_score: Option<i32>, seed: u64) -> Self {
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        let threads = parallelism.clamp(1, cores.max(1));
        let builder = || {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(|i| format!("unisched-filter-{i}"))
        };
        // The calling thread joins the pool as its first worker when it can (it is in no pool
        // yet): the attempts it runs then split their Filter and Score work with the other
        // workers without handing the whole attempt over and sleeping until it comes back, two
        // wake-ups and two sleeps per attempt that cost more CPU than the work of many nodes.
        // With one thread there is nothing to split: no pool, every attempt runs on the calling
        // thread (a pool of one other thread would only hand the work over and back).
        let pool = (threads > 1)
            .then(|| {
                builder()
                    .use_current_thread()
                    .build()
                    .or_else(|_| builder().build())
                    .ok()
            })
            .flatten()
            .map(Arc::new);
        SchedulingAlgorithm {
            percentage_of_nodes_to_score,
            next_start_node_index: 0,
            rng: SeededRng::new(seed),
            pool,
            filter_work: WorkEstimate::new(SPLIT_MIN_WORK),
            score_work: WorkEstimate::new(SPLIT_MIN_WORK),
        }
    }

    /// Splits Filter and Score sections over the pool once they are expected to take `min_work`
    /// on one thread (default [`SPLIT_MIN_WORK`]); `Duration::ZERO` splits every section of three
    /// nodes or more, as tests of the parallel paths want.
    pub fn with_split_min_work(mut self, min_work: Duration) -> Self {
        self.filter_work = WorkEstimate::new(min_work);
        self.score_work = WorkEstimate::new(min_work);
        self
    }

    /// The pool's thread count (1 without a pool).
    fn threads(&self) -> usize {
        self.pool.as_ref().map_or(1, |p| p.current_num_threads().max(1))
    }

    /// Finds a node for `pod`. `state` must be fresh for this attempt.
    pub fn schedule_pod(
        &mut self,
        fwk: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
        nominator: &dyn PodNominator,
    ) -> Result<ScheduleResult, ScheduleError> {
        let snapshot = state.snapshot();
        if snapshot.is_empty() {
            // Upstream's ErrNoNodesAvailable: an error (retried after backoff), not a FitError.
            return Err(ScheduleError::Error(Status::error(
                "no nodes available to schedule pods",
            )));
        }
        let (feasible, diagnosis, evaluated) =
            self.find_nodes_that_fit(fwk, state, pod, &snapshot, nominator)?;
        if feasible.is_empty() {
            let mut fit = FitError {
                num_all_nodes: snapshot.len(),
                diagnosis,
            };
            if let Ok(d) = state.read::<DiagnosisDetail>(DIAGNOSIS_DETAIL_KEY) {
                let extra = d.0.detail(&fit.diagnosis.node_to_status, &snapshot);
                fit.diagnosis.detail.extend(extra);
            }
            let mut nomination = None;
            // A pod-group member does not preempt on its own: the group may not fit as a whole.
            if fwk.has_post_filter_plugins() && state.pod_group.is_none() {
                let (result, status) =
                    fwk.run_post_filter(state, pod, &fit.diagnosis.node_to_status, nominator);
                if status.code() == Code::Error {
                    return Err(ScheduleError::Error(status));
                }
                let msg = status.message();
                if !msg.is_empty() {
                    fit.diagnosis.post_filter_msg = Some(msg);
                }
                nomination = result;
            }
            return Err(ScheduleError::Fit(Box::new(fit), nomination));
        }
        if feasible.len() == 1 {
            return Ok(ScheduleResult {
                suggested_host: feasible[0].name().to_string(),
                evaluated_nodes: evaluated,
                feasible_nodes: 1,
                top_scores: Vec::new(),
            });
        }
        let scores = self
            .prioritize_nodes(fwk, state, pod, &feasible)
            .map_err(ScheduleError::Error)?;
        let (host, top) = self.select_host(&feasible, &scores);
        Ok(ScheduleResult {
            suggested_host: host,
            evaluated_nodes: evaluated,
            feasible_nodes: feasible.len(),
            top_scores: top,
        })
    }

    /// PreFilter + Filter. Returns feasible nodes, the diagnosis, and how many nodes were evaluated.
    /// The diagnosis records the rejected nodes only when no node is feasible (nobody reads them
    /// otherwise).
    pub fn find_nodes_that_fit(
        &mut self,
        fwk: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nominator: &dyn PodNominator,
    ) -> Result<(Vec<Arc<NodeInfo>>, Diagnosis, usize), ScheduleError> {
        let mut diagnosis = Diagnosis::default();
        let all = snapshot.nodes();
        let (pre_result, status, rejectors) = fwk.run_pre_filter(state, pod, all);
        if !status.is_success() {
            if !status.is_rejected() {
                return Err(ScheduleError::Error(status));
            }
            diagnosis.pre_filter_msg = Some(status.message());
            diagnosis.node_to_status.set_absent(status.clone());
            diagnosis.unschedulable_plugins.extend(rejectors.iter().cloned());
            diagnosis.add_plugin_status(&status);
            return Ok((Vec::new(), diagnosis, 0));
        }

        let placement = state.pod_group.as_ref().and_then(|g| g.placement.clone());
        if let Some(node) = Self::nominated_node_fits(fwk, state, pod, snapshot, nominator)?
            && placement.as_ref().is_none_or(|p| p.contains(node.name()))
        {
            let extenders = fwk.extenders();
            if extenders.is_empty() {
                return Ok((vec![node], diagnosis, 1));
            }
            // The extenders have their say on the nominated node too; if they reject it (or
            // fail), every node is searched, as upstream.
            match extender::find_nodes_that_pass_extenders(extenders, pod, vec![node], &mut diagnosis) {
                Ok(passed) if !passed.is_empty() => return Ok((passed, diagnosis, 1)),
                Ok(_) => {}
                Err(s) => {
                    tracing::info!(pod = %pod.key(), status = %s.message(), "evaluation failed on nominated node")
                }
            }
        }
        let mut candidates = pre_filter_candidates(fwk, all, pre_result, &mut diagnosis);
        if let Some(placement) = &placement {
            // A pod-group placement narrows the nodes as upstream's placement snapshot does:
            // the others are not considered at all. Unless PreFilter narrowed them already, the
            // placement's names are looked up rather than every node tested against them.
            candidates = Cow::Owned(match candidates {
                Cow::Borrowed(_) => snapshot.subset(placement.iter()),
                Cow::Owned(narrowed) => narrowed
                    .into_iter()
                    .filter(|n| placement.contains(n.name()))
                    .collect(),
            });
        }
        let n = candidates.len();
        if n == 0 {
            return Ok((Vec::new(), diagnosis, 0));
        }
        let extenders = fwk.extenders();
        let to_find = if !fwk.has_filter_plugins()
            && !fwk.has_score_plugins()
            && !extenders.any_filter()
            && !extenders.any_prioritizer()
        {
            1
        } else {
            num_feasible_nodes_to_find(
                fwk.percentage_of_nodes_to_score()
                    .or(self.percentage_of_nodes_to_score),
                n,
            )
        };
        let start = self.next_start_node_index % n;
        let veto = state
            .read::<NodeVetoHandle>(NODE_VETO_KEY)
            .ok()
            .filter(|h| !state.skip_filter_plugins.contains(&h.plugin))
            .map(|h| h.veto.clone());
        let node_check = NodeCheck {
            fwk,
            chain: fwk.filter_chain(state),
            state,
            pod,
            nominations: nominator.nominations(),
            // Extender filters may reject every feasible node: the FitError then needs the
            // plugins' rejections too.
            keep_rejections: extenders.any_filter(),
        };
        fwk.count_filter_evaluations(&node_check.chain);
        let FeasibleSearch {
            feasible,
            rejected,
            processed,
        } = self.search_feasible(&node_check, &candidates, veto.as_ref(), start, to_find)?;
        // Only a pod that fits nowhere needs its rejections (the FailedScheduling message,
        // PostFilter); once a node is feasible they are dropped unrecorded: with thousands of
        // rejected nodes per pod, the name-keyed map was the scheduling cycle's largest cost.
        if feasible.is_empty() || node_check.keep_rejections {
            let rejected = self.complete_vetoed(&node_check, &candidates, rejected)?;
            diagnosis.node_to_status.reserve(rejected.len());
            for (i, s) in rejected {
                diagnosis.add_plugin_status(&s);
                diagnosis.node_to_status.set(candidates[i].name(), s);
            }
        }
        if extenders.is_empty() {
            return Ok((feasible, diagnosis, processed));
        }
        let feasible = extender::find_nodes_that_pass_extenders(extenders, pod, feasible, &mut diagnosis)
            .map_err(ScheduleError::Error)?;
        Ok((feasible, diagnosis, processed))
    }

    /// Filters `candidates` round-robin from `start`, in parallel batches when the work pays for
    /// it, until `to_find` pass or all were evaluated; vetoed nodes are rejected without running
    /// the chain. Remembers where the next attempt starts. An error status ends the search.
    fn search_feasible(
        &mut self,
        node_check: &NodeCheck<'_>,
        candidates: &[Arc<NodeInfo>],
        veto: Option<&Arc<dyn NodeVeto>>,
        start: usize,
        to_find: usize,
    ) -> Result<FeasibleSearch, ScheduleError> {
        let n = candidates.len();
        let mut feasible = Vec::with_capacity(to_find.min(n));
        // Rejected nodes with their status, or `None` for a vetoed node (status not computed).
        let mut rejected: Vec<(usize, Option<Status>)> = Vec::new();
        let mut processed = 0usize;
        let mut offset = 0usize;
        let threads = self.threads();
        while offset < n && feasible.len() < to_find {
            let want = to_find - feasible.len();
            let batch = (want + want / 4).max(threads * 8).min(n - offset);
            let idx: Vec<usize> = (offset..offset + batch).map(|i| (start + i) % n).collect();
            let check = |timings: &mut TimingBatch<'_>, &i: &usize| match veto {
                Some(v) if v.vetoes(&candidates[i]) => None,
                _ => Some(node_check.run(&candidates[i], timings)),
            };
            // Each worker keeps its timed successes to itself until its share is done.
            let began = Instant::now();
            let (statuses, used): (Vec<Option<Status>>, usize) = match &self.pool {
                Some(pool) if self.filter_work.split(batch, threads) => (
                    pool.install(|| {
                        // The workers find the batch's nodes in the shared cache.
                        warm_nodes(candidates, &idx);
                        idx.par_iter()
                            .map_init(|| node_check.chain.timing_batch(), check)
                            .collect()
                    }),
                    threads,
                ),
                _ => {
                    // On one thread the batch ends at the node that completes the search: the
                    // nodes after it would not be used (the loop below stops there too).
                    let mut timings = node_check.chain.timing_batch();
                    let mut out = Vec::with_capacity(batch);
                    let mut passed = 0usize;
                    for (k, i) in idx.iter().enumerate() {
                        if k % WARM_AHEAD == 0 {
                            warm_nodes(candidates, &idx[k..idx.len().min(k + WARM_AHEAD)]);
                        }
                        let s = check(&mut timings, i);
                        passed += usize::from(s.as_ref().is_some_and(Status::is_success));
                        out.push(s);
                        if passed >= want {
                            break;
                        }
                    }
                    (out, 1)
                }
            };
            self.filter_work.record(statuses.len(), used, began.elapsed());
            for (k, s) in statuses.into_iter().enumerate() {
                let node = &candidates[idx[k]];
                processed = offset + k + 1;
                match s {
                    Some(s) if s.is_success() => {
                        feasible.push(node.clone());
                        if feasible.len() >= to_find {
                            break;
                        }
                    }
                    Some(s) if s.code() == Code::Error => {
                        self.next_start_node_index = (start + processed) % n;
                        return Err(ScheduleError::Error(s));
                    }
                    s => {
                        if feasible.is_empty() || node_check.keep_rejections {
                            rejected.push((idx[k], s));
                        }
                    }
                }
            }
            offset += batch;
        }
        self.next_start_node_index = (start + processed) % n;
        Ok(FeasibleSearch {
            feasible,
            rejected,
            processed,
        })
    }

    /// The nominated node of a pod PreemptPostFilter made room for, when it still fits there
    /// (with the pods nominated to it): then no other node is evaluated. An error ends the
    /// attempt; any other rejection falls back to the full search.
    fn nominated_node_fits(
        fwk: &Framework,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nominator: &dyn PodNominator,
    ) -> Result<Option<Arc<NodeInfo>>, ScheduleError> {
        let Some(nominated) = pod
            .pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .filter(|n| !n.is_empty())
        else {
            return Ok(None);
        };
        let Some(node) = snapshot.get(nominated) else {
            return Ok(None);
        };
        let s =
            fwk.run_filter_with_nominated(state, pod, node, &nominator.nominated_pods_for_node(nominated));
        if s.is_success() {
            return Ok(Some(node.clone()));
        }
        if s.code() == Code::Error {
            return Err(ScheduleError::Error(s));
        }
        Ok(None)
    }

    /// The statuses of vetoed nodes ([`crate::NodeVeto`]), for an attempt that found no node: the
    /// whole filter chain runs on them now, so the diagnosis is the one the chain would have
    /// given. An error there ends the attempt as it would have. A vetoed node the chain accepts
    /// breaks the veto's contract; it is reported and kept rejected, with the status saying so.
    fn complete_vetoed(
        &self,
        node_check: &NodeCheck<'_>,
        candidates: &[Arc<NodeInfo>],
        rejected: Vec<(usize, Option<Status>)>,
    ) -> Result<Vec<(usize, Status)>, ScheduleError> {
        let vetoed = rejected.iter().filter(|(_, s)| s.is_none()).count();
        // The whole chain's status for each vetoed node, in place, in order.
        let complete = |(i, s): (usize, Option<Status>)| {
            let s = s.unwrap_or_else(|| node_check.run(&candidates[i], &mut node_check.chain.timing_batch()));
            (i, s)
        };
        let statuses: Vec<(usize, Status)> = match &self.pool {
            Some(pool) if self.filter_work.split(vetoed, self.threads()) => {
                pool.install(|| rejected.into_par_iter().map(complete).collect())
            }
            _ => rejected.into_iter().map(complete).collect(),
        };
        let mut out = Vec::with_capacity(statuses.len());
        for (i, s) in statuses {
            if s.code() == Code::Error {
                return Err(ScheduleError::Error(s));
            }
            if s.is_success() {
                tracing::error!(
                    node = candidates[i].name(),
                    "a node veto rejected a node its plugin's Filter accepts; the node stays rejected for this attempt"
                );
                out.push((
                    i,
                    Status::unresolvable("node vetoed by a plugin whose Filter accepts it (a scheduler bug)"),
                ));
                continue;
            }
            out.push((i, s));
        }
        Ok(out)
    }

    /// PreScore + Score + normalisation + weights, then the extenders' scores.
    pub fn prioritize_nodes(
        &mut self,
        fwk: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<ScoreTable, Status> {
        let extenders = fwk.extenders();
        if extenders.is_empty() {
            if !fwk.has_score_plugins() {
                return Ok(ScoreTable::uniform(nodes.len(), 1));
            }
            return self.plugin_scores(fwk, state, pod, nodes);
        }
        // With extenders, scores start at 0 even without Score plugins, as upstream.
        let mut table = if fwk.has_score_plugins() {
            self.plugin_scores(fwk, state, pod, nodes)?
        } else {
            let s = fwk.run_pre_score(state, pod, nodes);
            if !s.is_success() {
                return Err(s);
            }
            ScoreTable::uniform(nodes.len(), 0)
        };
        extender::prioritize_with_extenders(extenders, pod, nodes, &mut table, fwk.observer());
        Ok(table)
    }

    /// PreScore + Score + normalisation + weights of the profile's plugins.
    fn plugin_scores(
        &mut self,
        fwk: &Framework,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<ScoreTable, Status> {
        let s = fwk.run_pre_score(state, pod, nodes);
        if !s.is_success() {
            return Err(s);
        }
        let plugins = fwk.active_score_plugins(state);
        let state_ref: &CycleState = state;
        let timings: Vec<PluginTiming> = plugins
            .iter()
            .map(|ws| fwk.plugin_timing(state.record_plugin_metrics, "Score", ws.plugin.name()))
            .collect();
        // One row of scores per node, written in place: a vector per node cost an allocation each.
        let width = plugins.len();
        let score_node =
            |batch: &mut TimingBatch<'_>, (row, node): (&mut [i64], &Arc<NodeInfo>)| -> Option<Status> {
                batch.start_node();
                for (i, ((ws, timing), slot)) in plugins.iter().zip(&timings).zip(row).enumerate() {
                    let name = ws.plugin.name();
                    let r = fwk.run_timed_in(
                        timing,
                        batch,
                        i,
                        "Score",
                        name,
                        || ws.plugin.score(state_ref, pod, node),
                        |r| r.as_ref().map_or_else(Status::code, |_| Code::Success),
                    );
                    match r {
                        Ok(score) => *slot = score,
                        Err(s) => {
                            return Some(
                                s.with_plugin(name)
                                    .wrap_error(format!("running Score plugin {name:?}")),
                            );
                        }
                    }
                }
                None
            };
        let pool = &self.pool;
        let threads = self.threads();
        let score_work = &mut self.score_work;
        let timed_per_call = timings.iter().any(PluginTiming::times_each_call);
        let split = pool.is_some() && width > 0 && score_work.split(nodes.len(), threads);
        fwk.timed_score(&plugins, || {
            // An attempt on one thread that times no plugin call runs each plugin over all
            // nodes at once: a plugin then looks up its PreScore state once, not once per node,
            // and runs in a tight loop (2-10 % less engine cycle than node by node, measured).
            if !timed_per_call && !split {
                let began = Instant::now();
                let raw = score_plugin_by_plugin(state_ref, pod, &plugins, nodes);
                score_work.record(nodes.len(), 1, began.elapsed());
                return match raw.and_then(|raw| fwk.finish_scores(state_ref, pod, &plugins, nodes, raw)) {
                    Ok(t) => (Ok(t), Code::Success),
                    Err(s) => (Err(s), Code::Error),
                };
            }
            let mut rows = vec![0i64; nodes.len() * width];
            // The first failure in node order, as a sequential run would report.
            let began = Instant::now();
            let (failure, used) = match pool {
                Some(pool) if split => (
                    pool.install(|| {
                        rows.par_chunks_mut(width)
                            .zip(nodes.par_iter())
                            .map_init(|| TimingBatch::new(&timings), score_node)
                            .collect::<Vec<Option<Status>>>()
                            .into_iter()
                            .flatten()
                            .next()
                    }),
                    threads,
                ),
                _ => {
                    let mut batch = TimingBatch::new(&timings);
                    let failure = rows
                        .chunks_mut(width.max(1))
                        .zip(nodes)
                        .find_map(|x| score_node(&mut batch, x));
                    (failure, 1)
                }
            };
            score_work.record(nodes.len(), used, began.elapsed());
            if let Some(s) = failure {
                return (Err(s), Code::Error);
            }
            let raw: Vec<Vec<i64>> = (0..width)
                .map(|pi| rows.iter().skip(pi).step_by(width).copied().collect())
                .collect();
            match fwk.finish_scores(state_ref, pod, &plugins, nodes, raw) {
                Ok(t) => (Ok(t), Code::Success),
                Err(s) => (Err(s), Code::Error),
            }
        })
    }

    /// The highest total wins; equal totals are broken uniformly at random (seeded). Returns the
    /// host and the top three for explanations: the host, then the two best others (highest total,
    /// then the order Filter found them in, which is deterministic for the same inputs).
    pub fn select_host(
        &mut self,
        nodes: &[Arc<NodeInfo>],
        scores: &ScoreTable,
    ) -> (String, Vec<NodePluginScores>) {
        let totals = &scores.totals;
        // One draw among the tied best, not one per tie: with hundreds of nodes on equal totals
        // (the usual case on a uniform cluster) a draw and its division for every one of them
        // was a visible part of the attempt. Each tied node is still equally likely.
        let (mut max, mut ties) = (i64::MIN, 0u64);
        for &t in totals {
            if t > max {
                (max, ties) = (t, 1);
            } else if t == max {
                ties += 1;
            }
        }
        let pick = self.rng.below(ties);
        let chosen = totals
            .iter()
            .enumerate()
            .filter(|&(_, &t)| t == max)
            .nth(usize::try_from(pick).unwrap_or(usize::MAX))
            .map_or(0, |(i, _)| i);
        let Some(host) = nodes.get(chosen) else {
            return (String::new(), Vec::new());
        };
        // The two best other nodes, without sorting them all; equal totals keep the order in
        // which Filter found the nodes (comparing names instead cost a string comparison per
        // node whenever totals tie).
        let better = |a: usize, b: usize| totals[a] > totals[b];
        let mut runners: [Option<usize>; 2] = [None, None];
        for i in (0..nodes.len().min(totals.len())).filter(|&i| i != chosen) {
            match runners {
                [None, _] => runners[0] = Some(i),
                [Some(a), _] if better(i, a) => runners = [Some(i), Some(a)],
                [Some(_), None] => runners[1] = Some(i),
                [Some(_), Some(b)] if better(i, b) => runners[1] = Some(i),
                _ => {}
            }
        }
        let mut top = vec![scores.node(chosen, host.name())];
        top.extend(
            runners
                .into_iter()
                .flatten()
                .map(|i| scores.node(i, nodes[i].name())),
        );
        (host.name().to_string(), top)
    }
}

fn fwk_prefilter_names(fwk: &Framework) -> String {
    let names: BTreeSet<String> = fwk
        .plugin_names()
        .get("preFilter")
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .collect();
    names.into_iter().collect::<Vec<_>>().join(" ")
}

/// The nodes Filter considers: all of them, borrowed, unless PreFilter narrowed them; then
/// the others are recorded as unresolvable in the diagnosis. Borrowed because copying the
/// snapshot's list would touch every node's reference count twice per attempt.
fn pre_filter_candidates<'n>(
    fwk: &Framework,
    all: &'n [Arc<NodeInfo>],
    pre_result: Option<PreFilterResult>,
    diagnosis: &mut Diagnosis,
) -> Cow<'n, [Arc<NodeInfo>]> {
    match pre_result.and_then(|r| r.node_names) {
        Some(names) => {
            let restricted: Vec<Arc<NodeInfo>> =
                all.iter().filter(|n| names.contains(n.name())).cloned().collect();
            diagnosis.node_to_status.set_absent(Status::unresolvable(format!(
                "node(s) didn't satisfy plugin(s) [{}]",
                fwk_prefilter_names(fwk)
            )));
            Cow::Owned(restricted)
        }
        None => Cow::Borrowed(all),
    }
}

/// What one attempt's search for feasible nodes found.
struct FeasibleSearch {
    /// The feasible nodes, in evaluation order.
    feasible: Vec<Arc<NodeInfo>>,
    /// Rejected nodes (by candidate index) with their status, or `None` for a vetoed node (status
    /// not computed); kept only while no node is feasible.
    rejected: Vec<(usize, Option<Status>)>,
    /// How many candidates were evaluated.
    processed: usize,
}

/// Everything the Filter of one node needs during one attempt, gathered once.
struct NodeCheck<'a> {
    fwk: &'a Framework,
    chain: FilterChain<'a>,
    state: &'a CycleState,
    pod: &'a PodInfo,
    nominations: HashMap<String, Vec<Arc<PodInfo>>>,
    /// Record every rejected node, not only while none is feasible.
    keep_rejections: bool,
}

impl NodeCheck<'_> {
    /// The Filter chain's verdict on `node`, with the pods nominated to it where there are any;
    /// timed successes go to the worker's `timings` (from this chain).
    fn run(&self, node: &Arc<NodeInfo>, timings: &mut TimingBatch<'_>) -> Status {
        match self.nominations.get(node.name()) {
            Some(nominated) => {
                self.fwk
                    .run_filter_chain_with_nominated(&self.chain, self.state, self.pod, node, nominated)
            }
            None => self
                .fwk
                .run_filter_chain_in(&self.chain, timings, self.state, self.pod, node),
        }
    }
}

/// Every Score plugin's raw scores, one plugin over all nodes at a time. A failure is reported
/// as a node-by-node run would have met it first: the lowest node, and among plugins failing on
/// that node the first.
fn score_plugin_by_plugin(
    state: &CycleState,
    pod: &PodInfo,
    plugins: &[&WeightedScore],
    nodes: &[Arc<NodeInfo>],
) -> Result<Vec<Vec<i64>>, Status> {
    let mut raw = Vec::with_capacity(plugins.len());
    let mut first_failure: Option<(usize, &str, Status)> = None;
    for ws in plugins {
        let mut scores = vec![0i64; nodes.len()];
        if let Err((node, s)) = ws.plugin.score_nodes(state, pod, nodes, &mut scores)
            && first_failure
                .as_ref()
                .is_none_or(|(earliest, _, _)| node < *earliest)
        {
            first_failure = Some((node, ws.plugin.name(), s));
        }
        raw.push(scores);
    }
    match first_failure {
        None => Ok(raw),
        Some((_, name, s)) => Err(s
            .with_plugin(name)
            .wrap_error(format!("running Score plugin {name:?}"))),
    }
}

/// How many nodes the one-thread search fetches into cache at a time ([`warm_nodes`]): enough
/// for the processor to have as many misses in flight as it can, few enough that their lines
/// (about four per node) are still in the nearest cache when the nodes are checked, and that a
/// search ending early has fetched little it did not use.
const WARM_AHEAD: usize = 64;

/// Loads the front fields of the `NodeInfo`s that `idx` names, in one tight pass, before any of
/// them is checked.
///
/// Why: an attempt checks hundreds of nodes whose `NodeInfo`s are scattered over the heap and
/// usually out of cache; checked one by one, each node's first Filter waits for its lines from
/// memory in turn. A pass that does nothing but load lets those misses overlap: one memory
/// latency for the group instead of one or more per node.
fn warm_nodes(candidates: &[Arc<NodeInfo>], idx: &[usize]) {
    std::hint::black_box(
        idx.iter()
            .fold(0u64, |acc, &i| acc ^ candidates[i].touch_hot_fields()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feasible_nodes_to_find_table() {
        let cases = [
            (None, 10, 10),
            (None, 99, 99),
            (None, 100, 100),
            (None, 1000, 420),
            (None, 5000, 500),
            (None, 6000, 300),
            (None, 7000, 350),
            (Some(50), 1000, 500),
            (Some(1), 1000, 100),
            (Some(100), 5000, 5000),
        ];
        for (p, n, want) in cases {
            assert_eq!(num_feasible_nodes_to_find(p, n), want, "{p:?} {n}");
        }
    }

    fn nodes(names: &[&str]) -> Vec<Arc<NodeInfo>> {
        names
            .iter()
            .map(|n| {
                let mut node = k8s_openapi::api::core::v1::Node::default();
                node.metadata.name = Some(n.to_string());
                Arc::new(NodeInfo::new(Arc::new(node)))
            })
            .collect()
    }

    fn table(totals: &[i64]) -> ScoreTable {
        ScoreTable {
            plugins: vec!["A".into(), "B".into()],
            weighted: vec![totals.iter().map(|t| t - 1).collect(), vec![1; totals.len()]],
            totals: totals.to_vec(),
        }
    }

    #[test]
    fn tied_best_nodes_are_chosen_uniformly() {
        let ns = nodes(&["a", "b", "c", "d"]);
        let mut wins = std::collections::BTreeMap::new();
        let mut algo = SchedulingAlgorithm::new(1, None, 7);
        for _ in 0..6000 {
            let (host, _) = algo.select_host(&ns, &table(&[5, 8, 8, 8]));
            *wins.entry(host).or_insert(0u32) += 1;
        }
        assert_eq!(
            wins.keys().map(String::as_str).collect::<Vec<_>>(),
            ["b", "c", "d"]
        );
        // 2,000 expected each; ±10 % is far outside a fair draw's spread (σ ≈ 37).
        for (host, n) in &wins {
            assert!((1800..=2200).contains(n), "{host} won {n} of 6000: {wins:?}");
        }
    }

    #[test]
    fn select_host_takes_a_best_node_and_the_two_best_others() {
        let ns = nodes(&["a", "b", "c", "d", "e"]);
        // (totals, the allowed hosts, the two runners-up for each host)
        let cases: &[(&[i64], &[(&str, [&str; 2])])] = &[
            (&[5, 9, 7, 3, 1], &[("b", ["c", "a"])]),
            // Ties for the best: either may win; the other is the first runner-up.
            (&[5, 9, 7, 9, 1], &[("b", ["d", "c"]), ("d", ["b", "c"])]),
            // Equal totals among the others keep the order Filter found them in.
            (&[4, 4, 9, 4, 4], &[("c", ["a", "b"])]),
            (&[2, 4, 9, 3, 4], &[("c", ["b", "e"])]),
        ];
        for (totals, allowed) in cases {
            let mut hosts = std::collections::BTreeSet::new();
            for seed in 0..32 {
                let mut algo = SchedulingAlgorithm::new(1, None, seed);
                let (host, top) = algo.select_host(&ns, &table(totals));
                let (_, runners) = allowed
                    .iter()
                    .find(|(h, _)| *h == host)
                    .unwrap_or_else(|| panic!("{totals:?}: unexpected host {host}"));
                let names: Vec<&str> = top.iter().map(|t| t.name.as_str()).collect();
                assert_eq!(names, [host.as_str(), runners[0], runners[1]], "{totals:?}");
                assert_eq!(
                    top[0].scores,
                    vec![("A".to_string(), top[0].total - 1), ("B".to_string(), 1)]
                );
                hosts.insert(host);
            }
            assert_eq!(
                hosts.len(),
                allowed.len(),
                "{totals:?}: every tied node wins for some seed"
            );
        }
        // Runners-up on equal totals come in Filter's order, not by name.
        let reversed = nodes(&["z", "y", "x"]);
        let (host, top) = SchedulingAlgorithm::new(1, None, 3).select_host(&reversed, &table(&[9, 4, 4]));
        assert_eq!(host, "z");
        assert_eq!(
            top.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["z", "y", "x"]
        );
        // Fewer than three nodes.
        let mut algo = SchedulingAlgorithm::new(1, None, 1);
        let (host, top) = algo.select_host(&ns[..2], &table(&[1, 2]));
        assert_eq!(host, "b");
        assert_eq!(
            top.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["b", "a"]
        );
    }
}
