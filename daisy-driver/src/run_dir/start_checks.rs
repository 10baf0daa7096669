//! What `run` checks in the run directory before it writes anything
//! there, so that a refused run leaves it exactly as it was.

use crate::pipeline::Pipeline;
use crate::run_dir::done_marker::DoneMarker;
use crate::run_dir::reset::MarkerToDelete;
use crate::run_dir::RunDir;

/// Every done marker a run would open can be read as this pipeline's
/// layout (markers `resets` deletes first may be in any state). Opening
/// them for writing would create or refuse them only after
/// `pipeline.json` and the events were written.
pub fn check_markers(
    pipeline: &Pipeline,
    run_dir: &RunDir,
    resets: &[MarkerToDelete],
) -> anyhow::Result<()> {
    for task in &pipeline.tasks {
        if resets.iter().any(|m| m.task == task.spec.id) {
            continue;
        }
        DoneMarker::open_existing(&run_dir.done_marker(&task.spec.id), &task.spec)?;
    }
    Ok(())
}
