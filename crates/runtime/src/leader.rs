//! Leader election on a `coordination.k8s.io/v1` Lease.
//!
//! Semantics follow client-go's: a candidate takes the lease when it is free or when the holder has
//! not renewed it for `leaseDuration` *as observed locally* (clocks between machines are not
//! trusted: we time how long the record stayed unchanged). The leader renews every `retryPeriod`;
//! if it cannot renew within `renewDeadline` it has lost the lease: the flag drops at once (so no
//! further write leaves this process) and the caller exits, as kube-scheduler does. Writes are merge
//! patches carrying `resourceVersion`, so two candidates cannot both win the same round.

use std::time::{Duration, Instant};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::json;

use crate::{metrics::Metrics, writer::LeaderFlag};

/// Lease settings.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Lease namespace.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// This replica's identity (`hostname_uuid`).
    pub identity: String,
    /// `leaseDuration`.
    pub lease_duration: Duration,
    /// `renewDeadline`.
    pub renew_deadline: Duration,
    /// `retryPeriod`.
    pub retry_period: Duration,
}

/// How a round went.
#[derive(Debug, PartialEq, Eq)]
enum Round {
    Leading,
    Following,
    /// We led, but our renewal deadline passed before the round could write: the record read may
    /// already be stale (another replica may have taken the lease meanwhile), so nothing was sent.
    Expired,
}

/// How an election ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectionEnd {
    /// Leadership was lost (taken by another replica, or not renewed within `renewDeadline`):
    /// the process must exit.
    Lost,
    /// Asked to stop; the lease was released if this replica held it.
    Stopped,
}

/// Runs the election until leadership is lost or `stop` turns true. Never returns while leading
/// unless asked to stop, and then only after the flag was cleared and the lease released (an
/// empty `holderIdentity`, as client-go's `ReleaseOnCancel`), so a standby takes over at its next
/// retry instead of waiting a whole `leaseDuration`.
///
/// Every successful renewal moves the writer's fencing deadline to *send time + renewDeadline*:
/// other candidates wait `leaseDuration` from when they first saw our record, which is after we
/// sent it, so a write checked against that deadline cannot overlap a new leader's term, even if
/// this process was paused and its renew loop has not noticed yet.
pub async fn run_leader_election(
    client: Client,
    cfg: LeaseConfig,
    flag: LeaderFlag,
    metrics: Metrics,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> ElectionEnd {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut observed: Option<(String, Instant)> = None; // (resourceVersion, when first seen)
    let mut leading = false;
    let mut last_renew = Instant::now();
    loop {
        if *stop.borrow() {
            return stop_leading(&api, &cfg, &flag, &metrics, leading).await;
        }
        // While leading, a round may only write before the fence it renews closes: a process
        // paused past that point (SIGSTOP, a long GC-like stall of the host) must not renew a
        // lease another replica may already hold by its own clock, nor send anything else.
        let write_by = leading.then(|| last_renew + cfg.renew_deadline);
        if fence_closed(write_by) {
            return renewal_missed(&flag, &metrics, &cfg);
        }
        let sent = Instant::now();
        match try_acquire_or_renew(&api, &cfg, &mut observed, write_by).await {
            Ok(Round::Leading) => {
                if !leading {
                    tracing::info!(lease = %cfg.name, identity = %cfg.identity, "acquired leader lease");
                }
                leading = true;
                last_renew = sent;
                flag.renewed(sent, cfg.renew_deadline);
                metrics.leader.set(1);
            }
            Ok(Round::Expired) => return renewal_missed(&flag, &metrics, &cfg),
            Ok(Round::Following) => {
                if leading {
                    flag.set(false);
                    metrics.leader.set(0);
                    tracing::error!(lease = %cfg.name, "leader lease taken by another replica");
                    return ElectionEnd::Lost;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "leader election round failed");
                if fence_closed(write_by) {
                    return renewal_missed(&flag, &metrics, &cfg);
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(cfg.retry_period) => {}
            _ = stop.changed() => {}
        }
    }
}

/// Whether `write_by` (the fence of a leader, `None` for a candidate) has passed.
fn fence_closed(write_by: Option<Instant>) -> bool {
    write_by.is_some_and(|t| Instant::now() >= t)
}

/// The lease was not renewed within `renewDeadline`: stop writing at once; the caller exits.
fn renewal_missed(flag: &LeaderFlag, metrics: &Metrics, cfg: &LeaseConfig) -> ElectionEnd {
    flag.set(false);
    metrics.leader.set(0);
    tracing::error!(lease = %cfg.name, "failed to renew the leader lease within renewDeadline");
    ElectionEnd::Lost
}

/// Stops writing, then gives the lease up if we hold it.
async fn stop_leading(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    flag: &LeaderFlag,
    metrics: &Metrics,
    leading: bool,
) -> ElectionEnd {
    flag.set(false);
    metrics.leader.set(0);
    if leading {
        match release(api, cfg).await {
            Ok(true) => tracing::info!(lease = %cfg.name, "released the leader lease"),
            Ok(false) => tracing::info!(lease = %cfg.name, "lease already held by another replica"),
            Err(e) => tracing::warn!(lease = %cfg.name, error = %e, "could not release the leader lease"),
        }
    }
    ElectionEnd::Stopped
}

/// Empties `holderIdentity` if the lease is still ours (with a `resourceVersion` precondition, so
/// a lease a standby just took is left alone). `Ok(false)` when it was not ours.
pub async fn release(api: &Api<Lease>, cfg: &LeaseConfig) -> Result<bool, kube::Error> {
    let Some(lease) = api.get_opt(&cfg.name).await? else {
        return Ok(false);
    };
    let spec = lease.spec.unwrap_or_default();
    if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
        return Ok(false);
    }
    let now = MicroTime(Timestamp::now());
    let patch = json!({
        "metadata": {"resourceVersion": lease.metadata.resource_version},
        "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now},
    });
    match api
        .patch(&cfg.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// One round: read the lease, then take or renew it if we may. `write_by` (set while leading) is
/// when our fence closes; past it the round sends nothing and answers [`Round::Expired`].
async fn try_acquire_or_renew(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    observed: &mut Option<(String, Instant)>,
    write_by: Option<Instant>,
) -> Result<Round, kube::Error> {
    let now = MicroTime(Timestamp::now());
    let duration_secs = i32::try_from(cfg.lease_duration.as_secs())
        .unwrap_or(i32::MAX)
        .max(1);
    let Some(lease) = api.get_opt(&cfg.name).await? else {
        if fence_closed(write_by) {
            return Ok(Round::Expired);
        }
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(cfg.name.clone()),
                namespace: Some(cfg.namespace.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(cfg.identity.clone()),
                lease_duration_seconds: Some(duration_secs),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(Round::Leading),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Round::Following),
            Err(e) => Err(e),
        };
    };
    let rv = lease.metadata.resource_version.clone().unwrap_or_default();
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let held_by_me = holder == cfg.identity;
    // Track how long the record has been unchanged, by our own clock.
    let first_seen = match observed {
        Some((seen_rv, at)) if *seen_rv == rv => *at,
        _ => {
            *observed = Some((rv.clone(), Instant::now()));
            Instant::now()
        }
    };
    let held_duration =
        Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(15)).unwrap_or(15));
    let expired = holder.is_empty() || first_seen.elapsed() >= held_duration;
    if !held_by_me && !expired {
        return Ok(Round::Following);
    }
    // The read may have been answered (or this process resumed) after our fence closed.
    if fence_closed(write_by) {
        return Ok(Round::Expired);
    }
    let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!held_by_me);
    let mut spec_patch = json!({
        "holderIdentity": cfg.identity,
        "leaseDurationSeconds": duration_secs,
        "renewTime": now,
        "leaseTransitions": transitions,
    });
    if !held_by_me {
        spec_patch["acquireTime"] = json!(now);
    }
    let patch = json!({"metadata": {"resourceVersion": rv}, "spec": spec_patch});
    match api
        .patch(&cfg.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(l) => {
            *observed = l.metadata.resource_version.map(|rv| (rv, Instant::now()));
            Ok(Round::Leading)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Round::Following),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn config(identity: &str) -> LeaseConfig {
        LeaseConfig {
            namespace: "default".into(),
            name: "unisched".into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(3),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(250),
        }
    }

    async fn lease_api() -> (unisched_sim::RunningServer, Api<Lease>) {
        let server = unisched_sim::ApiServer::builder()
            .build()
            .serve("127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let client = Client::try_from(kube::Config::new(server.url().parse().unwrap())).unwrap();
        (server, Api::namespaced(client, "default"))
    }

    /// The stored lease's holder and resourceVersion.
    async fn holder_and_version(api: &Api<Lease>) -> (String, String) {
        let lease = api.get("unisched").await.unwrap();
        let holder = lease.spec.and_then(|s| s.holder_identity).unwrap_or_default();
        (holder, lease.metadata.resource_version.unwrap())
    }

    /// Table: what one round does with a lease we hold, by where our fence stands when the read
    /// comes back. Past it the round must not write, since the record it read may be stale.
    #[tokio::test]
    async fn a_leaders_round_writes_only_while_its_fence_is_open() {
        let cases = [
            ("no fence (not leading yet)", None, Round::Leading, true),
            ("fence open", Some(Duration::from_secs(60)), Round::Leading, true),
            ("fence closed", Some(Duration::ZERO), Round::Expired, false),
        ];
        for (name, fence_left, want, writes) in cases {
            let (_server, api) = lease_api().await;
            let cfg = config("me");
            let mut observed = None;
            // The first round creates the lease: we hold it.
            let first = try_acquire_or_renew(&api, &cfg, &mut observed, None)
                .await
                .unwrap();
            assert_eq!(first, Round::Leading, "{name}");
            let before = holder_and_version(&api).await;
            let write_by = fence_left.map(|d| Instant::now() + d);
            let round = try_acquire_or_renew(&api, &cfg, &mut observed, write_by)
                .await
                .unwrap();
            assert_eq!(round, want, "{name}");
            let after = holder_and_version(&api).await;
            assert_eq!(after.0, "me", "{name}");
            assert_eq!(
                after.1 != before.1,
                writes,
                "{name}: renewed {before:?} -> {after:?}"
            );
        }
    }

    /// A missing lease is not created by a leader whose fence closed either.
    #[tokio::test]
    async fn a_leader_past_its_fence_does_not_recreate_a_deleted_lease() {
        let (_server, api) = lease_api().await;
        let cfg = config("me");
        let mut observed = None;
        let round = try_acquire_or_renew(&api, &cfg, &mut observed, Some(Instant::now()))
            .await
            .unwrap();
        assert_eq!(round, Round::Expired);
        assert!(api.get_opt("unisched").await.unwrap().is_none());
    }

    /// A lease another replica holds is left alone, fence or not.
    #[tokio::test]
    async fn a_lease_held_by_another_is_followed_without_a_write() {
        let (_server, api) = lease_api().await;
        let mut observed = None;
        try_acquire_or_renew(&api, &config("other"), &mut observed, None)
            .await
            .unwrap();
        let before = holder_and_version(&api).await;
        for write_by in [None, Some(Instant::now() + Duration::from_secs(60))] {
            let mut mine = None;
            let round = try_acquire_or_renew(&api, &config("me"), &mut mine, write_by)
                .await
                .unwrap();
            assert_eq!(round, Round::Following);
        }
        assert_eq!(holder_and_version(&api).await, before);
    }
}
