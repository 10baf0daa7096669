//! daisy-worker: runs user code on blocks.
//!
//! # Layout
//! - [`user_code`]: the two ways user code runs: a block command started
//!   once per block, or a long-running worker command fed JSON lines.
//!
//! The connection to the driver, the watchdog and the `daisy-worker`
//! binary come next (see DESIGN.md, "Workers and user code"); the serial
//! `daisy-driver run` already uses [`user_code`] in process.
pub mod user_code;
