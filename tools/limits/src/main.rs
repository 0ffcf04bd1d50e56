//! The tidemark-limits binary: parse flags, bind, serve until Ctrl-C/SIGTERM.

use std::sync::Arc;

use anyhow::Context as _;
use clap::Parser as _;
use tidemark_limits::{Config, Proxy, serve};

// glibc malloc took about 60% of the proxy's CPU in sink mode (most of it
// in `_int_malloc` and `malloc_consolidate` as the recorded key set grew),
// and on a 2-core machine that CPU is taken from the client being
// measured; mimalloc is already in the tree for the worker.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let cfg = Config::parse();
    cfg.validate().map_err(anyhow::Error::msg)?;
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| {
            format!(
                "cannot listen on {} (set --listen / TIDEMARK_LIMITS_LISTEN)",
                cfg.listen
            )
        })?;
    tracing::info!(
        listen = %cfg.listen, dynamodb = %cfg.dynamodb, kinesis = %cfg.kinesis, sqs = %cfg.sqs, sink = cfg.sink,
        "tidemark-limits ready"
    );
    let proxy = Arc::new(Proxy::new(cfg)?);
    serve(listener, proxy, shutdown_signal()).await?;
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
