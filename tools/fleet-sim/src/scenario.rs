//! Scenario files (TOML, one per scenario, in `tools/fleet-sim/scenarios/`).

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

/// What happens at an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// `count` new workers start.
    Join,
    /// `count` workers die without releasing anything.
    Crash,
    /// Each of the first `count` workers is replaced, one every `every`:
    /// the replacement starts, then the old worker shuts down cleanly.
    Rolling,
    /// `count` shards split in two.
    Split,
    /// The first `count` live workers can no longer write to the
    /// coordinator table (leader mode: heartbeats and lock writes fail);
    /// they keep running, and the lease table stays reachable.
    Isolate,
}

/// One event of a scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// When it happens.
    #[serde(with = "humantime_serde")]
    pub at: Duration,
    /// What happens.
    pub kind: EventKind,
    /// How many workers or shards.
    pub count: usize,
    /// Rolling deploys: time between two replacements.
    #[serde(default, with = "humantime_serde")]
    pub every: Duration,
}

impl Event {
    /// When the event's last step happens.
    pub fn end(&self) -> Duration {
        match self.kind {
            EventKind::Rolling => self.at + self.every * (self.count.max(1) as u32 - 1),
            _ => self.at,
        }
    }
}

/// Faults of the lease table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableFaults {
    /// Latency added to every lease-table call.
    #[serde(default, with = "humantime_serde")]
    pub latency: Duration,
    /// Share of calls that fail (0..1).
    #[serde(default)]
    pub fail_rate: f64,
    /// Read units per second the table serves (per 1,000 shards: scaled with
    /// the scenario); more is throttled.
    pub rcu_limit: Option<f64>,
    /// Write units per second the table serves (per 1,000 shards).
    pub wcu_limit: Option<f64>,
}

/// One scenario.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name.
    pub name: String,
    /// What it shows.
    pub description: String,
    /// Shards at the start.
    pub shards: usize,
    /// Workers at the start.
    pub workers: usize,
    /// Simulated run time.
    #[serde(with = "humantime_serde")]
    pub duration: Duration,
    /// The initial workers start evenly spread over this.
    #[serde(default = "default_spread", with = "humantime_serde")]
    pub start_spread: Duration,
    /// Steady-state capacity is averaged over this window, just before the
    /// first event (or at the end without events).
    #[serde(default = "default_steady", with = "humantime_serde")]
    pub steady: Duration,
    /// The workers' `failover_time`.
    #[serde(default = "default_failover", with = "humantime_serde")]
    pub failover: Duration,
    /// The workers' `checkpoint_interval`.
    #[serde(default = "default_checkpoint", with = "humantime_serde")]
    pub checkpoint_interval: Duration,
    /// The workers' `idle_poll` (a longer poll than the default keeps the
    /// simulation cheap; it does not change lease traffic beyond checkpoints).
    #[serde(default = "default_idle_poll", with = "humantime_serde")]
    pub idle_poll: Duration,
    /// Records per second written to each shard.
    #[serde(default = "default_rate")]
    pub records_per_second: f64,
    /// Seed of the injected failures.
    #[serde(default)]
    pub seed: u64,
    /// Lease-table faults.
    #[serde(default)]
    pub faults: TableFaults,
    /// Events, in time order.
    #[serde(default)]
    pub events: Vec<Event>,
}

fn default_spread() -> Duration {
    Duration::from_secs(5)
}
fn default_steady() -> Duration {
    Duration::from_secs(60)
}
fn default_failover() -> Duration {
    Duration::from_secs(10)
}
fn default_checkpoint() -> Duration {
    Duration::from_secs(5)
}
fn default_idle_poll() -> Duration {
    Duration::from_secs(2)
}
fn default_rate() -> f64 {
    1.0
}

/// A scenario file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// Not readable.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not a scenario.
    #[error("{path}: {source}")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        source: toml::de::Error,
    },
}

impl Scenario {
    /// Reads a scenario file.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: shown.clone(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| ScenarioError::Parse {
            path: shown,
            source,
        })
    }

    /// The same scenario with shards, workers, event counts and table limits
    /// divided by `factor` (at least 1 each): the CI size.
    pub fn scaled_down(mut self, factor: usize) -> Self {
        let f = factor.max(1);
        let div = |n: usize| n.div_ceil(f).max(1);
        self.shards = div(self.shards);
        self.workers = div(self.workers);
        for e in &mut self.events {
            if e.kind != EventKind::Rolling || e.count > 1 {
                e.count = div(e.count);
            }
        }
        // A rolling deploy replaces every worker: keep it doing so.
        for e in &mut self.events {
            if e.kind == EventKind::Rolling {
                e.count = self.workers;
            }
        }
        self.faults.rcu_limit = self.faults.rcu_limit.map(|l| l / f as f64);
        self.faults.wcu_limit = self.faults.wcu_limit.map(|l| l / f as f64);
        self
    }

    /// When the figures' clock starts: the first event, or 0.
    pub fn first_event(&self) -> Duration {
        self.events.first().map_or(Duration::ZERO, |e| e.at)
    }

    /// When the last event's last step happens, or 0.
    pub fn last_event_end(&self) -> Duration {
        self.events
            .iter()
            .map(Event::end)
            .max()
            .unwrap_or(Duration::ZERO)
    }
}
