//! `daisy-worker`: sets up logging, parses the command line and hands over
//! to the library.

use clap::Parser;
use std::process::ExitCode;

/// Relaying a block allocates a dozen times; mimalloc's fast paths cost a
/// fraction of glibc's (docs/benchmarks.md, the relay).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    daisy_worker::init_logging(daisy_worker::DEFAULT_LOG);
    ExitCode::from(daisy_worker::cli::main(daisy_worker::cli::Cli::parse()))
}
