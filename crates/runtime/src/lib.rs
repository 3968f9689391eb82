//! Flotilla's runtime: where the core meets the outside world. It reads manifest files (lint,
//! analysis, overlays, secrets), runs analysis from the CLI, and wires the adapters (cluster
//! backends, metric providers, Git, the store) to the core's engines in the daemon
//! ([`controller`]).

pub mod analysis;
pub mod clock;
pub mod controller;
pub mod demo;
pub mod files;
pub mod overlays;
pub mod secrets;
