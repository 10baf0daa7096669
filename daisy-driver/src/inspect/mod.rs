//! Looking at a run without changing it: `plan` (what a run would do),
//! `status` (where a run stands), `report` (a run drawn) and the live
//! `dashboard` (`run --dashboard`: status and report, served), with the
//! model of a run directory they share (`run_state`, which `run
//! --retry-failed` also asks) and the cost figures.

pub(crate) mod cost_summary;
pub(crate) mod dashboard;
pub(crate) mod plan;
pub mod report;
pub(crate) mod run_state;
pub mod status;
