//! The `unisched-bench` binary: scheduler_perf-style workloads (`e2e/perf/`) on the embedded
//! control plane, or with `--external` on real control planes, upstream kube-scheduler and
//! `unisched run` side by side.
//!
//! A binary of its own, not a subcommand of `unisched`, so the harness that starts control planes
//! and reaps processes (`unisched-bench`, the library) is not linked into the scheduler. It logs
//! as `unisched` does (`--v`, `--logging-format`) and allocates with the same allocator, so what
//! it measures in process is what the scheduler would do.
#![forbid(unsafe_code)]

mod bench;

use clap::Parser;

/// jemalloc, as in the `unisched` binary: the embedded runs (`--mode full`, `--in-process`) run
/// the scheduler in this process, and must allocate as the scheduler does (see
/// cmd/unisched/src/main.rs for why the scheduler uses it).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Benchmarks of unisched: scheduler_perf-style workloads on the embedded control plane, or
/// upstream kube-scheduler and `unisched run` on real control planes (`--external`).
#[derive(Parser, Debug)]
#[command(name = "unisched-bench", version, about)]
struct Cli {
    /// Log verbosity, klog style (0-10): 4 is debug, 5 and above trace.
    #[arg(short = 'v', long = "v", default_value_t = 2, env = "UNISCHED_V")]
    verbosity: u8,
    /// Log format: text or json.
    #[arg(long = "logging-format", default_value = "text")]
    logging_format: String,
    #[command(flatten)]
    bench: bench::BenchArgs,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    unisched_logging::init(cli.verbosity, &cli.logging_format);
    // No async runtime here: every run starts the runtimes it needs.
    unisched_logging::exit_code(bench::bench(cli.bench, cli.verbosity))
}
