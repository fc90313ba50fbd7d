//! Progress lines for the user while a scenario runs (stderr; the report goes to stdout).

use std::io::Write;

use unisched_sim::scenario;

/// A progress line for the user: plain `[sim] …` text, or under `--logging-format json` one
/// record of the log stream (target `unisched::sim`, shown at every verbosity) so that stderr
/// stays one JSON object per line.
pub fn progress(msg: &str) {
    if unisched_logging::json_enabled() {
        tracing::info!(target: "unisched::sim", "{msg}");
        return;
    }
    let mut e = std::io::stderr();
    let _ = writeln!(e, "[sim] {msg}");
}

/// The line that opens step `i` of `n`.
pub(crate) fn step_banner(i: usize, n: usize, step: &scenario::Step) {
    progress(&format!(
        "step {}/{n} {:?}: {} to create, {} to delete",
        i + 1,
        step.name,
        step.apply.len(),
        step.delete.len()
    ));
}
