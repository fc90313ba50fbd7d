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

/// Runs the election until leadership is lost. Returns when the lease was lost (the caller must
/// exit) — never while leading.
pub async fn run_leader_election(client: Client, cfg: LeaseConfig, flag: LeaderFlag, metrics: Metrics) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut observed: Option<(String, Instant)> = None; // (resourceVersion, when first seen)
    let mut leading = false;
    let mut last_renew = Instant::now();
    loop {
        match try_acquire_or_renew(&api, &cfg, &mut observed).await {
            Ok(Round::Leading) => {
                if !leading {
                    tracing::info!(lease = %cfg.name, identity = %cfg.identity, "acquired leader lease");
                }
                leading = true;
                last_renew = Instant::now();
                flag.set(true);
                metrics.leader.set(1);
            }
            Ok(Round::Following) => {
                if leading {
                    flag.set(false);
                    metrics.leader.set(0);
                    tracing::error!(lease = %cfg.name, "leader lease taken by another replica");
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "leader election round failed");
                if leading && last_renew.elapsed() >= cfg.renew_deadline {
                    flag.set(false);
                    metrics.leader.set(0);
                    tracing::error!(lease = %cfg.name, "failed to renew the leader lease within renewDeadline");
                    return;
                }
            }
        }
        tokio::time::sleep(cfg.retry_period).await;
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
