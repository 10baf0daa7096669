//! A run: the distributed one (a block server, workers started through
//! launchers, one run loop) and the serial one (blocks one at a time in
//! process), with what both share: the budget and the worker slots it is
//! counted by, progress and the summary, and the checks before anything
//! starts.

pub(crate) mod budget;
pub mod context;
pub(crate) mod distributed;
pub mod embedding;
pub(crate) mod launching;
pub mod output;
pub(crate) mod program_check;
pub(crate) mod recent_rate;
pub mod resource_env;
pub(crate) mod retry;
pub(crate) mod serial;
pub(crate) mod slots;
