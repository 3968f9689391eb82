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

pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
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
