//! Looking at a run without changing it: `plan` (what a run would do),
//! `status` (where a run stands), `report` (a run drawn) and the live
//! `dashboard` (`run --dashboard`: status and report, served), with what
//! the last three share: each task's state ([`task_status`]), the cost
//! figures and the numbers for people ([`human`]). That model is built
//! from [`crate::run_dir::run_state`], a layer down, which `run
//! --retry-failed` asks too.

pub(crate) mod cost_summary;
pub(crate) mod dashboard;
pub(crate) mod human;
pub(crate) mod plan;
pub mod report;
pub mod status;
pub(crate) mod task_status;
