//! The verbs that talk to a running `flotilla serve`, with kubectl-argo-rollouts' names:
//! get, list, promote, abort, retry, pause, resume, undo, set image, status, history.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use flotilla_runtime::controller::client::ApiClient;
use flotilla_runtime::controller::record::OperatorCommand;

use super::view;

/// Where the server is and how to authenticate.
#[derive(Debug, Args, Clone)]
pub struct Server {
    /// The server's API.
    #[arg(
        long,
        env = "FLOTILLA_SERVER",
        default_value = "http://127.0.0.1:7070",
        global = true
    )]
    server: String,
    /// The server's token file (mutating verbs); or set FLOTILLA_TOKEN.
    #[arg(long, env = "FLOTILLA_TOKEN_FILE", global = true)]
    token_file: Option<PathBuf>,
}

impl Server {
    fn client(&self) -> anyhow::Result<ApiClient> {
        let token = match (&self.token_file, std::env::var("FLOTILLA_TOKEN").ok()) {
            (Some(path), _) => Some(
                std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read the token file {}", path.display()))?
                    .trim()
                    .to_owned(),
            ),
            (None, token) => token,
        };
        Ok(ApiClient::new(&self.server, token))
    }
}

/// Output formats of read commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Output {
    /// For humans.
    #[default]
    Text,
    /// JSON.
    Json,
}

#[derive(Debug, Subcommand)]
pub enum GetCommand {
    /// A fleet rollout: waves → clusters → step, weights, analysis.
    Fleet {
        /// The FleetRollout.
        name: String,
        /// Redraw as it changes (in place in a terminal; plain lines when piped).
        #[arg(long, short)]
        watch: bool,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
    },
    /// One cluster's rollout in detail.
    Rollout {
        /// The FleetRollout.
        name: String,
        /// The cluster.
        #[arg(long)]
        cluster: String,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
    },
}

#[derive(Debug, Subcommand)]
pub enum SetCommand {
    /// Set a container's image: a new fleet revision, rolled out in waves.
    Image {
        /// The FleetRollout.
        name: String,
        /// `CONTAINER=IMAGE`, or `IMAGE` for the first container.
        image: String,
    },
}

/// A verb of the CLI.
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Show a fleet rollout or a cluster's rollout.
    #[command(subcommand)]
    Get(GetCommand),
    /// List the fleet rollouts.
    List {
        /// Output format.
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
    },
    /// Skip the current bake or pause (`--full`: skip every remaining step of the wave).
    Promote {
        /// The FleetRollout.
        name: String,
        /// A 1-based wave (default: the current one).
        #[arg(long)]
        wave: Option<usize>,
        /// Skip every remaining step.
        #[arg(long)]
        full: bool,
    },
    /// Abort the fleet rollout, or one cluster's.
    Abort {
        /// The FleetRollout.
        name: String,
        /// Only this cluster.
        #[arg(long)]
        cluster: Option<String>,
    },
    /// Retry the failed clusters.
    Retry {
        /// The FleetRollout.
        name: String,
    },
    /// Start no new cluster or wave.
    Pause {
        /// The FleetRollout.
        name: String,
    },
    /// Resume a paused fleet rollout.
    Resume {
        /// The FleetRollout.
        name: String,
    },
    /// Roll the fleet to an earlier revision (default: the previous one).
    Undo {
        /// The FleetRollout.
        name: String,
        /// A revision number as `history` lists it.
        #[arg(long)]
        to_revision: Option<usize>,
    },
    /// Set an image.
    #[command(subcommand)]
    Set(SetCommand),
    /// Wait until the fleet rollout completes (exit 0) or halts or aborts (exit 1); exit 3 on
    /// timeout.
    Status {
        /// The FleetRollout.
        name: String,
        /// Give up after this long (seconds).
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Read the daemon's Git source now (instead of at its next poll).
    Sync,
    /// The audit log: every decision with its inputs.
    History {
        /// The FleetRollout.
        name: String,
        /// Output format.
        #[arg(long, short, value_enum, default_value_t)]
        output: Output,
    },
}

fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Runs a verb.
pub fn run(verb: Verb, server: Server) -> anyhow::Result<ExitCode> {
    let client = server.client()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let (name, command) = match verb {
            Verb::Get(GetCommand::Fleet {
                name,
                watch,
                output,
            }) => {
                if !watch {
                    let fleet = client.fleet(&name).await?;
                    match output {
                        Output::Json => print_json(&fleet)?,
                        Output::Text => print!("{}", view::render(&fleet)),
                    }
                    return Ok(ExitCode::SUCCESS);
                }
                return watch_fleet(&client, &name, output).await;
            }
            Verb::Get(GetCommand::Rollout {
                name,
                cluster,
                output,
            }) => {
                let rollout = client.rollout(&name, &cluster).await?;
                match output {
                    Output::Json => print_json(&rollout)?,
                    Output::Text => {
                        let fleet = client.fleet(&name).await?;
                        println!("Fleet rollout: {} ({})", fleet.name, fleet.image);
                        println!("Cluster:       {}", rollout.cluster.name);
                        println!(
                            "Status:        {} ({})",
                            rollout.cluster.rollout_phase, rollout.cluster.rollout_message
                        );
                        println!("Aborted:       {}", rollout.abort);
                        if !rollout.pause_conditions.is_empty() {
                            println!("Paused for:    {}", rollout.pause_conditions.join(", "));
                        }
                        println!("Revisions:");
                        for (number, hash, version) in &rollout.revisions {
                            let replicas = rollout.desired_replicas.get(number).copied();
                            println!(
                                "  revision:{number}  {hash}  {version}  replicas {}",
                                replicas.map_or("-".into(), |r| r.to_string())
                            );
                        }
                        let mut lines = String::new();
                        view::render_cluster(&mut lines, &rollout.cluster);
                        print!("{lines}");
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            Verb::List { output } => {
                let list = client.list().await?;
                match output {
                    Output::Json => print_json(&list)?,
                    Output::Text => {
                        println!(
                            "{:<24} {:<12} {:<8} {:<32} MESSAGE",
                            "NAME", "STATUS", "WAVE", "IMAGE"
                        );
                        for f in list {
                            println!(
                                "{:<24} {:<12} {:<8} {:<32} {}",
                                f.name,
                                f.phase,
                                format!("{}/{}", f.wave, f.waves),
                                f.image,
                                f.message
                            );
                        }
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            Verb::History { name, output } => {
                let entries = client.history(&name).await?;
                match output {
                    Output::Json => print_json(&entries)?,
                    Output::Text => {
                        for e in entries {
                            let operator = e
                                .operator
                                .as_ref()
                                .map(|o| format!(" (by {o})"))
                                .unwrap_or_default();
                            println!(
                                "{:>5}  {}  {:<9} {}{operator}",
                                e.seq, e.time, e.kind, e.message
                            );
                            for x in &e.evidence {
                                println!(
                                    "         {} {} = {} {}{}",
                                    x.cluster,
                                    x.metric,
                                    x.value,
                                    x.phase,
                                    if x.message.is_empty() {
                                        String::new()
                                    } else {
                                        format!(": {}", x.message)
                                    }
                                );
                            }
                        }
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            Verb::Status { name, timeout } => {
                let deadline = Instant::now() + Duration::from_secs(timeout);
                let mut last = String::new();
                loop {
                    let fleet = client.fleet(&name).await?;
                    let line = format!(
                        "{} - wave {}/{}: {}",
                        fleet.phase,
                        fleet.wave,
                        fleet.waves.len(),
                        fleet.message
                    );
                    if line != last {
                        println!("{line}");
                        last = line;
                    }
                    match fleet.phase.as_str() {
                        "Completed" => return Ok(ExitCode::SUCCESS),
                        "Halted" | "Aborted" => return Ok(ExitCode::from(1)),
                        // A skip is final, and no success.
                        "CompletedWithSkips" => return Ok(ExitCode::from(4)),
                        _ => {}
                    }
                    if Instant::now() >= deadline {
                        eprintln!("Error: fleet rollout {name:?} did not finish within {timeout}s");
                        return Ok(ExitCode::from(3));
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
            Verb::Sync => {
                println!("{}", client.sync().await?);
                return Ok(ExitCode::SUCCESS);
            }
            Verb::Promote { name, wave, full } => (name, OperatorCommand::Promote { wave, full }),
            Verb::Abort { name, cluster } => (name, OperatorCommand::Abort { cluster }),
            Verb::Retry { name } => (name, OperatorCommand::Retry),
            Verb::Pause { name } => (name, OperatorCommand::Pause),
            Verb::Resume { name } => (name, OperatorCommand::Resume),
            Verb::Undo { name, to_revision } => (name, OperatorCommand::Undo { to_revision }),
            Verb::Set(SetCommand::Image { name, image }) => {
                let (container, image) = match image.split_once('=') {
                    Some((c, i)) => (Some(c.to_owned()), i.to_owned()),
                    None => (None, image),
                };
                (name, OperatorCommand::SetImage { container, image })
            }
        };
        let message = client.command(&name, &command).await?;
        println!("{message}");
        Ok(ExitCode::SUCCESS)
    })
}

async fn watch_fleet(client: &ApiClient, name: &str, output: Output) -> anyhow::Result<ExitCode> {
    let terminal = std::io::stdout().is_terminal();
    let mut last = String::new();
    loop {
        let fleet = client.fleet(name).await?;
        let text = match output {
            Output::Json => serde_json::to_string(&fleet)?,
            Output::Text => view::render(&fleet),
        };
        if text != last {
            if terminal && output == Output::Text {
                print!("\x1b[H\x1b[2J{text}");
            } else {
                println!("{text}");
            }
            last = text;
        }
        if matches!(
            fleet.phase.as_str(),
            "Completed" | "CompletedWithSkips" | "Halted" | "Aborted"
        ) && !terminal
        {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
