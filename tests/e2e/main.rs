//! End-to-end tests: the real `daisy-driver` binary, real user processes,
//! real files. One test binary (as in ripgrep); `util` holds the harness.

mod plan;
mod run;
mod util;
