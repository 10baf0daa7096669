//! `daisy-driver`: parses the command line and hands over to the library.

use clap::Parser;
use daisy_driver::cli::{Cli, Command};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    daisy_worker::init_logging(match cli.command {
        Command::Worker { .. } => daisy_worker::DEFAULT_LOG,
        _ => daisy_worker::DRIVER_LOG,
    });
    ExitCode::from(daisy_driver::exit::status_of(daisy_driver::cli::main(cli)))
}
