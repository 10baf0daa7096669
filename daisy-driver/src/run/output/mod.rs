//! What a run says to the people watching it: progress while it runs (bars
//! on a terminal, plain lines in files), the summary at its end with the
//! exit status it implies, and the one way both write to stdout without
//! ever ending a run because stdout went away.

pub(crate) mod progress;
pub(crate) mod stdout;
pub mod summary;
