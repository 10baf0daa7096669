//! End-to-end tests: the real `daisy-driver` binary, real user processes,
//! real files. One test binary (as in ripgrep); `util` holds the harness.

mod batching;
mod browser;
mod chaos;
mod cluster;
mod costs;
mod daisy2_compat;
mod dashboard;
mod distributed;
mod failures;
mod found_done;
mod listen;
mod netns;
mod plan;
mod plan_cluster;
mod port;
mod preemption;
mod programs;
mod protocol;
mod proxy;
mod python_worker;
mod report;
mod resource_slots;
mod resources;
mod restarts;
mod retries;
mod run_dir;
mod serial;
mod skip_mask;
mod status;
mod summary;
mod user_processes;
mod util;
