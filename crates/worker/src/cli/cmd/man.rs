//! `tidemark man`: the man page of tidemark or of one subcommand (roff), or
//! every page written into a directory.

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::Usage;
use super::render::write_out;

/// Arguments of `man`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The subcommand whose page to print, e.g. `tables ensure`; default:
    /// tidemark's own page.
    command: Vec<String>,
    /// Write every page (tidemark.1, tidemark-plan.1, tidemark-tables-ensure.1,
    /// ...) into this directory instead of printing one.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    out: Option<PathBuf>,
}

pub(crate) fn run(cli: &clap::Command, args: &Args) -> Result<()> {
    let mut cmd = cli.clone().disable_help_subcommand(true);
    // Gives every subcommand its display name (`tidemark-tables-ensure`).
    cmd.build();
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        clap_mangen::generate_to(cmd, dir)
            .with_context(|| format!("writing the man pages into {}", dir.display()))?;
        return Ok(());
    }
    let mut page = cmd;
    for name in &args.command {
        let names: Vec<String> = page
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .collect();
        page = page.find_subcommand(name).cloned().ok_or_else(|| {
            Usage(format!(
                "`{name}` is not a subcommand of `{}` (its subcommands: {})",
                page.get_display_name().unwrap_or(page.get_name()),
                names.join(", ")
            ))
        })?;
    }
    let mut out = Vec::new();
    clap_mangen::Man::new(page).render(&mut out)?;
    write_out(&out)
}
