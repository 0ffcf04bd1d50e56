//! `tidemark config`: check a config (every problem at once; with
//! `--environment` also what `run` needs from AWS), show the effective
//! config with the source of each value, write a starter config (`init`),
//! or explain a key (`explain`, offline).

mod environment;
mod explain;
mod init;

use std::path::PathBuf;

use crate::config::{Config, LoadError, env_warnings, process_env};
use anyhow::Result;

use super::render::{self, Output, outln};

/// Arguments of `config`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    config: super::ConfigArg,
}

#[derive(Debug, Clone, clap::Subcommand)]
enum Action {
    /// Load and check the config as `run` would: every problem with its key,
    /// value, source (file:line or variable) and fix; exit 78 when bad.
    Check {
        /// The file (default: --config, TIDEMARK_CONFIG).
        file: Option<PathBuf>,
        /// Also check what `run` needs from AWS: region, credentials, the
        /// stream or queue, the tables, the dead-letter destination, the
        /// calls the worker makes at start (the AWS options below apply).
        #[arg(long)]
        environment: bool,
        #[command(flatten)]
        aws: super::AwsArgs,
    },
    /// Every key of the effective config, its value and where it came from
    /// (file:line, environment variable, default).
    Show {
        /// The file (default: --config, TIDEMARK_CONFIG).
        file: Option<PathBuf>,
    },
    /// Write a commented starter config from a few flags (asked for on a
    /// terminal when missing), to stdout or --out.
    Init(init::Args),
    /// The reference of a key or section (type, default, allowed values,
    /// variable), offline.
    Explain {
        /// A dotted key or section, e.g. `schema.key`, `source.stream`.
        key: String,
    },
}

/// The AWS options of `config check --environment`, when asked for.
pub(crate) fn environment(args: &Args) -> Option<super::AwsArgs> {
    match &args.action {
        Action::Check {
            environment: true,
            aws,
            ..
        } => Some(aws.clone()),
        _ => None,
    }
}

/// `config check --environment`: the config, then AWS.
pub(crate) async fn run_environment(args: &Args) -> Result<()> {
    let Action::Check { file, .. } = &args.action else {
        return run(args);
    };
    let env = process_env();
    let path = file.as_deref().or(args.config.config.as_deref());
    let config = match Config::load(path, &env) {
        Ok(c) => c,
        // The config's own problems first, as without --environment.
        Err(_) => return run(args),
    };
    let sdk = super::sdk().await?;
    let mut checks = Vec::new();
    if let Some(o) = super::origins() {
        if let Some((region, from)) = &o.region {
            checks.push(environment::Check {
                check: "region".into(),
                ok: true,
                detail: format!("{region} (from {from})"),
                fix: String::new(),
                failure: None,
            });
        }
        checks.push(environment::Check {
            check: "credentials".into(),
            ok: true,
            detail: match &o.profile {
                Some((p, from)) => format!("loaded (profile {p} from {from})"),
                None => "loaded (default chain)".into(),
            },
            fix: String::new(),
            failure: None,
        });
    }
    checks.extend(environment::checks(&config, &sdk).await);
    let output = super::output(Output::Table);
    if matches!(output, Output::Json | Output::Jsonl) {
        render::print_json(
            &serde_json::json!({
                "ok": checks.iter().all(|c| c.ok),
                "problems": [],
                "warnings": env_warnings(&env),
                "environment": checks,
            }),
            output,
        )?;
    } else {
        let shown = path.map_or("(no file)".into(), |p| p.display().to_string());
        outln!("ok: {shown} is a valid config")?;
        let rows = checks
            .iter()
            .map(|c| {
                let detail = if c.fix.is_empty() {
                    c.detail.clone()
                } else {
                    format!("{}; fix: {}", c.detail, c.fix)
                };
                vec![
                    c.check.clone(),
                    if c.ok { "ok" } else { "FAILED" }.to_string(),
                    detail,
                ]
            })
            .collect();
        outln!(
            "{}",
            render::table(Some(&["CHECK", "", "DETAIL"]), rows, &[])
        )?;
    }
    match environment::exit_code(&checks) {
        0 => Ok(()),
        code => Err(super::Exit {
            code,
            message: format!(
                "{} of {} environment checks failed",
                checks.iter().filter(|c| !c.ok).count(),
                checks.len()
            ),
        }
        .into()),
    }
}

pub(crate) fn run(args: &Args) -> Result<()> {
    let env = process_env();
    let warnings = env_warnings(&env);
    match &args.action {
        Action::Check { file, .. } => {
            let path = file.as_deref().or(args.config.config.as_deref());
            let result = Config::load(path, &env);
            let warnings: Vec<String> = warnings
                .into_iter()
                .chain(Config::warnings(path, &env).iter().map(ToString::to_string))
                .collect();
            let output = super::output(Output::Table);
            if matches!(output, Output::Json | Output::Jsonl) {
                let problems = match &result {
                    Err(LoadError::Invalid(p)) => serde_json::to_value(p)?,
                    Err(e) => serde_json::json!([{ "message": e.to_string() }]),
                    Ok(_) => serde_json::json!([]),
                };
                render::print_json(
                    &serde_json::json!({
                        "ok": result.is_ok(),
                        "problems": problems,
                        "warnings": warnings,
                    }),
                    output,
                )?;
            } else {
                for w in &warnings {
                    eprintln!("warning: {w}");
                }
                if result.is_ok() {
                    let shown = path.map_or("(no file)".into(), |p| p.display().to_string());
                    outln!("ok: {shown} is a valid config")?;
                }
            }
            result?;
            Ok(())
        }
        Action::Show { file } => {
            for w in &warnings {
                eprintln!("warning: {w}");
            }
            let path = file.as_deref().or(args.config.config.as_deref());
            let all = Config::effective(path, &env)?;
            let rows = all
                .iter()
                .map(|e| vec![e.key.clone(), e.value.clone(), e.origin.to_string()])
                .collect();
            // JSON output carries values as JSON (`"50ms"`, `20000`, a
            // table as an object), not as TOML text in a string.
            let objects: Vec<serde_json::Value> = all
                .iter()
                .map(|e| {
                    serde_json::json!({
                        "key": e.key,
                        "value": toml_to_json(&e.value),
                        "origin": e.origin,
                    })
                })
                .collect();
            render::print_rows(
                &["KEY", "VALUE", "SOURCE"],
                rows,
                &[],
                super::output(Output::Table),
                &objects,
            )
        }
        Action::Init(init) => init::run(init),
        Action::Explain { key } => render::print_text(&explain::explain(key)?),
    }
}

/// A TOML value's text as JSON (strings stay strings, tables become
/// objects); text that does not parse stays a string.
fn toml_to_json(value: &str) -> serde_json::Value {
    toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .and_then(|v| serde_json::to_value(v).ok())
        .unwrap_or_else(|| serde_json::Value::String(value.to_string()))
}
