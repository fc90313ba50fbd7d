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

use crate::{LeaderFlag, Metrics};

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
        let sent = Instant::now();
        match try_acquire_or_renew(&api, &cfg, &mut observed).await {
            Ok(Round::Leading) => {
                if !leading {
                    tracing::info!(lease = %cfg.name, identity = %cfg.identity, "acquired leader lease");
                }
                leading = true;
                last_renew = sent;
                flag.renewed(sent, cfg.renew_deadline);
                metrics.leader.set(1);
            }
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
                if leading && last_renew.elapsed() >= cfg.renew_deadline {
                    flag.set(false);
                    metrics.leader.set(0);
                    tracing::error!(lease = %cfg.name, "failed to renew the leader lease within renewDeadline");
                    return ElectionEnd::Lost;
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(cfg.retry_period) => {}
            _ = stop.changed() => {}
        }
    }
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

async fn try_acquire_or_renew(
    api: &Api<Lease>,
    cfg: &LeaseConfig,
    observed: &mut Option<(String, Instant)>,
) -> Result<Round, kube::Error> {
    let now = MicroTime(Timestamp::now());
    let duration_secs = i32::try_from(cfg.lease_duration.as_secs())
        .unwrap_or(i32::MAX)
        .max(1);
    let Some(lease) = api.get_opt(&cfg.name).await? else {
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
