//! `flotilla agent --config FILE`: one local cluster's data plane (router, workloads, traffic
//! statistics, control API), running until SIGTERM or SIGINT; SIGHUP reloads the file.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The agent's configuration (YAML); see docs/agent.md.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
}

pub fn run(args: AgentArgs) -> anyhow::Result<ExitCode> {
    let runtime = flotilla_agent::runtime().context("cannot start the async runtime")?;
    runtime.block_on(flotilla_agent::agent::run(&args.config))?;
    Ok(ExitCode::SUCCESS)
}
