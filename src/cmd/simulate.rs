//! `flotilla simulate SCENARIO`: run a fleet rollout on virtual time against synthetic traffic.
//! Exit codes: 0 the simulation ran, 2 bad input.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, ValueEnum};
use flotilla_core::diagnostic::Severity;
use flotilla_core::simulate::{self, Inputs};

#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// A multi-document file: a Scenario with the Fleet, FleetRollout, Rollout and templates.
    #[arg(value_name = "SCENARIO")]
    scenario: PathBuf,
    /// The random seed (the same seed gives byte-identical output).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Repeat over this many consecutive seeds and report aggregates.
    #[arg(long)]
    runs: Option<u64>,
    /// Compare judges: AnalysisTemplates of the file, each in turn standing in for the
    /// Rollout's background analysis, scored against the scenario's truth over `--runs` seeds.
    #[arg(long, value_delimiter = ',', value_name = "TEMPLATE,...")]
    judges: Vec<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Output {
    Text,
    Json,
}

pub fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    let (manifests, diagnostics) =
        match flotilla_runtime::files::load_files(std::slice::from_ref(&args.scenario)) {
            Ok(loaded) => loaded,
            Err(error) => {
                eprintln!("flotilla simulate: {error}");
                return Ok(ExitCode::from(2));
            }
        };
    let mut diagnostics = diagnostics;
    diagnostics.extend(flotilla_core::lint::lint(&manifests, Default::default()));
    let errors: Vec<String> = diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| d.to_string())
        .collect();
    if !errors.is_empty() {
        eprintln!("{}", errors.join("\n"));
        return Ok(ExitCode::from(2));
    }
    let inputs = match Inputs::from_manifests(&manifests) {
        Ok(inputs) => inputs,
        Err(error) => {
            eprintln!("flotilla simulate: {}: {error}", args.scenario.display());
            return Ok(ExitCode::from(2));
        }
    };
    let mut stdout = std::io::stdout().lock();
    if !args.judges.is_empty() {
        let runs = args.runs.unwrap_or(10);
        let reports = match simulate::compare_judges(&inputs, &args.judges, args.seed, runs) {
            Ok(r) => r,
            Err(error) => {
                eprintln!("flotilla simulate: {}: {error}", args.scenario.display());
                return Ok(ExitCode::from(2));
            }
        };
        match args.output {
            Output::Json => writeln!(stdout, "{}", serde_json::to_string_pretty(&reports)?)?,
            Output::Text => {
                writeln!(
                    stdout,
                    "{runs} runs from seed {} per judge; bounds are exact 95% (Clopper-Pearson); detection times and requests are medians",
                    args.seed
                )?;
                writeln!(
                    stdout,
                    "{:<12} {:>8} {:>18} {:>9} {:>9} {:>9} {:>11} {:>12} {:>14} {:>12}",
                    "judge",
                    "healthy",
                    "false rollbacks",
                    "FP upper",
                    "regressed",
                    "detected",
                    "power lower",
                    "detect (s)",
                    "detect (req)",
                    "bad req/run"
                )?;
                for r in &reports {
                    writeln!(
                        stdout,
                        "{:<12} {:>8} {:>18} {:>9.4} {:>9} {:>9} {:>11.4} {:>12} {:>14} {:>12.0}",
                        r.judge,
                        r.healthy,
                        format!("{} ({} undecided)", r.false_rollbacks, r.healthy_undecided),
                        r.false_rollback_upper,
                        r.regressed,
                        r.detected,
                        r.power_lower,
                        r.median_detection_seconds
                            .map_or_else(|| "-".to_owned(), |s| format!("{s:.0}")),
                        r.median_detection_requests
                            .map_or_else(|| "-".to_owned(), |n| format!("{n:.0}")),
                        r.mean_bad_requests
                    )?;
                }
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(runs) = args.runs {
        let aggregate = match simulate::run_many(&inputs, args.seed, runs) {
            Ok(a) => a,
            Err(error) => {
                eprintln!("flotilla simulate: {error}");
                return Ok(ExitCode::from(2));
            }
        };
        match args.output {
            Output::Json => writeln!(stdout, "{}", serde_json::to_string_pretty(&aggregate)?)?,
            Output::Text => {
                writeln!(
                    stdout,
                    "{} runs from seed {}: {:?}",
                    aggregate.runs, aggregate.seed, aggregate.outcomes
                )?;
                for (cluster, outcomes) in &aggregate.clusters {
                    writeln!(stdout, "  {cluster:<16} {outcomes:?}")?;
                }
                writeln!(
                    stdout,
                    "mean bad requests of the new version per run: {:.1}",
                    aggregate.mean_bad_requests
                )?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let report = match simulate::run(&inputs, args.seed) {
        Ok(r) => r,
        Err(error) => {
            eprintln!("flotilla simulate: {error}");
            return Ok(ExitCode::from(2));
        }
    };
    match args.output {
        Output::Json => writeln!(stdout, "{}", serde_json::to_string_pretty(&report)?)?,
        Output::Text => {
            writeln!(
                stdout,
                "outcome: {}{}",
                report.outcome,
                if report.message.is_empty() {
                    String::new()
                } else {
                    format!(" — {}", report.message)
                }
            )?;
            let at = |t: Option<f64>| t.map_or_else(|| "-".to_owned(), |t| format!("{t:.0}s"));
            for event in &report.events {
                writeln!(
                    stdout,
                    "event at {}: {} — {}",
                    at(Some(event.applied_at)),
                    event.kind,
                    event.message
                )?;
            }
            for wave in &report.waves {
                writeln!(
                    stdout,
                    "wave {}: {} (started {}, completed {})",
                    wave.index,
                    wave.clusters.join(", "),
                    at(wave.started_at),
                    at(wave.completed_at)
                )?;
                for barrier in &wave.barriers {
                    let last = match barrier.last_arrived_at {
                        Some(arrived) => format!(
                            "; {} arrived last, at {}",
                            barrier.last_arrived.join(", "),
                            at(Some(arrived))
                        ),
                        None => format!(
                            "; released by an operator, {} not there yet",
                            barrier.not_there.join(", ")
                        ),
                    };
                    writeln!(
                        stdout,
                        "  lockstep barrier {}/{} passed at {}{last}",
                        barrier.step,
                        barrier.steps,
                        at(Some(barrier.passed_at))
                    )?;
                }
            }
            for c in &report.clusters {
                writeln!(
                    stdout,
                    "  {:<16} wave {}  {:<10} {:<20} started {:>6}  decided {:>6}  bad requests {:>6}  {}",
                    c.name,
                    c.wave,
                    c.outcome,
                    c.image.as_deref().unwrap_or("-"),
                    at(c.started_at),
                    at(c.decided_at),
                    c.bad_requests,
                    c.reason
                )?;
                if let Some(f) = &c.failure {
                    writeln!(
                        stdout,
                        "  {:<16} failing metric {} = {} ({})",
                        "", f.metric, f.value, f.message
                    )?;
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
