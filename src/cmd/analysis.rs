//! `flotilla analysis run | replay | backtest`: prove a query and its thresholds before a release
//! depends on them. Exit codes: 0 Successful, 1 Failed, 2 Inconclusive (or no verdict),
//! 3 Error, 4 bad input.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use flotilla_core::analysis::plan::RunPlan;
use flotilla_core::analysis::replay::{ReplayInput, RunReport, replay};
use flotilla_core::analysis::{Millis, run::Run};
use flotilla_core::spec::common::parse_duration;
use flotilla_providers::Providers;
use flotilla_runtime::analysis::{self as live, InputError, MeasurementEvent};
use flotilla_runtime::clock::wall_clock;
use flotilla_runtime::secrets::Secrets;

const BAD_INPUT: u8 = 4;

#[derive(Debug, Subcommand)]
pub enum AnalysisCommand {
    /// Run a template against live providers, printing each measurement and the verdict.
    Run(RunArgs),
    /// Evaluate recorded results offline, on a virtual clock.
    Replay(ReplayArgs),
    /// Evaluate a template at each step of a past window (Prometheus' `time` parameter).
    Backtest(BacktestArgs),
}

#[derive(Debug, Args)]
struct TemplateArgs {
    /// The file holding the AnalysisTemplate (and any template it includes).
    #[arg(long, value_name = "FILE")]
    template: PathBuf,
    /// Which template of the file, when it holds several.
    #[arg(long)]
    name: Option<String>,
    /// An argument value (repeatable).
    #[arg(long = "arg", value_name = "NAME=VALUE", value_parser = parse_arg)]
    args: Vec<(String, String)>,
    /// A directory of secrets (`<dir>/<secret>/<key>`), besides FLOTILLA_SECRET_* variables.
    #[arg(long, value_name = "DIR")]
    secrets_dir: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    template: TemplateArgs,
    /// Take one measurement of every metric and stop (does my query return a number?).
    #[arg(long)]
    once: bool,
    /// Output format for the final report.
    #[arg(short, long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    template: TemplateArgs,
    /// The recorded results: {"measurements": {"<metric>": [...]}, "terminate": false}.
    #[arg(long, value_name = "FILE")]
    measurements: PathBuf,
}

#[derive(Debug, Args)]
pub struct BacktestArgs {
    #[command(flatten)]
    template: TemplateArgs,
    /// Start of the window: RFC 3339, Unix seconds, or `now-<duration>`.
    #[arg(long, value_name = "T")]
    start: String,
    /// End of the window (same forms; default now).
    #[arg(long, value_name = "T", default_value = "now")]
    end: String,
    /// Step between evaluations (Go duration; default 1m).
    #[arg(long, value_name = "D", default_value = "1m")]
    step: String,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Output {
    Text,
    Json,
}

fn parse_arg(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not NAME=VALUE"))?;
    if name.is_empty() {
        return Err(format!("{text:?} has an empty name"));
    }
    Ok((name.to_owned(), value.to_owned()))
}

fn bad_input(error: impl std::fmt::Display) -> ExitCode {
    eprintln!("flotilla analysis: {error}");
    ExitCode::from(BAD_INPUT)
}

/// The providers, reading credentials where the template's arguments read their secrets.
fn providers(args: &TemplateArgs) -> anyhow::Result<Providers> {
    let secrets = Secrets {
        dir: args.secrets_dir.clone(),
    };
    Providers::new(std::sync::Arc::new(secrets)).context("building the HTTP client")
}

/// Loads the template and builds the plan; any failure is bad input, before anything runs.
fn prepare(args: &TemplateArgs, once: bool) -> Result<RunPlan, ExitCode> {
    let spec = live::load_template(&args.template, args.name.as_deref()).map_err(bad_input)?;
    let given: BTreeMap<String, String> = args.args.iter().cloned().collect();
    let secrets = Secrets {
        dir: args.secrets_dir.clone(),
    };
    let resolved = live::resolve_args(&spec.args, &given, &secrets)
        .map_err(|e| bad_input(format!("{}: {e}", args.template.display())))?;
    let mut plan = live::plan(
        &args.template,
        &spec,
        &resolved,
        flotilla_providers::SUPPORTED,
    )
    .map_err(|e: InputError| bad_input(e))?;
    if once {
        // One measurement each, and its own phase is the verdict.
        for metric in &mut plan.metrics {
            metric.count = Some(1);
            metric.interval = None;
            metric.initial_delay = None;
            metric.failure_limit = 0;
            metric.inconclusive_limit = 0;
            metric.consecutive_error_limit = 0;
            metric.consecutive_success_limit = 0;
            metric.consecutive_failure_limit = None;
        }
    }
    Ok(plan)
}

fn format_time(at: Millis) -> String {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(at).map_or_else(
        || at.to_string(),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    )
}

fn print_report(report: &RunReport, output: Output) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match output {
        Output::Json => writeln!(stdout, "{}", serde_json::to_string_pretty(report)?)?,
        Output::Text => {
            for metric in &report.metrics {
                let dry = if metric.dry_run { " (dry run)" } else { "" };
                writeln!(
                    stdout,
                    "metric {}{dry}: {:?} (count {}, successful {}, failed {}, inconclusive {}, error {}){}",
                    metric.name,
                    metric.phase,
                    metric.count,
                    metric.successful,
                    metric.failed,
                    metric.inconclusive,
                    metric.error,
                    if metric.message.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", metric.message)
                    }
                )?;
            }
            writeln!(
                stdout,
                "verdict: {:?}{}",
                report.phase,
                if report.message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", report.message)
                }
            )?;
            if report.phase == flotilla_core::spec::analysis::AnalysisPhase::Successful
                && !report.evidence
            {
                writeln!(
                    stdout,
                    "note: the run passed without evidence (a metric returned no data or NaN); Flotilla never validates a cluster on it"
                )?;
            }
        }
    }
    Ok(())
}

pub fn run(command: AnalysisCommand) -> anyhow::Result<ExitCode> {
    match command {
        AnalysisCommand::Replay(args) => {
            let plan = match prepare(&args.template, false) {
                Ok(plan) => plan,
                Err(code) => return Ok(code),
            };
            let text = match std::fs::read_to_string(&args.measurements) {
                Ok(text) => text,
                Err(e) => return Ok(bad_input(format!("{}: {e}", args.measurements.display()))),
            };
            let input = match ReplayInput::parse(&text) {
                Ok(input) => input,
                Err(e) => return Ok(bad_input(format!("{}: {e}", args.measurements.display()))),
            };
            let run = match replay(&plan, input) {
                Ok(run) => run,
                Err(e) => return Ok(bad_input(format!("{}: {e}", args.measurements.display()))),
            };
            let report = RunReport::of(&run, &plan);
            print_report(&report, Output::Json)?;
            Ok(ExitCode::from(report.exit_code()))
        }
        AnalysisCommand::Run(args) => {
            let plan = match prepare(&args.template, args.once) {
                Ok(plan) => plan,
                Err(code) => return Ok(code),
            };
            let providers = providers(&args.template)?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let output = args.output;
            let run: Run = runtime.block_on(live::drive(
                &plan,
                &providers,
                |event: &MeasurementEvent| {
                    if output == Output::Text {
                        println!(
                            "{}  {}  {}  {:?}{}",
                            format_time(event.at),
                            event.metric,
                            if event.value.is_empty() {
                                "-"
                            } else {
                                &event.value
                            },
                            event.phase,
                            if event.message.is_empty() {
                                String::new()
                            } else {
                                format!("  {}", event.message)
                            }
                        );
                    } else {
                        eprintln!(
                            "{} {} {} {:?}",
                            format_time(event.at),
                            event.metric,
                            event.value,
                            event.phase
                        );
                    }
                },
                async {
                    let _ = tokio::signal::ctrl_c().await;
                },
            ));
            let report = RunReport::of(&run, &plan);
            print_report(&report, output)?;
            Ok(ExitCode::from(report.exit_code()))
        }
        AnalysisCommand::Backtest(args) => {
            let plan = match prepare(&args.template, false) {
                Ok(plan) => plan,
                Err(code) => return Ok(code),
            };
            let now = wall_clock();
            let (start, end, step) = match (
                parse_time(&args.start, now),
                parse_time(&args.end, now),
                parse_duration(&args.step),
            ) {
                (Ok(s), Ok(e), Ok(step)) if s <= e && step > 0 => (s, e, step),
                (Err(e), _, _) | (_, Err(e), _) => return Ok(bad_input(e)),
                (_, _, Err(e)) => return Ok(bad_input(format!("--step: {e}"))),
                _ => {
                    return Ok(bad_input(
                        "--start must not be after --end, and --step must be positive",
                    ));
                }
            };
            if (end - start) / step as i64 > 10_000 {
                return Ok(bad_input(
                    "the window has more than 10,000 steps; use a larger --step",
                ));
            }
            let providers = providers(&args.template)?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let points = runtime.block_on(live::backtest(&plan, &providers, start, end, step));
            let worst = points
                .iter()
                .map(|p| p.phase)
                .max_by_key(|p| p.severity())
                .unwrap_or_default();
            let mut stdout = std::io::stdout().lock();
            if args.output == Output::Json {
                writeln!(
                    stdout,
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({"points": points, "worst": worst})
                    )?
                )?;
            } else {
                for p in &points {
                    let flag = if matches!(
                        p.phase,
                        flotilla_core::spec::analysis::AnalysisPhase::Successful
                    ) {
                        " "
                    } else {
                        "!"
                    };
                    writeln!(
                        stdout,
                        "{flag} {}  {}  {}  {:?}{}",
                        format_time(p.at),
                        p.metric,
                        if p.value.is_empty() { "-" } else { &p.value },
                        p.phase,
                        if p.message.is_empty() {
                            String::new()
                        } else {
                            format!("  {}", p.message)
                        }
                    )?;
                }
                let failing = points
                    .iter()
                    .filter(|p| p.phase != flotilla_core::spec::analysis::AnalysisPhase::Successful)
                    .count();
                writeln!(
                    stdout,
                    "{} evaluation(s), {failing} would not have passed",
                    points.len()
                )?;
            }
            Ok(ExitCode::from(match worst {
                flotilla_core::spec::analysis::AnalysisPhase::Successful => 0,
                flotilla_core::spec::analysis::AnalysisPhase::Failed => 1,
                flotilla_core::spec::analysis::AnalysisPhase::Error => 3,
                _ => 2,
            }))
        }
    }
}

/// Parses a time: RFC 3339, Unix seconds, `now`, or `now-<Go duration>`.
fn parse_time(text: &str, now: Millis) -> Result<Millis, String> {
    let text = text.trim();
    if text == "now" {
        return Ok(now);
    }
    if let Some(ago) = text.strip_prefix("now-") {
        return parse_duration(ago)
            .map(|d| now - d as Millis)
            .map_err(|e| format!("{text:?}: {e}"));
    }
    if let Ok(seconds) = text.parse::<f64>() {
        return Ok((seconds * 1000.0) as Millis);
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.timestamp_millis())
        .map_err(|e| format!("{text:?} is not RFC 3339, Unix seconds or now-<duration>: {e}"))
}
