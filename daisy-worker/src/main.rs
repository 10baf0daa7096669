//! `daisy-worker`: sets up logging, parses the command line and hands over
//! to the library.

use clap::Parser;
use std::io::IsTerminal;
use std::process::ExitCode;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(daisy_worker::DEFAULT_LOG));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colours on a terminal only: a launched worker's stderr is a file.
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    ExitCode::from(daisy_worker::cli::main(daisy_worker::cli::Cli::parse()))
}
