//! Looking at a run without changing it: `plan` (what a run would do),
//! `status` (where a run stands) and `report` (a run drawn), with the cost
//! figures they share.

pub(crate) mod cost_summary;
pub(crate) mod plan;
pub mod report;
pub mod status;
