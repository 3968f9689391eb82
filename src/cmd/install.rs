//! `flotilla install`: print the manifests that install Flotilla in a hub cluster, or with
//! `--spoke` the ServiceAccount and Role it needs in a spoke, for `kubectl apply -f -`.
//! Exit codes: 0 printed, 2 bad options (nothing printed).

use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use flotilla_runtime::controller::backends::install::{self, HubInstall};

#[derive(Debug, Args)]
pub struct InstallArgs {
    /// Flotilla's namespace (the hub: the daemon and the Fleets, FleetRollouts, Rollouts and
    /// templates; a spoke: the Rollouts' namespace there).
    #[arg(long, default_value = "flotilla")]
    namespace: String,
    /// The spoke Secrets' namespace in the hub (Argo CD's, or one of Flotilla's own).
    #[arg(long, default_value = "argocd", conflicts_with = "spoke")]
    spoke_namespace: String,
    /// The container image with the `flotilla` binary on its PATH (the hub's Deployment).
    #[arg(long, required_unless_present = "spoke", conflicts_with = "spoke")]
    image: Option<String>,
    /// A credential plugin spoke Secrets may run (`hub.execAllowlist`), as they name it.
    #[arg(long = "allow-exec", value_name = "COMMAND", conflicts_with = "spoke")]
    allow_exec: Vec<String>,
    /// Print a spoke's ServiceAccount, Role and RoleBinding instead (for the namespace of its
    /// Rollouts).
    #[arg(long)]
    spoke: bool,
    /// With --spoke: a Secret the AnalysisTemplates read there (`secretKeyRef`); none: the Role
    /// reads no Secret.
    #[arg(long = "secret", value_name = "NAME", requires = "spoke")]
    secrets: Vec<String>,
}

pub fn run(args: InstallArgs) -> anyhow::Result<ExitCode> {
    let printed = if args.spoke {
        install::spoke(&args.namespace, &args.secrets)
    } else {
        install::hub(&HubInstall {
            namespace: args.namespace,
            spoke_namespace: args.spoke_namespace,
            image: args.image.unwrap_or_default(),
            exec_allowlist: args.allow_exec,
        })
    };
    match printed {
        Ok(yaml) => {
            std::io::stdout().lock().write_all(yaml.as_bytes())?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("flotilla install: {e}");
            Ok(ExitCode::from(2))
        }
    }
}
