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
    /// Behaviour of one version, overriding the flags above when `--version` matches:
    /// `VERSION:calls=N` and/or `VERSION:error-rate=R` (keys joined with `;`). One workload
    /// template can then run every version, each with its own behaviour (seed 004's N+1 query
    /// lives in the new version wherever it runs).
    #[arg(long, value_name = "VERSION:KEY=VALUE[;KEY=VALUE]", value_parser = parse_profile)]
    profile: Vec<Profile>,
}

#[derive(Debug, Clone, PartialEq)]
struct Profile {
    version: String,
    calls: Option<u32>,
    error_rate: Option<f64>,
}

fn parse_profile(text: &str) -> Result<Profile, String> {
    let (version, settings) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?} is not VERSION:KEY=VALUE"))?;
    let mut profile = Profile {
        version: version.to_owned(),
        calls: None,
        error_rate: None,
    };
    for setting in settings.split(';').filter(|s| !s.is_empty()) {
        let (key, value) = setting
            .split_once('=')
            .ok_or_else(|| format!("{setting:?} is not KEY=VALUE"))?;
        match key {
            "calls" => {
                profile.calls = Some(
                    value
                        .parse()
                        .map_err(|_| format!("calls={value:?} is not a count"))?,
                )
            }
            "error-rate" => {
                profile.error_rate = Some(
                    value
                        .parse()
                        .map_err(|_| format!("error-rate={value:?} is not a number"))?,
                )
            }
            other => {
                return Err(format!(
                    "unknown profile key {other:?}; the keys are calls, error-rate"
                ));
            }
        }
    }
    Ok(profile)
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
    let mut args = args;
    for profile in args.profile.iter().filter(|p| p.version == args.version) {
        if let Some(calls) = profile.calls {
            args.dependency_calls = calls;
        }
        if let Some(rate) = profile.error_rate {
            args.error_rate = rate;
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_parse_and_reject_unknown_keys() {
        let p = parse_profile("1.9.0:calls=4;error-rate=0.05").unwrap();
        assert_eq!(p.version, "1.9.0");
        assert_eq!(p.calls, Some(4));
        assert_eq!(p.error_rate, Some(0.05));
        assert!(parse_profile("1.9.0").is_err());
        assert!(
            parse_profile("1.9.0:speed=3")
                .unwrap_err()
                .contains("unknown profile key")
        );
    }
}
