//! `daisy-worker`: sets up logging, parses the command line and hands over
//! to the library.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    daisy_worker::init_logging(daisy_worker::DEFAULT_LOG);
    ExitCode::from(daisy_worker::cli::main(daisy_worker::cli::Cli::parse()))
}
