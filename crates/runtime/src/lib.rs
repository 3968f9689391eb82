//! Flotilla's runtime: where the core meets the outside world. Today it reads manifest files for
//! lint; later it wires the adapters (agents, metrics providers, git, store) to the core engines.

pub mod analysis;
pub mod controller;
pub mod demo;
pub mod files;
