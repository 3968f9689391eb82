//! `flotilla serve --config FILE`: the controller daemon. Validates its configuration and the
//! manifests before starting anything, prints one JSON line when the API listens, and runs
//! until SIGTERM or SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use flotilla_runtime::controller::{self, config::DaemonConfig};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The daemon's configuration (YAML); see docs/controller.md.
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Create the store over an existing empty file (a store that holds state is never
    /// replaced; an absent store is created at first start without this flag).
    #[arg(long)]
    init_store: bool,
}

/// The `MALLOC_ARENA_MAX` `flotilla serve` runs with unless its environment sets one.
///
/// glibc gives a thread that allocates while the others' arenas are busy an arena of its own (up
/// to 8 per core), and a controller's runtime and blocking threads keep their arenas' freed
/// pages: at 300 Kubernetes Rollouts the controller's peak RSS was 184.5 MiB with glibc's default
/// and 156.1 MiB (0.85x) with 2 arenas set here, at the same latency
/// (`benches/kubernetes_rollouts.rs`, 2026-12-06), while its live heap is a small part of either.
const MALLOC_ARENAS: &str = "2";

/// Runs this same command again, as this same process (`exec`), with [`MALLOC_ARENAS`] when the
/// environment sets no `MALLOC_ARENA_MAX` (glibc reads it only when the process starts). Returns
/// only when that cannot be done, and the daemon then runs with glibc's default.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn with_few_malloc_arenas() {
    use std::os::unix::process::CommandExt;
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let error = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("MALLOC_ARENA_MAX", MALLOC_ARENAS)
        .exec();
    eprintln!(
        "flotilla serve: cannot run again with MALLOC_ARENA_MAX={MALLOC_ARENAS} ({error}); glibc's default arenas"
    );
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn with_few_malloc_arenas() {}

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    with_few_malloc_arenas();
    let config = match DaemonConfig::load(&args.config) {
        Ok(mut c) => {
            c.init_store = args.init_store;
            c
        }
        Err(e) => {
            eprintln!("flotilla serve: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(async {
        let shutdown = async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("install the SIGTERM handler");
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        };
        controller::serve(config, shutdown, |address| {
            println!(
                "{}",
                serde_json::json!({"event": "listening", "api": address.to_string()})
            );
        })
        .await
    });
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("flotilla serve: {e}");
            Ok(ExitCode::from(2))
        }
    }
}
