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
            // A closed pipe (`flotilla … | head`) is not a failure.
            if error.chain().any(|e| {
                e.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("flotilla: {error:#}");
            ExitCode::from(2)
        }
    }
}
