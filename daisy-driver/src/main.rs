//! `daisy-driver`: parses the command line and hands over to the library.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match daisy_driver::cli::main(daisy_driver::cli::Cli::parse()) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("daisy-driver: error: {error:#}");
            ExitCode::from(2)
        }
    }
}
