//! Command-line definition and dispatch.

mod agent;
mod analysis;
mod ctl;
mod demo;
mod demo_app;
mod install;
mod judge;
mod lint;
mod serve;
mod simulate;
mod view;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Progressive delivery across a fleet of clusters: waves, analysis, targeted rollback.
#[derive(Debug, Parser)]
#[command(name = "flotilla", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    server: ctl::Server,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Validate Rollouts, AnalysisTemplates, Fleets and FleetRollouts offline.
    Lint(lint::LintArgs),
    /// Run, replay or backtest an AnalysisTemplate.
    #[command(subcommand)]
    Analysis(analysis::AnalysisCommand),
    /// Simulate a fleet rollout on virtual time against synthetic traffic.
    Simulate(simulate::SimulateArgs),
    /// Compare canary and baseline metric series with Kayenta's judge (JSON in, JSON out).
    Judge(judge::JudgeArgs),
    /// Run one local cluster's data plane: router, process workloads, statistics, control API.
    Agent(agent::AgentArgs),
    /// Run the demo service (version label, latency, errors, dependency calls from flags).
    DemoApp(demo_app::DemoAppArgs),
    /// Run the controller daemon: drives the fleet rollouts of its manifests through the agents.
    Serve(serve::ServeArgs),
    /// Seed 000's story on this machine: four local clusters, three waves, live view, summary.
    Demo(demo::DemoArgs),
    /// Print the CustomResourceDefinitions of Flotilla's own kinds (Fleet, FleetRollout,
    /// FleetCommand, FleetRolloutRecord) as YAML,
    /// for `kubectl apply -f -`. Argo's kinds use Argo's CRDs, from Argo's release.
    Crds,
    /// Print the manifests that install Flotilla in a hub cluster (namespace, CRDs, least-
    /// privilege RBAC, configuration, store volume, Deployment, Service), or with --spoke in a
    /// spoke, for `kubectl apply -f -`.
    Install(install::InstallArgs),
    #[command(flatten)]
    Ctl(ctl::Verb),
}

/// Runs the chosen command and returns the process exit code.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Lint(args) => lint::run(args),
        Command::Analysis(command) => analysis::run(command),
        Command::Simulate(args) => simulate::run(args),
        Command::Judge(args) => judge::run(args),
        Command::Agent(args) => agent::run(args),
        Command::DemoApp(args) => demo_app::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Crds => {
            use std::io::Write;
            std::io::stdout()
                .lock()
                .write_all(flotilla_runtime::controller::backends::crds_yaml().as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Install(args) => install::run(args),
        Command::Ctl(verb) => ctl::run(verb, cli.server),
    }
}
