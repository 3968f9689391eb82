//! `flotilla demo-app`: the demo service whose latency, errors and dependency calls come from
//! its flags (seed 004's N+1 query: `--dependency-calls` per version times
//! `--dependency-latency-ms` per cluster).

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use flotilla_agent::demo_app::{self, DemoConfig};

#[derive(Debug, Args)]
pub struct DemoAppArgs {
    /// The version label (in the body and the `x-version` header).
    #[arg(long)]
    version: String,
    /// The loopback port to listen on (0 picks one).
    #[arg(long)]
    port: u16,
    /// Base latency: the median, or `P50,P95` for a log-normal spread (milliseconds).
    #[arg(long, value_name = "P50[,P95]", default_value = "0", value_parser = parse_latency)]
    base_latency_ms: (f64, f64),
    /// Share of requests answered with 500 (0..=1).
    #[arg(long, default_value_t = 0.0)]
    error_rate: f64,
    /// Latency of one dependency call from this cluster (milliseconds).
    #[arg(long, default_value_t = 0.0)]
    dependency_latency_ms: f64,
    /// Dependency calls per request in this version.
    #[arg(long, default_value_t = 0)]
    dependency_calls: u32,
    /// Seed of the latency and error draws.
    #[arg(long)]
    seed: Option<u64>,
}

fn parse_latency(text: &str) -> Result<(f64, f64), String> {
    let number = |s: &str| {
        s.trim()
            .parse::<f64>()
            .map_err(|_| format!("{s:?} is not a number of milliseconds"))
    };
    match text.split_once(',') {
        Some((p50, p95)) => Ok((number(p50)?, number(p95)?)),
        None => {
            let p50 = number(text)?;
            Ok((p50, p50))
        }
    }
}

pub fn run(args: DemoAppArgs) -> anyhow::Result<ExitCode> {
    let config = DemoConfig {
        version: args.version,
        port: args.port,
        base_latency_p50_ms: args.base_latency_ms.0,
        base_latency_p95_ms: args.base_latency_ms.1,
        error_rate: args.error_rate,
        dependency_latency_ms: args.dependency_latency_ms,
        dependency_calls: args.dependency_calls,
        seed: args.seed,
        ..DemoConfig::default()
    };
    let runtime = flotilla_agent::runtime().context("cannot start the async runtime")?;
    runtime.block_on(demo_app::serve(config))?;
    Ok(ExitCode::SUCCESS)
}
