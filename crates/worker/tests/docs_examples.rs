//! The docs' examples run: every `tidemark` command in a fenced shell block
//! of README.md and docs/*.md that needs no AWS (`plan`, `key`, `config`,
//! `completions`, `man`, `--help`, `--version`) is run from the repository
//! root with the built binary, and must exit as the example says (0, or the
//! `# exits N` at the end of its line). The lines a block shows after a
//! command are its output: each must appear in what the command printed
//! (`...` and lines with `…` stand for what is left out). Inline commands
//! (`` `tidemark plan --events-per-sec 2000 --item-bytes 200` ``) with an
//! option and no placeholder (`FILE`, `KEY`, `...`) run too.
//!
//! Commands that need AWS are run by scripts/newcomer and scripts/demo.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tidemark");

/// Subcommands that need no AWS.
const OFFLINE: &[&str] = &[
    "plan",
    "key",
    "config",
    "completions",
    "man",
    "--help",
    "--version",
    "help",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// One example: where it is, the command line, its expected exit status
/// and the output lines shown after it.
#[derive(Debug)]
struct Example {
    place: String,
    command: String,
    exit: i32,
    shown: Vec<String>,
}

/// The `tidemark` subcommand of a shell line (after `VAR=value` prefixes).
fn subcommand(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace();
    let mut w = words.next()?;
    while w.contains('=') && !w.starts_with('-') {
        w = words.next()?;
    }
    (w == "tidemark").then(|| words.next().unwrap_or(""))
}

/// The examples of one markdown file.
fn examples(file: &Path) -> Vec<Example> {
    let text = std::fs::read_to_string(file).unwrap();
    let name = file.strip_prefix(root()).unwrap().display().to_string();
    let mut out = Vec::new();
    let mut in_block = false;
    let mut shell = false;
    let mut current: Option<Example> = None;
    let mut pending = String::new();
    // `export` lines of the block: the commands after them run with them.
    let mut prelude = String::new();
    for (n, line) in text.lines().enumerate() {
        if let Some(lang) = line.trim_start().strip_prefix("```") {
            if in_block {
                out.extend(current.take());
                prelude.clear();
            } else {
                shell = matches!(lang.trim(), "sh" | "bash" | "console" | "shell");
            }
            in_block = !in_block;
            continue;
        }
        if !in_block {
            out.extend(inline(line, &format!("{name}:{}", n + 1)));
            continue;
        }
        if !shell {
            continue;
        }
        // A command continued on the next line.
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        let full = format!("{pending}{line}");
        pending.clear();
        let (command, exit) = match full.split_once("# exits ") {
            Some((c, code)) => (c.trim().to_string(), code.trim().parse().unwrap()),
            None => (full.trim().to_string(), 0),
        };
        match subcommand(&command) {
            Some(sub) => {
                out.extend(current.take());
                if OFFLINE.contains(&sub) {
                    current = Some(Example {
                        place: format!("{name}:{}", n + 1),
                        command: format!("{prelude}{command}"),
                        exit,
                        shown: Vec::new(),
                    });
                }
            }
            None if command.starts_with("export ") => {
                out.extend(current.take());
                prelude.push_str(&command);
                prelude.push_str("; ");
            }
            None if command.starts_with('#') || command.is_empty() => {}
            None if line.contains("tidemark") || line.starts_with('$') => {
                // Another program's command line ends the output.
                out.extend(current.take());
            }
            None => {
                if let Some(ex) = current.as_mut() {
                    ex.shown.push(line.trim().to_string());
                }
            }
        }
    }
    out
}

/// The runnable commands of a line's inline code spans.
fn inline(line: &str, place: &str) -> Vec<Example> {
    line.split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| {
            subcommand(span).is_some_and(|s| OFFLINE.contains(&s))
                && span.contains(" --")
                && !span.contains("...")
                && !span
                    .split_whitespace()
                    .any(|w| w.len() > 1 && w.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        })
        .map(|span| Example {
            place: place.to_string(),
            command: span.to_string(),
            exit: 0,
            shown: Vec::new(),
        })
        .collect()
}

/// Collapses runs of blanks: aligned columns may widen.
fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_docs_offline_examples_run_as_shown() {
    let root = root();
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    // `tidemark` is the binary under test.
    let bin_dir = std::env::temp_dir().join(format!("tidemark-docs-bin-{}", std::process::id()));
    std::fs::create_dir_all(&bin_dir).unwrap();
    let link = bin_dir.join("tidemark");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(BIN, &link).unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // A home with the usual places examples write to, and a pager that
    // reads the page (`| man -l -`): the examples' own programs are not
    // under test.
    let home = bin_dir.join("home");
    for d in [
        ".local/share/bash-completion/completions",
        ".local/share/man/man1",
    ] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    let pager = bin_dir.join("man");
    std::fs::write(&pager, "#!/bin/sh\ncat >/dev/null\n").unwrap();
    std::fs::set_permissions(&pager, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let all: Vec<Example> = files.iter().flat_map(|f| examples(f)).collect();
    assert!(
        all.len() >= 10,
        "only {} examples found: {all:#?}",
        all.len()
    );
    let mut broken = Vec::new();
    for ex in &all {
        let o = Command::new("bash")
            .args(["-c", &ex.command])
            .current_dir(&root)
            .env_clear()
            .env("PATH", &path)
            .env("HOME", &home)
            .env("HOSTNAME", "docs-host")
            .output()
            .unwrap();
        let printed = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        if o.status.code() != Some(ex.exit) {
            broken.push(format!(
                "{}: `{}` exited {:?}, the docs say {}:\n{printed}",
                ex.place,
                ex.command,
                o.status.code(),
                ex.exit
            ));
            continue;
        }
        let printed = squeeze(&printed);
        for line in &ex.shown {
            if line == "..." || line.contains('…') {
                continue;
            }
            if !printed.contains(&squeeze(line)) {
                broken.push(format!(
                    "{}: `{}` does not print the line the docs show:\n  {line}\nit printed:\n{printed}",
                    ex.place, ex.command
                ));
            }
        }
    }
    eprintln!("{} offline examples run", all.len());
    std::fs::remove_dir_all(&bin_dir).ok();
    assert!(
        broken.is_empty(),
        "{} of {} examples do not run as the docs say:\n\n{}",
        broken.len(),
        all.len(),
        broken.join("\n\n")
    );
}

/// Every dead-letter reason a user can meet is in docs/cli.md's table of
/// reasons, with what to do about it.
#[test]
fn every_dead_letter_reason_is_in_the_cli_docs_table() {
    let text = std::fs::read_to_string(root().join("docs/cli.md")).unwrap();
    for reason in tidemark_schema::Reason::ALL {
        let row = format!("| `{}` |", reason.as_str());
        assert!(
            text.lines().any(|l| l.starts_with(&row)),
            "docs/cli.md has no row for the dead-letter reason `{reason}`"
        );
    }
}
