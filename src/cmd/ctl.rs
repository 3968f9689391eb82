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
    /// Talk to a hub's API server instead of the daemon's API (a controller with
    /// `hub.state: hub`): commands become FleetCommand objects, the history and progress are
    /// read from the hub.
    #[arg(long, env = "FLOTILLA_HUB_KUBECONFIG", global = true)]
    kubeconfig: Option<PathBuf>,
    /// With --kubeconfig: its context (default: its current one).
    #[arg(long, global = true, requires = "kubeconfig")]
    context: Option<String>,
    /// With --kubeconfig: the namespace of the FleetRollouts in the hub.
    #[arg(long, global = true, default_value = "flotilla")]
    hub_namespace: String,
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
    /// Wait until the fleet rollout completes (exit 0), completes with clusters skipped (exit
    /// 4) or halts or aborts (exit 1); exit 3 on timeout.
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

/// `list`'s output.
fn print_list(
    list: &[flotilla_runtime::controller::record::FleetSummary],
    output: Output,
) -> anyhow::Result<()> {
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
    Ok(())
}

/// `history`'s output.
fn print_history(
    entries: &[flotilla_runtime::controller::record::AuditEntry],
    output: Output,
) -> anyhow::Result<()> {
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
    Ok(())
}

/// `status`: prints each new line `read` gives until the phase is final; exit 0 completed, 1
/// halted or aborted, 4 completed with skips, 3 on timeout.
async fn follow_status<F, Fut>(name: &str, timeout: u64, mut read: F) -> anyhow::Result<ExitCode>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<(String, String)>>,
{
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let mut last = String::new();
    loop {
        let (line, phase) = read().await?;
        if line != last {
            println!("{line}");
            last = line;
        }
        match phase.as_str() {
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

/// Runs a verb.
pub fn run(verb: Verb, server: Server) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    if let Some(kubeconfig) = &server.kubeconfig {
        return runtime.block_on(hub::run(
            verb,
            &kubeconfig.display().to_string(),
            server.context.as_deref(),
            &server.hub_namespace,
        ));
    }
    let client = server.client()?;
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
                print_list(&client.list().await?, output)?;
                return Ok(ExitCode::SUCCESS);
            }
            Verb::History { name, output } => {
                print_history(&client.history(&name).await?, output)?;
                return Ok(ExitCode::SUCCESS);
            }
            Verb::Status { name, timeout } => {
                return follow_status(&name, timeout, || async {
                    let fleet = client.fleet(&name).await?;
                    let line = format!(
                        "{} - wave {}/{}: {}",
                        fleet.phase,
                        fleet.wave,
                        fleet.waves.len(),
                        fleet.message
                    );
                    Ok((line, fleet.phase))
                })
                .await;
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

/// The command a mutating verb sends, with its FleetRollout (None: not a command).
fn command_of(verb: &Verb) -> Option<(String, OperatorCommand)> {
    Some(match verb {
        Verb::Promote { name, wave, full } => (
            name.clone(),
            OperatorCommand::Promote {
                wave: *wave,
                full: *full,
            },
        ),
        Verb::Abort { name, cluster } => (
            name.clone(),
            OperatorCommand::Abort {
                cluster: cluster.clone(),
            },
        ),
        Verb::Retry { name } => (name.clone(), OperatorCommand::Retry),
        Verb::Pause { name } => (name.clone(), OperatorCommand::Pause),
        Verb::Resume { name } => (name.clone(), OperatorCommand::Resume),
        Verb::Undo { name, to_revision } => (
            name.clone(),
            OperatorCommand::Undo {
                to_revision: *to_revision,
            },
        ),
        Verb::Set(SetCommand::Image { name, image }) => {
            let (container, image) = match image.split_once('=') {
                Some((c, i)) => (Some(c.to_owned()), i.to_owned()),
                None => (None, image.clone()),
            };
            (name.clone(), OperatorCommand::SetImage { container, image })
        }
        _ => return None,
    })
}

/// A FleetRollout's status summary (as the controller writes it in a hub), for humans.
fn render_status(name: &str, status: &serde_json::Value) -> String {
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("").to_owned();
    let mut out = format!(
        "Fleet rollout: {name}\nPhase:         {} {}\nImage:         {} (previous {})\nWave:          {}\n",
        text(&status["phase"]),
        text(&status["message"]),
        text(&status["image"]),
        text(&status["previousImage"]),
        text(&status["wave"]),
    );
    let counts: Vec<String> = status["clusters"]["counts"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(phase, n)| format!("{phase} {n}"))
        .collect();
    out.push_str(&format!(
        "Clusters:      {} ({})\n",
        status["clusters"]["total"],
        counts.join(", ")
    ));
    for cluster in status["clusters"]["named"].as_array().into_iter().flatten() {
        let failure = &cluster["failure"];
        out.push_str(&format!(
            "  {:<24} {:<12} wave {} {}{}\n",
            text(&cluster["name"]),
            text(&cluster["status"]),
            cluster["wave"],
            text(&cluster["reason"]),
            if failure.is_null() {
                String::new()
            } else {
                format!(
                    " ({} = {})",
                    text(&failure["metric"]),
                    text(&failure["value"])
                )
            }
        ));
    }
    for error in status["errors"].as_array().into_iter().flatten() {
        out.push_str(&format!("Error:         {}\n", text(error)));
    }
    out
}

/// The verbs against a hub's API server (`--kubeconfig`).
mod hub {
    use super::*;
    use flotilla_runtime::controller::hub_client::{HubClient, Outcome};

    pub async fn run(
        verb: Verb,
        kubeconfig: &str,
        context: Option<&str>,
        namespace: &str,
    ) -> anyhow::Result<ExitCode> {
        match &verb {
            Verb::Get(GetCommand::Fleet { watch: true, .. }) => anyhow::bail!(
                "get fleet --watch is not available with --kubeconfig: use `flotilla status NAME --kubeconfig …` or `kubectl get fleetrollout NAME -w`"
            ),
            Verb::Get(GetCommand::Rollout { .. }) => anyhow::bail!(
                "get rollout is not available with --kubeconfig: a cluster's rollout is in its spoke (`kubectl argo rollouts get rollout NAME` there)"
            ),
            Verb::Sync => anyhow::bail!(
                "sync is not available with --kubeconfig: the controller watches the hub, there is nothing to read sooner"
            ),
            _ => {}
        }
        let client = HubClient::connect(kubeconfig, context, namespace).await?;
        if let Some((name, command)) = command_of(&verb) {
            let operator = std::env::var("USER").unwrap_or_else(|_| "operator".into());
            let created = client.command(&name, &command, &operator).await?;
            println!("fleetcommand/{created} created in namespace {namespace}");
            return Ok(
                match client.wait(&created, Duration::from_secs(15)).await? {
                    Outcome::Done { phase, message } if phase == "Consumed" => {
                        println!("{phase}: {message}");
                        ExitCode::SUCCESS
                    }
                    Outcome::Done { phase, message } => {
                        eprintln!("{phase}: {message}");
                        ExitCode::from(1)
                    }
                    Outcome::Pending => {
                        println!(
                            "not consumed yet: it is applied, once, when the controller runs (kubectl get fleetcommand {created} -n {namespace})"
                        );
                        ExitCode::SUCCESS
                    }
                },
            );
        }
        match verb {
            Verb::List { output } => print_list(&client.list().await?, output)?,
            Verb::Get(GetCommand::Fleet { name, output, .. }) => {
                let status = client.status(&name).await?;
                match output {
                    Output::Json => print_json(&status)?,
                    Output::Text => print!("{}", render_status(&name, &status)),
                }
            }
            Verb::History { name, output } => print_history(&client.history(&name).await?, output)?,
            Verb::Status { name, timeout } => {
                return follow_status(&name, timeout, || async {
                    let status = client.status(&name).await?;
                    let text = |f: &str| {
                        status
                            .get(f)
                            .and_then(|v| v.as_str())
                            .unwrap_or("")
                            .to_owned()
                    };
                    let line = format!(
                        "{} - wave {}: {}",
                        text("phase"),
                        text("wave"),
                        text("message")
                    );
                    Ok((line, text("phase")))
                })
                .await;
            }
            // The commands were sent above; the rest were refused before connecting.
            _ => {}
        }
        Ok(ExitCode::SUCCESS)
    }
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
