//! The worker fleet: `tidemark run` child processes, one per slot, each
//! incarnation with its own worker id and JSON log file. Kill -9 a slot and
//! it is restarted at once as a new incarnation.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use chrono::{DateTime, Utc};

/// How an incarnation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ending {
    /// Killed with SIGKILL by the orchestrator.
    Killed,
    /// Exited on its own while it should have been running.
    Crashed(String),
    /// Stopped with SIGTERM at the end, with this exit status.
    Stopped(String),
}

/// One process's life.
#[derive(Debug, Clone)]
pub(crate) struct Incarnation {
    /// Its worker id.
    pub(crate) id: String,
    /// Its log file (JSON lines on stderr).
    pub(crate) log: PathBuf,
    /// When it was started.
    pub(crate) started: DateTime<Utc>,
    /// When it ended, and how.
    pub(crate) ended: Option<(DateTime<Utc>, Ending)>,
}

/// What every worker gets.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    /// The `tidemark` binary.
    pub(crate) tidemark: PathBuf,
    /// The generated config file.
    pub(crate) config: PathBuf,
    /// Where the log files go.
    pub(crate) dir: PathBuf,
    /// Endpoint URL (the limits proxy) for Kinesis, DynamoDB and SQS.
    pub(crate) endpoint: String,
    /// Region.
    pub(crate) region: String,
    /// More environment for every worker (the late scenario's faked clock).
    pub(crate) env: Vec<(String, String)>,
}

/// The running slots and every incarnation so far.
#[derive(Debug)]
pub(crate) struct Fleet {
    launch: Launch,
    running: Vec<(Child, usize)>,
    /// Every incarnation, in start order.
    pub(crate) history: Vec<Incarnation>,
    /// SIGKILLs sent.
    pub(crate) kills: u64,
}

impl Fleet {
    /// Starts `n` workers.
    pub(crate) fn start(launch: Launch, n: usize) -> Result<Fleet> {
        let mut fleet = Fleet {
            launch,
            running: Vec::new(),
            history: Vec::new(),
            kills: 0,
        };
        for slot in 0..n {
            let child = fleet.spawn(slot)?;
            fleet.running.push(child);
        }
        Ok(fleet)
    }

    /// Starts one more worker, in a new slot.
    pub(crate) fn add(&mut self) -> Result<()> {
        let child = self.spawn(self.running.len())?;
        self.running.push(child);
        Ok(())
    }

    fn spawn(&mut self, slot: usize) -> Result<(Child, usize)> {
        let n = self.history.len();
        let id = format!("w{slot}-{n:03}");
        let log = self.launch.dir.join(format!("{id}.log"));
        let file = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let l = &self.launch;
        let child = Command::new(&l.tidemark)
            .arg("run")
            .arg("--config")
            .arg(&l.config)
            .env("TIDEMARK__SOURCE__WORKER_ID", &id)
            .env("AWS_ENDPOINT_URL_KINESIS", &l.endpoint)
            .env("AWS_ENDPOINT_URL_DYNAMODB", &l.endpoint)
            .env("AWS_ENDPOINT_URL_SQS", &l.endpoint)
            .env("AWS_REGION", &l.region)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            // The config's log level, not the caller's.
            .env_remove("RUST_LOG")
            .env_remove("RUST_BACKTRACE")
            .envs(l.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .with_context(|| format!("starting {}", l.tidemark.display()))?;
        self.history.push(Incarnation {
            id,
            log,
            started: Utc::now(),
            ended: None,
        });
        Ok((child, n))
    }

    /// Kill -9 the worker in `slot` and leave the slot empty; returns its id.
    pub(crate) fn kill(&mut self, slot: usize) -> Result<String> {
        if slot >= self.running.len() {
            anyhow::bail!("no worker slot {slot}");
        }
        let (mut child, n) = self.running.remove(slot);
        child.kill().context("SIGKILL")?;
        let _ = child.wait();
        self.kills += 1;
        self.history[n].ended = Some((Utc::now(), Ending::Killed));
        Ok(self.history[n].id.clone())
    }

    /// Kill -9 the worker in `slot` and start a new incarnation there.
    pub(crate) fn kill_and_restart(&mut self, slot: usize) -> Result<String> {
        let Some((child, n)) = self.running.get_mut(slot) else {
            anyhow::bail!("no worker slot {slot}");
        };
        // Child::kill sends SIGKILL: no shutdown code runs, like a crash.
        child.kill().context("SIGKILL")?;
        let _ = child.wait();
        let n = *n;
        self.kills += 1;
        self.history[n].ended = Some((Utc::now(), Ending::Killed));
        let killed = self.history[n].id.clone();
        self.running[slot] = self.spawn(slot)?;
        Ok(killed)
    }

    /// Workers that exited on their own since the last call are recorded as
    /// crashed and restarted; returns their ids.
    pub(crate) fn reap_crashed(&mut self) -> Result<Vec<String>> {
        let mut crashed = Vec::new();
        for slot in 0..self.running.len() {
            let (child, n) = &mut self.running[slot];
            if let Some(status) = child.try_wait().context("checking a worker")? {
                let n = *n;
                self.history[n].ended = Some((Utc::now(), Ending::Crashed(status.to_string())));
                crashed.push(self.history[n].id.clone());
                self.running[slot] = self.spawn(slot)?;
            }
        }
        Ok(crashed)
    }

    /// The process id of the worker in `slot`.
    pub(crate) fn pid(&self, slot: usize) -> Option<u32> {
        self.running.get(slot).map(|(c, _)| c.id())
    }

    /// The exit status of the worker in `slot` if it exited (recorded as
    /// crashed, not restarted: for scenarios where exiting is the point).
    pub(crate) fn exited(&mut self, slot: usize) -> Result<Option<ExitStatus>> {
        let Some((child, n)) = self.running.get_mut(slot) else {
            return Ok(None);
        };
        let Some(status) = child.try_wait().context("checking a worker")? else {
            return Ok(None);
        };
        let n = *n;
        self.history[n].ended = Some((Utc::now(), Ending::Crashed(status.to_string())));
        self.running.remove(slot);
        Ok(Some(status))
    }

    /// Number of slots.
    pub(crate) fn slots(&self) -> usize {
        self.running.len()
    }

    /// SIGTERM to every worker (graceful: drain, checkpoint, release), then
    /// waits for them; a worker still running after `grace` is killed.
    /// Returns the ids of workers that did not exit cleanly.
    pub(crate) async fn stop_all(&mut self, grace: Duration) -> Result<Vec<String>> {
        for (child, _) in &self.running {
            let status = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status()
                .context("running kill -TERM")?;
            if !status.success() {
                anyhow::bail!("kill -TERM {} failed: {status}", child.id());
            }
        }
        let deadline = Instant::now() + grace;
        let mut unclean = Vec::new();
        for (child, n) in &mut self.running {
            let status: ExitStatus = loop {
                if let Some(s) = child.try_wait().context("waiting for a worker")? {
                    break s;
                }
                if Instant::now() >= deadline {
                    let _ = child.kill();
                    break child.wait().context("waiting for a killed worker")?;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            let inc = &mut self.history[*n];
            if !status.success() {
                unclean.push(format!("{} ({status})", inc.id));
            }
            inc.ended = Some((Utc::now(), Ending::Stopped(status.to_string())));
        }
        self.running.clear();
        Ok(unclean)
    }

    /// Kills whatever still runs (error paths).
    pub(crate) fn kill_all(&mut self) {
        for (child, _) in &mut self.running {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.running.clear();
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        // Never leave workers behind, whatever path the run took.
        self.kill_all();
    }
}
