//! Looking at a run without changing it: `plan` (what a run would do),
//! `status` (where a run stands), `report` (a run drawn) and the live
//! `dashboard` (`run --dashboard`: status and report, served), with the
//! cost figures and the numbers for people ([`human`]) they share. The
//! model of a run directory all of them read is
//! [`crate::run_dir::run_state`], a layer down, because `run
//! --retry-failed` asks it too.

pub(crate) mod cost_summary;
pub(crate) mod dashboard;
pub(crate) mod human;
pub(crate) mod plan;
pub mod report;
pub mod status;
