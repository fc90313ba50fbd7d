//! `unisched-bench`: runs scheduler_perf-style workloads (`e2e/perf/`) against the embedded control
//! plane and prints throughput, latency, writes, CPU and memory next to the harness limit.
//!
//! Each (workload, mode) runs in a fresh child process (`--internal-child`), so peak RSS and CPU
//! are that run's own; `--in-process` runs everything in this process instead (RSS is then the
//! process-wide peak so far).
//!
//! `--external` runs the workloads on real control planes instead (`e2e/upstream/control-plane`,
//! a fresh one per scheduler), decided by upstream kube-scheduler and then by `unisched run`, both
//! child processes, and prints both side by side (see `unisched_bench::external`). `unisched run`
//! is the `unisched` binary next to this one unless `--unisched-bin` names another.

use std::{
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use unisched_bench::{BenchReport, Catalog, Machine, Mode, RunOptions, RunReport};
use unisched_framework::config::KubeSchedulerConfiguration;

/// Output format.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum Output {
    /// Readable tables.
    Table,
    /// One JSON document.
    Json,
}

/// Which modes to run.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ModeArg {
    /// The real runtime over HTTP, and the bind-only limit (the default: prints the ratio).
    Default,
    /// The real runtime over HTTP only.
    Full,
    /// The bind-only scheduler through the same API server and writer only.
    Limit,
    /// The scheduling core on in-memory inputs only (no HTTP).
    Engine,
    /// All three.
    All,
}

impl ModeArg {
    fn modes(self) -> Vec<Mode> {
        match self {
            ModeArg::Default => vec![Mode::Full, Mode::Limit],
            ModeArg::Full => vec![Mode::Full],
            ModeArg::Limit => vec![Mode::Limit],
            ModeArg::Engine => vec![Mode::Engine],
            ModeArg::All => vec![Mode::Full, Mode::Limit, Mode::Engine],
        }
    }
}

/// A scheduler of external mode.
#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum ContenderArg {
    /// Upstream kube-scheduler.
    Upstream,
    /// `unisched run`.
    Unisched,
    /// unisched on the embedded control plane (`--mode full` of this command), for the same table.
    Embedded,
}

/// Flags of `unisched-bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// A workload (`TestCase/workload`) or a test case (all its workloads); repeatable.
    #[arg(long = "workload", short = 'w')]
    pub workloads: Vec<String>,
    /// Every workload.
    #[arg(long)]
    pub all: bool,
    /// List the workloads and exit.
    #[arg(long)]
    pub list: bool,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// Also draw throughput over time to this SVG file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Tiny sizes (a few nodes and pods): checks the harness, measures nothing meaningful.
    #[arg(long)]
    pub smoke: bool,
    /// Which modes: default (full + limit, with the ratio), full, limit, engine, all.
    #[arg(long, value_enum, default_value_t = ModeArg::Default)]
    pub mode: ModeArg,
    /// Tie-break seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// A `KubeSchedulerConfiguration` for the scheduler under test.
    #[arg(long = "scheduler-config")]
    pub scheduler_config: Option<PathBuf>,
    /// Read workloads from this directory instead of the built-in copy of `e2e/perf/`.
    #[arg(long = "workloads-dir")]
    pub workloads_dir: Option<PathBuf>,
    /// Run every workload in this process (no child processes; peak RSS is process-wide).
    #[arg(long = "in-process")]
    pub in_process: bool,
    /// Run on real control planes: upstream kube-scheduler, then `unisched run`, each on a fresh
    /// control plane started with `--control-plane`, same workload, same creator QPS.
    #[arg(long)]
    pub external: bool,
    /// External mode: the control-plane script (start DIR / stop DIR).
    #[arg(long = "control-plane", default_value = "e2e/upstream/control-plane")]
    pub control_plane: PathBuf,
    /// External mode: the directory with upstream's kube-scheduler.
    #[arg(long = "upstream-bin", default_value = "e2e/upstream/bin")]
    pub upstream_bin: PathBuf,
    /// External mode: the program started as `PROGRAM --v=0 run ...` for the unisched contender
    /// (default: the `unisched` binary next to this one). Another build, or a wrapper script that
    /// runs one under a profiler.
    #[arg(long = "unisched-bin")]
    pub unisched_bin: Option<PathBuf>,
    /// External mode: which schedulers, in order (kube-scheduler is `upstream`; `embedded` adds
    /// unisched on the embedded control plane, the full mode, to the same table).
    #[arg(long, value_delimiter = ',', default_values = ["upstream", "unisched"])]
    pub schedulers: Vec<ContenderArg>,
    /// External mode: QPS (and burst) of the object creator, the same for every scheduler.
    #[arg(long = "creator-qps", default_value_t = 5000.0)]
    pub creator_qps: f64,
    /// External mode: client QPS (and burst) of the schedulers.
    #[arg(long = "scheduler-qps", default_value_t = 5000.0)]
    pub scheduler_qps: f64,
    /// External mode: control-plane directories (logs, audit log) go below this directory.
    #[arg(long = "work-dir", default_value = "/tmp/unisched-bench-external")]
    pub work_dir: PathBuf,
    /// Internal: run one workload in one mode and print its report as JSON.
    #[arg(long = "internal-child", hide = true)]
    pub internal_child: bool,
}

fn catalog(args: &BenchArgs) -> Result<Catalog> {
    Ok(match &args.workloads_dir {
        Some(d) => Catalog::load_dir(d)?,
        None => Catalog::embedded()?,
    })
}

/// Reads `--scheduler-config` (the same file `unisched run --config` reads).
fn load_config(path: &Path) -> Result<KubeSchedulerConfiguration> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let config = KubeSchedulerConfiguration::from_yaml(&text)
        .with_context(|| format!("invalid configuration {}", path.display()))?;
    unisched_plugins::validate_plugin_args(&config)
        .with_context(|| format!("invalid configuration {}", path.display()))?;
    Ok(config)
}

fn options(args: &BenchArgs, progress: bool) -> Result<RunOptions> {
    let config = match &args.scheduler_config {
        Some(p) => Some(load_config(p)?),
        None => None,
    };
    Ok(RunOptions {
        seed: args.seed,
        progress,
        config,
    })
}

/// Runs one (workload, mode) in a child process and reads its report.
fn run_child(args: &BenchArgs, verbosity: u8, workload: &str, mode: Mode) -> Result<RunReport> {
    let exe = std::env::current_exe().context("locating the unisched-bench binary")?;
    let mut cmd = Command::new(exe);
    cmd.arg(format!("--v={verbosity}"))
        .args(["--internal-child", "--output", "json", "--workload", workload])
        .args(["--mode", mode.as_str(), "--seed", &args.seed.to_string()]);
    if args.smoke {
        cmd.arg("--smoke");
    }
    if let Some(p) = &args.scheduler_config {
        cmd.arg("--scheduler-config").arg(p);
    }
    if let Some(d) = &args.workloads_dir {
        cmd.arg("--workloads-dir").arg(d);
    }
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .context("starting a benchmark child process")?;
    if !out.status.success() {
        bail!("{workload} [{}] failed ({})", mode.as_str(), out.status);
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("reading the report of {workload}"))
}

/// Runs the command; returns the exit code.
pub fn bench(args: BenchArgs, verbosity: u8) -> Result<u8> {
    let catalog = catalog(&args)?;
    if args.list {
        for name in catalog.names() {
            let w = catalog.workload(&name, false)?;
            let threshold = w
                .upstream
                .as_ref()
                .and_then(|u| u.threshold)
                .map_or(String::new(), |t| format!("  (upstream threshold {t:.0} pods/s)"));
            println!(
                "{name}: {} nodes, {} measured pods{threshold}",
                w.nodes(),
                w.measured_pods()
            );
        }
        return Ok(0);
    }
    let names: Vec<String> = if args.all {
        catalog.names()
    } else {
        let mut names = Vec::new();
        for sel in &args.workloads {
            let found = catalog.select(sel);
            if found.is_empty() {
                bail!("no workload or test case named {sel:?} (see `unisched-bench --list`)");
            }
            for n in found {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
        names
    };
    if names.is_empty() {
        bail!("name workloads with --workload NAME, or use --all (see --list)");
    }
    if args.external {
        return external(&args, verbosity, &catalog, &names);
    }
    let modes = args.mode.modes();
    if args.internal_child {
        if names.len() != 1 || modes.len() != 1 {
            bail!("--internal-child runs exactly one workload in one mode");
        }
        let w = catalog.workload(&names[0], args.smoke)?;
        let report = unisched_bench::run(&w, modes[0], &options(&args, true)?)?;
        println!("{}", serde_json::to_string(&report)?);
        return Ok(0);
    }
    let opts = options(&args, true)?;
    let mut runs = Vec::new();
    let mut failed = false;
    for name in &names {
        for &mode in &modes {
            let result = if args.in_process {
                catalog
                    .workload(name, args.smoke)
                    .map_err(anyhow::Error::from)
                    .and_then(|w| unisched_bench::run(&w, mode, &opts).map_err(anyhow::Error::from))
            } else {
                run_child(&args, verbosity, name, mode)
            };
            match result {
                Ok(r) => runs.push(r),
                Err(e) => {
                    failed = true;
                    let _ = writeln!(std::io::stderr(), "error: {e:#}");
                    runs.push(RunReport {
                        workload: name.clone(),
                        mode,
                        smoke: args.smoke,
                        skipped: Some(format!("failed: {e:#}")),
                        ..RunReport::default()
                    });
                }
            }
        }
    }
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let report = BenchReport::new(Machine::detect(), unisched_bench::now_utc(), command, runs);
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Table => print!("{}", report.to_table()),
    }
    if let Some(path) = &args.plot {
        std::fs::write(path, unisched_bench::svg::render(&report.runs))
            .with_context(|| format!("writing {}", path.display()))?;
        let _ = writeln!(std::io::stderr(), "[bench] wrote {}", path.display());
    }
    Ok(u8::from(failed))
}

/// `--external`: every workload on fresh real control planes, each scheduler in turn.
fn external(args: &BenchArgs, verbosity: u8, catalog: &Catalog, names: &[String]) -> Result<u8> {
    // Control planes are daemons and schedulers are children: neither may outlive a Ctrl-C.
    unisched_bench::leftovers::stop_all_on_signals().context("installing signal handlers")?;
    let bench_bin = std::env::current_exe().context("locating the unisched-bench binary")?;
    let unisched_bin = match &args.unisched_bin {
        Some(path) => path.clone(),
        None => unisched_next_to(&bench_bin, &args.schedulers)?,
    };
    let opts = unisched_bench::ExternalOptions {
        control_plane: args.control_plane.clone(),
        upstream_bin: args.upstream_bin.clone(),
        unisched_bin,
        bench_bin,
        scheduler_config: args.scheduler_config.clone(),
        creator_qps: args.creator_qps,
        scheduler_qps: args.scheduler_qps,
        work_dir: args.work_dir.clone(),
        contenders: args
            .schedulers
            .iter()
            .map(|c| match c {
                ContenderArg::Upstream => unisched_bench::Contender::Upstream,
                ContenderArg::Unisched => unisched_bench::Contender::Unisched,
                ContenderArg::Embedded => unisched_bench::Contender::Embedded,
            })
            .collect(),
        workloads_dir: args.workloads_dir.clone(),
        verbosity,
        seed: args.seed,
        progress: true,
    };
    let mut runs = Vec::new();
    for name in names {
        let w = catalog.workload(name, args.smoke)?;
        runs.extend(unisched_bench::external::run_external(&w, &opts));
    }
    let failed = runs.iter().any(|r| r.skipped.is_some());
    let report = unisched_bench::ExternalReport {
        machine: Machine::detect(),
        date: unisched_bench::now_utc(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        creator_qps: args.creator_qps,
        scheduler_qps: args.scheduler_qps,
        isolation: "a fresh control plane per scheduler run".into(),
        runs,
    };
    match args.output {
        Output::Json => println!("{}", serde_json::to_string_pretty(&report)?),
        Output::Table => print!("{}", report.to_table()),
    }
    Ok(u8::from(failed))
}

/// The `unisched` binary in the directory of `bench_bin` (`target/release/unisched` beside
/// `target/release/unisched-bench`): the default `--unisched-bin`. When the unisched contender
/// runs and it is not there, the error says how to build it.
fn unisched_next_to(bench_bin: &Path, schedulers: &[ContenderArg]) -> Result<PathBuf> {
    let path = bench_bin.with_file_name("unisched");
    if schedulers.contains(&ContenderArg::Unisched) && !path.exists() {
        bail!(
            "no unisched binary at {} for `unisched run`: build it with this one \
             (cargo build --release --bin unisched --bin unisched-bench) or pass --unisched-bin",
            path.display()
        );
    }
    Ok(path)
}
