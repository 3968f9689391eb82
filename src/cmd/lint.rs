//! `flotilla lint`: exit 0 when there is no error, 1 on any content error, 2 on unreadable input
//! or a usage error.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use flotilla_core::diagnostic::Severity;
use flotilla_core::lint::Options;

#[derive(Debug, Args)]
pub struct LintArgs {
    /// Manifest files or directories (YAML with any number of documents, or JSON).
    #[arg(value_name = "FILE")]
    files: Vec<PathBuf>,
    /// A manifest file or directory (may be repeated; same as a positional FILE).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    filename: Vec<PathBuf>,
    /// Treat warnings as errors.
    #[arg(long)]
    strict: bool,
    /// Also read, in each Kubernetes cluster of a linted Fleet whose Rollout spec is owned there
    /// (`rolloutSource: cluster`), the Rollout it holds, and check it against the FleetRollouts
    /// (a lockstep wave needs the same steps in every cluster).
    #[arg(long)]
    live: bool,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Output {
    Text,
    Json,
}

pub fn run(args: LintArgs) -> anyhow::Result<ExitCode> {
    let mut paths = args.files;
    paths.extend(args.filename);
    if paths.is_empty() {
        eprintln!("flotilla lint: name at least one FILE (or -f FILE)");
        return Ok(ExitCode::from(2));
    }
    let options = Options {
        strict: args.strict,
        capabilities: Some(flotilla_runtime::controller::backends::capabilities_of),
    };
    let report = if args.live {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(flotilla_runtime::files::lint_paths_live(&paths, options))
    } else {
        flotilla_runtime::files::lint_paths(&paths, options)
    };
    let report = match report {
        Ok(report) => report,
        Err(error) => {
            eprintln!("flotilla lint: {error}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut stdout = std::io::stdout().lock();
    match args.output {
        Output::Json => {
            serde_json::to_writer_pretty(
                &mut stdout,
                &serde_json::json!({ "diagnostics": report.diagnostics }),
            )?;
            writeln!(stdout)?;
        }
        Output::Text => {
            for diagnostic in &report.diagnostics {
                writeln!(stdout, "{diagnostic}")?;
            }
            let count = |s| {
                report
                    .diagnostics
                    .iter()
                    .filter(|d| d.severity == s)
                    .count()
            };
            writeln!(
                stdout,
                "{} manifest(s) in {} file(s): {} error(s), {} warning(s), {} note(s)",
                report.manifests,
                report.files,
                count(Severity::Error),
                count(Severity::Warning),
                count(Severity::Note)
            )?;
        }
    }
    Ok(if report.has_errors() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
