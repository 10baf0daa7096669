//! `daisy-driver`: parses the command line and hands over to the library.

use clap::Parser;
use daisy_driver::cli::{Cli, Command};
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

/// Verbosity when RUST_LOG is unset: warnings and errors (a refused
/// connection, an event log that cannot be written, a worker that did not
/// start), never silence.
const DEFAULT_LOG: &str = "warn";

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default = match cli.command {
        Command::Worker { .. } => daisy_worker::DEFAULT_LOG,
        _ => DEFAULT_LOG,
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    match daisy_driver::cli::main(cli) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("daisy-driver: error: {error:#}");
            ExitCode::from(2)
        }
    }
}
