//! `unisched run`: the scheduler for a real cluster.

use std::{net::SocketAddr, path::PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use kube::{Config, config::KubeConfigOptions, config::Kubeconfig};
use unisched_features::FeatureGates;
use unisched_runtime::{RuntimeError, Scheduler, SchedulerOptions};
use unisched_serving::SecureServingOptions;

/// Flags of `unisched run` (kube-scheduler names where they exist).
#[derive(Args, Debug)]
pub struct RunArgs {
    /// Path to a `KubeSchedulerConfiguration` (kubescheduler.config.k8s.io/v1).
    #[arg(long, env = "UNISCHED_CONFIG")]
    pub config: Option<PathBuf>,
    /// Path to a kubeconfig; overrides `clientConnection.kubeconfig`. Default: in-cluster, then ~/.kube/config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Override `leaderElection.leaderElect`.
    #[arg(long = "leader-elect")]
    pub leader_elect: Option<bool>,
    /// Override `leaderElection.resourceNamespace` (default: the pod's namespace).
    #[arg(long = "leader-elect-resource-namespace")]
    pub lease_namespace: Option<String>,
    /// Override `clientConnection.qps` (negative: unlimited).
    #[arg(long = "kube-api-qps")]
    pub qps: Option<f32>,
    /// Override `clientConnection.burst`.
    #[arg(long = "kube-api-burst")]
    pub burst: Option<i32>,
    /// Also serve /metrics, /healthz, /livez, /readyz and /configz in plain HTTP, without
    /// authentication, on this address (for local tools and tests; off by default: the
    /// endpoints are served over HTTPS on --secure-port).
    #[arg(long = "metrics-bind-address")]
    pub metrics_bind_address: Option<SocketAddr>,
    /// HTTPS with delegated authentication and authorization (kube-scheduler's flags); boxed
    /// because it is large next to the other subcommands' arguments.
    #[command(flatten)]
    pub secure_serving: Box<SecureServingOptions>,
    /// Feature gates, `Name=true,Other=false`, with kube-scheduler 1.37.2's names, defaults and
    /// checks. A gate the scheduler reads may only be set to a value unisched implements.
    #[arg(long = "feature-gates", default_value = "")]
    pub feature_gates: String,
    /// Seed for tie-breaks among equally scored nodes (default: random).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Threads of the async runtime that carries the API traffic: watches, status writes, events,
    /// leader election, the metrics server. (Filter and Score run on their own pool, binding
    /// cycles on binding threads that write on connections of their own.) One spends about a
    /// millisecond per DRA pod, several times less than the kube-apiserver that commits the pod's
    /// writes; a second one made the scheduler spend ~10 % more CPU per pod, in thread wake-ups,
    /// at the same throughput (docs/perf-history.md, ninth round).
    #[arg(long = "io-threads", default_value_t = 1)]
    pub io_threads: usize,
}

/// This replica's identity: hostname plus a random suffix, like kube-scheduler.
pub fn identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unisched".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{host}_{:x}{:x}", std::process::id(), nanos & 0xffff_ffff)
}

fn own_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .or_else(|| std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace").ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "default".into())
}

/// The client configuration from an explicit kubeconfig or by inference.
pub async fn client_config(kubeconfig: Option<&PathBuf>) -> Result<Config> {
    let config = match kubeconfig {
        Some(p) => {
            let kc =
                Kubeconfig::read_from(p).with_context(|| format!("reading kubeconfig {}", p.display()))?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .context("loading kubeconfig")?
        }
        None => Config::infer()
            .await
            .context("no kubeconfig given and none could be inferred")?,
    };
    Ok(config)
}

/// Runs until the lease is lost (exit 1) or SIGTERM/SIGINT (graceful stop, exit 0).
pub async fn run(args: RunArgs) -> Result<u8> {
    // Flags first, as upstream: a bad gate stops the process before anything else.
    let feature_gates = FeatureGates::parse(&args.feature_gates).map_err(|e| {
        anyhow::anyhow!(
            "invalid argument {:?} for \"--feature-gates\" flag: {e}",
            args.feature_gates
        )
    })?;
    let gaps: Vec<String> = feature_gates
        .gaps()
        .iter()
        .map(|(gate, _)| gate.to_string())
        .collect();
    if !gaps.is_empty() {
        tracing::info!(
            gates = gaps.join(","),
            "feature gates on by default upstream whose behaviour unisched does not implement yet"
        );
    }
    let mut config = unisched_simctl::scheduler_config::load(args.config.as_ref())?;
    if let Some(v) = args.leader_elect {
        config.leader_election.leader_elect = v;
    }
    if let Some(ns) = args.lease_namespace {
        config.leader_election.resource_namespace = ns;
    }
    if let Some(q) = args.qps {
        config.client_connection.qps = q;
    }
    if let Some(b) = args.burst {
        config.client_connection.burst = b;
    }
    config.validate().context("invalid configuration after flags")?;
    let kubeconfig = args.kubeconfig.clone().or_else(|| {
        let k = &config.client_connection.kubeconfig;
        (!k.is_empty()).then(|| PathBuf::from(k))
    });
    let client_config = client_config(kubeconfig.as_ref()).await?;
    let client =
        unisched_runtime::instrumented_client(client_config.clone()).context("building the API client")?;
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let options = SchedulerOptions {
        config,
        seed,
        identity: identity(),
        health_addr: args.metrics_bind_address,
        default_namespace: own_namespace(),
        // Binding cycles send their writes on connections of their own (see `SyncWriter`).
        binding_connections: Some(client_config),
        feature_gates,
    };
    let scheduler = Scheduler::new(client.clone(), options).await?;
    if let Some(addr) = scheduler.health_addr {
        tracing::info!(%addr, "serving /metrics, /healthz, /readyz, /configz in plain HTTP");
    }
    // Dropped (and so stopped) when `run` returns.
    let _secure = match args
        .secure_serving
        .builder()
        .default_client(client)
        .bind(scheduler.router())
        .await
        .context("starting secure serving")?
    {
        Some(server) => {
            let addr = server.local_addr().context("secure serving address")?;
            tracing::info!(%addr, "serving /metrics, /healthz, /readyz, /configz over HTTPS");
            Some(AbortOnDrop(server.spawn()))
        }
        None => None,
    };
    // SIGTERM (what the kubelet sends on every rollout) and SIGINT stop the scheduler in order:
    // no new pod, in-flight bindings finish within the grace period, the lease is released.
    let run = scheduler.run();
    tokio::pin!(run);
    let result = tokio::select! {
        r = &mut run => r,
        signal = shutdown_signal() => {
            tracing::info!(signal, "received signal; shutting down gracefully");
            scheduler.stop();
            run.await
        }
    };
    match result {
        Ok(()) => {
            tracing::info!("scheduler stopped");
            Ok(0)
        }
        Err(RuntimeError::LeaseLost) => {
            tracing::error!("leaderelection lost");
            Ok(1)
        }
        Err(e) => Err(e.into()),
    }
}

/// Stops a spawned task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Resolves with the name of the first of SIGTERM or SIGINT to arrive.
async fn shutdown_signal() -> &'static str {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = tokio::signal::ctrl_c() => "SIGINT",
            },
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops gracefully");
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        "SIGINT"
    }
}
