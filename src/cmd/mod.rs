//! Command-line definition and dispatch.

mod analysis;
mod lint;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Progressive delivery across a fleet of clusters: waves, analysis, targeted rollback.
#[derive(Debug, Parser)]
#[command(name = "flotilla", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate Rollouts, AnalysisTemplates, Fleets and FleetRollouts offline.
    Lint(lint::LintArgs),
    /// Run, replay or backtest an AnalysisTemplate.
    #[command(subcommand)]
    Analysis(analysis::AnalysisCommand),
}

/// Runs the chosen command and returns the process exit code.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Lint(args) => lint::run(args),
        Command::Analysis(command) => analysis::run(command),
    }
}
