//! The `flotilla` command: parses arguments and dispatches to a command; the work lives in the
//! library crates.

mod cmd;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cmd::Cli::parse();
    match cmd::run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("flotilla: {error:#}");
            ExitCode::from(2)
        }
    }
}
