//! `tidemark healthcheck`: exit 0 when the local worker's /healthz answers.

use std::time::Duration;

use anyhow::Result;

/// Arguments of `healthcheck`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The worker's telemetry address.
    #[arg(
        long,
        default_value = "127.0.0.1:9102",
        env = "TIDEMARK_HEALTHCHECK_ADDR"
    )]
    addr: std::net::SocketAddr,
    /// Path to check (/healthz: alive; /readyz: ready).
    #[arg(long, default_value = "/healthz")]
    path: String,
}

pub(crate) async fn run(args: &Args) -> Result<()> {
    crate::run::telemetry::check(args.addr, &args.path, Duration::from_secs(3))
        .await
        .map_err(anyhow::Error::msg)
}
