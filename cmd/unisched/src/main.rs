//! The unisched binary: `run` (in a cluster), `sim` (the embedded control plane), `version`.
//!
//! Thin on purpose: parsing flags, setting up logging and calling into the runtime
//! (`unisched-runtime`) and the simulator's front end (`unisched-simctl`). The benchmark is a
//! binary of its own (`unisched-bench`), so the harness that starts control planes and reaps
//! processes is not linked into the scheduler. Flags keep kube-scheduler's names where they exist.
#![forbid(unsafe_code)]

mod run;

use clap::{Parser, Subcommand};

/// jemalloc instead of the C library's allocator. The scheduler allocates and frees many small
/// objects across threads (decoded watch events, per-attempt state, request bodies), where glibc's
/// malloc spent ~17 % of the real-control-plane profile (its free-list consolidation included).
/// Measured in back-to-back runs (docs/perf-history.md, eighth round): 8–29 % less scheduler CPU
/// per pod, ~40 MiB more peak RSS at SchedulingAtScale (still under the 1 GiB target).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// A Kubernetes scheduler with one ledger for node resources and devices.
#[derive(Parser, Debug)]
#[command(name = "unisched", version, about)]
struct Cli {
    /// Log verbosity, klog style (0-10): 4 is debug, 5 and above trace.
    #[arg(
        short = 'v',
        long = "v",
        global = true,
        default_value_t = 2,
        env = "UNISCHED_V"
    )]
    verbosity: u8,
    /// Log format: text or json.
    #[arg(long = "logging-format", global = true, default_value = "text")]
    logging_format: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the scheduler against a cluster (or a `unisched sim --serve` control plane).
    Run(run::RunArgs),
    /// Run a scenario on the embedded control plane and print a report.
    Sim(unisched_simctl::SimArgs),
    /// Print the version.
    Version,
}

/// The async runtime: `run` sizes it with `--io-threads`; the other commands (whose embedded API
/// server shares it) get one thread per core.
fn async_runtime(command: &Command) -> std::io::Result<tokio::runtime::Runtime> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Command::Run(args) = command {
        runtime.worker_threads(args.io_threads.max(1));
    }
    runtime.enable_all().thread_name("unisched-io").build()
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    unisched_logging::init(cli.verbosity, &cli.logging_format);
    let rt = match async_runtime(&cli.command) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let result = match cli.command {
        Command::Version => {
            println!("unisched {}", env!("CARGO_PKG_VERSION"));
            Ok(0)
        }
        Command::Run(args) => rt.block_on(run::run(args)),
        Command::Sim(args) => rt
            .block_on(unisched_simctl::sim(args))
            .map_err(anyhow::Error::from),
    };
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    unisched_logging::exit_code(result)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn workers(args: &[&str]) -> usize {
        let cli = Cli::try_parse_from(args).unwrap();
        async_runtime(&cli.command).unwrap().metrics().num_workers()
    }

    #[test]
    fn io_threads_size_the_run_runtime_only() {
        assert_eq!(workers(&["unisched", "run"]), 1);
        assert_eq!(workers(&["unisched", "run", "--io-threads", "3"]), 3);
        assert_eq!(workers(&["unisched", "run", "--io-threads", "0"]), 1);
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        assert_eq!(workers(&["unisched", "sim", "examples/quickstart"]), cores);
    }
}
