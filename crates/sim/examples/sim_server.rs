//! Runs the simulated API server until Ctrl-C and writes a kubeconfig for it.
//!
//! `cargo run -p unisched-sim --example sim_server -- [PORT] [KUBECONFIG_PATH]`
//! then `kubectl --kubeconfig KUBECONFIG_PATH get pods -A`.

use std::net::SocketAddr;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let port: u16 = args.next().map(|p| p.parse()).transpose()?.unwrap_or(0);
    let path = args.next().unwrap_or_else(|| "unisched-sim.kubeconfig".into());
    let server = unisched_sim::ApiServer::builder().build();
    let running = server.serve(SocketAddr::from(([127, 0, 0, 1], port))).await?;
    std::fs::write(&path, running.kubeconfig())?;
    println!("listening on {} (kubeconfig: {path})", running.url());
    tokio::signal::ctrl_c().await?;
    running.shutdown().await;
    Ok(())
}
