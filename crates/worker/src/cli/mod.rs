//! The `tidemark` command line: parses it, starts logging, loads the config,
//! dispatches to a command module (`cmd/`, each owning its clap arguments),
//! bounds every AWS command (`--timeout`, `--give-up-after`) and maps errors
//! to the documented exit codes with a message a person can act on
//! (`aws::explain`). `run` is [`Worker`](crate::Worker). The binary's `main`
//! only calls [`main`].
//!
//! The one part of the library that uses `anyhow`: a command's error is
//! printed and turned into an exit status, never matched on by a caller.

mod aws;
mod cmd;
mod exit;
mod journal;

use crate::config::{Config, LogFormat};
use anyhow::{Context, Result};
use clap::{CommandFactory, Parser, Subcommand};

/// Tidemark moves time-series events from Kinesis streams or SQS queues
/// into per-period DynamoDB tables (one table per day, hour, ...), with
/// write-sharded keys, at least once, and keeps the tables' capacity and
/// retention in step with time.
#[derive(Debug, Parser)]
#[command(
    name = "tidemark",
    version,
    about = "Move time-series events from Kinesis or SQS into per-period DynamoDB tables.",
    long_about = "Tidemark moves time-series events from Kinesis streams or SQS queues into \
per-period DynamoDB tables (one table per day, hour, ...), with write-sharded keys and \
at-least-once delivery, and keeps the tables' capacity and retention in step with time.\n\n\
Start with `tidemark config check --config tidemark.toml`, then `tidemark run`.",
    after_help = cmd::EXIT_CODES
)]
struct Cli {
    #[command(flatten)]
    global: cmd::Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the worker: read the source, write DynamoDB, until SIGTERM/SIGINT.
    #[command(
        after_help = "Examples:\n  tidemark run --config localstack/tidemark.toml\n  TIDEMARK__SOURCE__STREAM=events tidemark run --config deploy/tidemark.toml"
    )]
    Run(cmd::RunArgs),
    /// Size tables, write shards, Kinesis shards and monthly cost.
    #[command(
        after_help = "Examples:\n  tidemark plan --events-per-sec 5000 --peak-events-per-sec 6000 --item-bytes 1000\n  tidemark plan --events-per-sec 600 --item-bytes 180 -o json\n  tidemark plan --events-per-sec 2000 --sample-event '{\"deviceId\":\"d1\",\"timestamp\":1763790000000,\"t\":21.5}'"
    )]
    Plan(cmd::plan::Args),
    /// Print the table and key one event is written to, as `run` would.
    #[command(
        after_help = "Example:\n  tidemark key --config localstack/tidemark.toml --event '{\"deviceId\":\"d1\",\"timestamp\":\"2026-11-22T05:00:00Z\",\"eventId\":\"e1\"}'"
    )]
    Key(cmd::key::Args),
    /// Table maintenance: one round, or a listing of the period tables.
    #[command(
        after_help = "Examples:\n  tidemark tables ensure --config localstack/tidemark.toml\n  tidemark tables rotate --config localstack/tidemark.toml --now 2026-11-23T00:20:00Z --dry-run\n  tidemark tables list --config localstack/tidemark.toml"
    )]
    Tables(cmd::tables::Args),
    /// Change the write-shard count of tables with items: status, backfill
    /// and cutover of a migration started with `schema.migrate_from`.
    #[command(
        after_help = "Examples:\n  tidemark migrate status --config tidemark.toml\n  tidemark migrate backfill --config tidemark.toml --period 2026-11-24 --capacity-share 0.25\n  tidemark migrate cutover --config tidemark.toml --period 2026-11-24"
    )]
    Migrate(cmd::migrate::Args),
    /// Send synthetic IoT events (temperature, humidity, pressure) to the
    /// configured source (Kinesis stream or SQS queue).
    #[command(
        after_help = "Examples:\n  tidemark produce --config localstack/tidemark.toml --devices 200 --rate 2000 --count 50000 --hot-factor 20\n  tidemark produce --config localstack/tidemark.toml --count 1000 --manifest produced.jsonl"
    )]
    Produce(cmd::produce::Args),
    /// Check that every event of a manifest (from produce --manifest) is
    /// stored, with the right content, where `run` writes it.
    #[command(
        after_help = "Example:\n  tidemark verify --config localstack/tidemark.toml --manifest produced.jsonl\n\nExit status: 0 every event stored as produced, 1 some missing or different,\n69 DynamoDB unavailable (nothing answered for 120 s)."
    )]
    Verify(cmd::verify::Args),
    /// Read an entity's events back (parallel queries, merged in time order).
    #[command(
        after_help = "Examples:\n  tidemark query --config localstack/tidemark.toml --entity device-0000 --latest\n  tidemark query --config localstack/tidemark.toml --entity device-0007 --from 2026-11-22T05:00:00Z --to 2026-11-22T06:00:00Z -o csv\n  tidemark query --config localstack/tidemark.toml --entity device-0007 --since 1h"
    )]
    Query(cmd::query::Args),
    /// Per shard: owner, checkpoint and lag; per table: period, state, capacity.
    #[command(after_help = "Example:\n  tidemark status --config localstack/tidemark.toml")]
    Status(cmd::status::Args),
    /// Record a stream's raw records (all shards, from the oldest record to
    /// the current end) into a fixture file (JSON lines).
    #[command(
        after_help = "Example:\n  tidemark record --config localstack/tidemark.toml --out tests/fixtures/my-stream.jsonl"
    )]
    Record(cmd::record::Args),
    /// Replay a fixture through the same pipeline `run` uses (route, write,
    /// dead letters), with no Kinesis at all.
    #[command(
        after_help = "Example:\n  tidemark replay --config localstack/tidemark.toml --fixture tests/fixtures/iot_plain.jsonl"
    )]
    Replay(cmd::replay::Args),
    /// Exit 0 when the local worker's /healthz answers (container health check).
    #[command(after_help = "Example:\n  tidemark healthcheck --addr 127.0.0.1:9102")]
    Healthcheck(cmd::healthcheck::Args),
    /// Check a config (every problem at once, exit 78 when bad) or show the
    /// effective config with the source of each value.
    #[command(
        after_help = "Examples:\n  tidemark config check localstack/tidemark.toml\n  tidemark config show --config localstack/tidemark.toml --output json"
    )]
    Config(cmd::config::Args),
    /// The Kinesis enhanced fan-out stream consumer (`source.read_mode =
    /// "fan_out"`): deregister it, which workers never do on their own.
    #[command(
        after_help = "Example:\n  tidemark consumer deregister --config deploy/tidemark.toml --yes"
    )]
    Consumer(cmd::consumer::Args),
    /// Read the dead-letter destination (file, SQS queue, DynamoDB table or
    /// S3 bucket): list entries, count them, show one with its payload, or
    /// replay them through the current config.
    #[command(
        name = "dead-letters",
        after_help = "Examples:\n  tidemark dead-letters list --config localstack/tidemark.toml --reason missing_field --since 1h\n  tidemark dead-letters stats --config localstack/tidemark.toml -o json\n  tidemark dead-letters show ID --from-file dead-letters.jsonl\n  tidemark dead-letters replay --config tidemark.toml --reason missing_field --dry-run\n\nOn SQS, list, stats and show hide the messages from other readers while they read\n(at most 30 s) and never delete them."
    )]
    DeadLetters(cmd::dead_letters::Args),
    /// Print shell completions (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Example:\n  tidemark completions bash > /etc/bash_completion.d/tidemark"
    )]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the man page of tidemark or of a subcommand (roff), or write
    /// every page into a directory.
    #[command(
        after_help = "Examples:\n  tidemark man | man -l -\n  tidemark man tables ensure | man -l -\n  tidemark man --out /usr/local/share/man/man1"
    )]
    Man(cmd::man::Args),
}

/// Runs the command the process was started with; returns its exit status.
pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let verbose = cli.global.verbose > 0;
    match real_main(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // The reader of our output went away (`| head`): nothing to say.
        Err(e) if cmd::render::is_closed_pipe(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let journal = cmd::journal();
            let x = aws::explain(&e, Some(journal), cmd::origins(), verbose);
            for line in &x.lines {
                eprintln!("{line}");
            }
            std::process::ExitCode::from(x.code)
        }
    }
}

fn real_main(cli: Cli) -> Result<()> {
    cmd::set_global(&cli.global);
    let global = &cli.global;
    // `run` logs as its config says (unless the command line says
    // otherwise); every other command logs warnings to stderr.
    if !matches!(cli.command, Command::Run(_)) {
        init_logs(global, None);
    }
    match cli.command {
        Command::Plan(args) => cmd::plan::run(&args),
        Command::Key(args) => cmd::key::run(&args.config.load_router()?, &args),
        Command::Config(args) => match cmd::config::environment(&args) {
            Some(aws) => aws_command(&aws, false, async move {
                cmd::config::run_environment(&args).await
            }),
            None => cmd::config::run(&args),
        },
        Command::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "tidemark", &mut out);
            cmd::render::write_out(&out)
        }
        Command::Man(args) => cmd::man::run(&Cli::command(), &args),
        Command::Healthcheck(args) => runtime()?.block_on(cmd::healthcheck::run(&args)),
        Command::Produce(args) => {
            let config = args.config.load()?;
            aws_command(&args.aws.clone(), false, async move {
                cmd::produce::run(&config, &args).await
            })
        }
        Command::Verify(args) => {
            let config = args.config.load()?;
            aws_command(&args.aws.clone(), false, async move {
                cmd::verify::run(&config, &args).await
            })
        }
        Command::Query(args) => {
            let schema = args.config.load_router()?;
            aws_command(&args.aws.clone(), false, async move {
                cmd::query::run(&schema, &args).await
            })
        }
        Command::Status(args) => {
            let config = args.config.load()?;
            aws_command(&args.aws.clone(), false, async move {
                cmd::status::run(&config, &args).await
            })
        }
        Command::Record(args) => {
            let config = args.config.load()?;
            aws_command(&args.aws.clone(), false, async move {
                cmd::record::run(&config, &args).await
            })
        }
        Command::Replay(args) => {
            let config = args.config.load()?;
            aws_command(&args.aws.clone(), false, async move {
                cmd::replay::run(&config, &args).await
            })
        }
        Command::Consumer(args) => {
            let config = args.config.load()?;
            aws_command(&args.aws.clone(), false, async move {
                cmd::consumer::run(&config, &args).await
            })
        }
        Command::DeadLetters(args) => {
            let (dest, config) = cmd::dead_letters::destination(&args)?;
            if config.is_some() || cmd::dead_letters::needs_aws(&dest) {
                aws_command(&args.aws.clone(), false, async move {
                    cmd::dead_letters::run(&dest, config.as_ref(), &args).await
                })
            } else {
                runtime()?.block_on(cmd::dead_letters::run(&dest, None, &args))
            }
        }
        Command::Tables(args) => {
            let config = args.config.load()?;
            aws_command(&args.aws.clone(), false, async move {
                cmd::tables::run(&config, &args).await
            })
        }
        Command::Migrate(args) => {
            let config = args.config.load()?;
            aws_command(&args.aws.clone(), false, async move {
                cmd::migrate::run(&config, &args).await
            })
        }
        Command::Run(args) => {
            let config = args.config.load()?;
            init_logs(global, Some(&config));
            // What `config check` warns about, in the worker's own log.
            let env = crate::config::process_env();
            for w in Config::warnings(args.config.config.as_deref(), &env) {
                tracing::warn!(key = %w.key, "{w}");
            }
            aws_command(&args.aws, true, async move { cmd::run::run(&config).await })
        }
    }
}

/// Runs an AWS command on a fresh runtime, bounded: by `--timeout` (the
/// whole command) and by `--give-up-after` (no answer from AWS; for `run`
/// only until AWS first answers). Either ends it with exit 69.
fn aws_command(
    aws: &cmd::AwsArgs,
    is_run: bool,
    command: impl std::future::Future<Output = Result<()>>,
) -> Result<()> {
    cmd::set_aws(aws);
    let rt = runtime()?;
    let give_up = aws.give_up_after;
    let timeout = aws.timeout;
    let result = rt.block_on(async move {
        let watchdog = async {
            let mut waiting = StartUpReport::new(give_up);
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                let journal = cmd::journal();
                let origins = cmd::origins().cloned().unwrap_or_default();
                // `run` says what it waits for until it has started.
                if is_run && !cmd::started() {
                    waiting.tick(journal, &origins);
                }
                // `run` is bounded until its source runs (the source's own
                // start included); from then on its health rules apply.
                if is_run && cmd::started() {
                    continue;
                }
                if let Some(m) = journal.given_up(give_up, &|c| origins.at(c)) {
                    return m;
                }
            }
        };
        let deadline = async {
            match timeout {
                Some(t) => {
                    tokio::time::sleep(t).await;
                    t
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = command => r,
            m = watchdog => Err(cmd::Unavailable(m).into()),
            t = deadline => Err(cmd::Unavailable(format!(
                "the command did not finish within {} (--timeout)",
                humantime_serde::re::humantime::format_duration(t)
            ))
            .into()),
        }
    });
    // A stop past shutdown_timeout, or a command cut short, may leave tasks
    // blocked (file I/O on the blocking pool): do not wait for them.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

/// `run`'s start-up lines: while AWS does not answer, one `WARN` line
/// naming the call, the endpoint and where the endpoint (or the region)
/// came from, 1 s after the trouble starts, then after 2, 4, 8 ... s (at
/// most every minute), with the deadline that ends the wait.
struct StartUpReport {
    give_up: std::time::Duration,
    next: std::time::Instant,
    step: std::time::Duration,
}

impl StartUpReport {
    /// How long calls go unanswered before the first line.
    const FIRST: std::time::Duration = std::time::Duration::from_secs(1);
    /// The longest gap between two lines.
    const MAX_STEP: std::time::Duration = std::time::Duration::from_secs(60);

    fn new(give_up: std::time::Duration) -> Self {
        StartUpReport {
            give_up,
            next: std::time::Instant::now(),
            step: Self::FIRST,
        }
    }

    fn tick(&mut self, journal: &journal::Journal, origins: &aws::Origins) {
        let now = std::time::Instant::now();
        if now < self.next {
            return;
        }
        let Some(what) = journal.given_up(Self::FIRST, &|c| origins.at(c)) else {
            // Answered again: a later trouble starts the back-off anew.
            self.step = Self::FIRST;
            return;
        };
        let fmt = humantime_serde::re::humantime::format_duration;
        tracing::warn!(
            "waiting for AWS at start-up: {what}; exit 69 once nothing has answered for {} \
             (--give-up-after), {} while every connection is refused",
            fmt(self.give_up),
            fmt(self.give_up / 4)
        );
        self.next = now + self.step;
        self.step = (self.step * 2).min(Self::MAX_STEP);
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Logs to stderr for every command. The filter: `RUST_LOG`, else
/// `--log-level`, else `-v` (info, debug, trace), else the config's
/// `telemetry.log_level` for `run` and `warn` for the other commands. The
/// format: `--log-format`, else the config's for `run`, else text; colour
/// only when stderr is a terminal and `NO_COLOR` is unset.
fn init_logs(global: &cmd::Global, config: Option<&Config>) {
    use std::io::IsTerminal;
    let level = global
        .log_filter()
        .or_else(|| config.map(|c| c.telemetry.log_level.clone()))
        .unwrap_or_else(|| "warn".into());
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let terminal = std::io::stderr().is_terminal();
    let json = match global.log_format {
        cmd::LogFormatArg::Json => true,
        cmd::LogFormatArg::Text => false,
        cmd::LogFormatArg::Auto => match config.map(|c| c.telemetry.log_format) {
            Some(LogFormat::Json) => true,
            Some(LogFormat::Auto) => !terminal,
            Some(LogFormat::Text) | None => false,
        },
    };
    let colour = terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    // A second init (none is made) would fail; logs are best effort.
    if json {
        let _ = builder.json().try_init();
    } else {
        let _ = builder.try_init();
    }
}
