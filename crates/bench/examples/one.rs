#![allow(clippy::unwrap_used, clippy::expect_used)]
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).cloned().unwrap_or("SchedulingBasic/500Nodes".into());
    let mode: unisched_bench::Mode = args.get(2).map_or("full", |s| s.as_str()).parse().unwrap();
    let smoke = args.get(3).is_some_and(|s| s == "smoke");
    let c = unisched_bench::Catalog::embedded().unwrap();
    let w = c.workload(&name, smoke).unwrap();
    let opts = unisched_bench::RunOptions {
        progress: true,
        ..Default::default()
    };
    let r = unisched_bench::run(&w, mode, &opts).unwrap();
    println!("{}", serde_json::to_string_pretty(&r).unwrap());
}
