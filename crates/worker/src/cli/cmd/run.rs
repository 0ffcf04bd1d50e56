//! `tidemark run`: the worker until SIGTERM/SIGINT.

use crate::Worker;
use crate::config::Config;
use anyhow::Result;
use tracing::{error, warn};

/// Builds the worker and runs it until the first SIGTERM/SIGINT; a second
/// signal exits at once.
/// A signal during start-up (connecting to AWS, checking tables) stops it
/// at once, status 0: nothing was read yet, so nothing is left to drain.
pub(crate) async fn run(config: &Config) -> Result<()> {
    let starting = async {
        let sdk = super::sdk().await?;
        anyhow::Ok(Worker::build(config, &sdk).await?)
    };
    let worker = tokio::select! {
        built = starting => built?,
        () = first_signal() => {
            warn!("shutdown requested during start-up: stopping");
            return Ok(());
        }
    };
    // Started once the source's own start is done: until then the
    // start-up lines and deadline (`--give-up-after`) hold.
    let mut running = worker.source_running();
    tokio::spawn(async move {
        if running.wait_for(|r| *r).await.is_ok() {
            super::set_started();
        }
    });
    worker.run(signals()).await?;
    Ok(())
}

/// Completes at the first SIGTERM/SIGINT (never, when SIGTERM cannot be
/// watched: `signals` says so once the worker runs).
async fn first_signal() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => std::future::pending().await,
    }
}

/// Completes at the first SIGTERM/SIGINT, and keeps watching: a second one
/// exits the process at once.
async fn signals() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            // No graceful stop then; the run goes on until killed.
            error!(error = %e, "cannot watch SIGTERM");
            return std::future::pending().await;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    warn!("shutdown requested: finishing in-flight records (signal again to exit at once)");
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        warn!("second signal: exiting now");
        std::process::exit(130);
    });
}
