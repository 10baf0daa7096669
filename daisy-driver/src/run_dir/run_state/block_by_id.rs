//! The block of a task with a given spatial id, found by inverting the
//! id's Cantor number (see [`daisy_core::block::cantor_number`]) instead
//! of walking every block of the task: `status`, `report` and
//! `--retry-failed` look up the blocks that failed, which are few, in
//! tasks that may have 10⁸ blocks.

use daisy_core::{Block, Coordinate, DependencyGraph, TaskIdx};

/// The block `spatial` of `task`, or `None` if the task has none by that
/// id (an id from events of an edited pipeline).
pub fn block_by_id(graph: &DependencyGraph, task: TaskIdx, spatial: u64) -> Option<Block> {
    let task_graph = graph.task_graph(task);
    let grid = task_graph.grid();
    let write = grid.write_shape;
    let index = grid_index(spatial, write.dims())?;
    // The id numbers where the write region sits in the total READ region;
    // the grid counts positions from the total write region, in steps of
    // the write shape.
    let context = grid.total_write.offset() - grid.total_read.offset();
    let steps = index.zip_with(&context.zip_with(&write, i64::div_euclid), |i, q| i - q);
    let block = grid.block_at(steps.zip_with(&write, |s, w| s * w))?;
    let found = block.id.spatial == spatial && task_graph.level_of(&block).is_some();
    found.then_some(block)
}

/// The grid index whose Cantor number in `dims` dimensions is `id`: the
/// number adds `C(S_n + n, n + 1)` for each dimension `n` > 0, `S_n`
/// being the sum of the first `n + 1` components, and then `S_0`.
fn grid_index(id: u64, dims: usize) -> Option<Coordinate> {
    let mut rest = u128::from(id);
    let mut sums = vec![0u128; dims];
    for n in (1..dims).rev() {
        let n = n as u128;
        let sum = largest_with_volume_at_most(n + 1, rest);
        rest -= simplex_volume(n + 1, sum)?;
        sums[n as usize] = sum;
    }
    sums[0] = rest;
    let mut index = Vec::with_capacity(dims);
    let mut before = 0;
    for sum in sums {
        index.push(i64::try_from(sum.checked_sub(before)?).ok()?);
        before = sum;
    }
    Some(Coordinate::new(&index))
}

/// The largest `s` with `simplex_volume(dims, s) <= volume`.
fn largest_with_volume_at_most(dims: u128, volume: u128) -> u128 {
    let fits = |s: u128| simplex_volume(dims, s).is_some_and(|v| v <= volume);
    let mut high = 1;
    while fits(high) {
        high *= 2;
    }
    let mut low = 0; // fits(0): the volume of 0 is 0
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        if fits(middle) {
            low = middle;
        } else {
            high = middle;
        }
    }
    low
}

/// `C(edge + dims - 1, dims)`, the number of grid points with coordinate
/// sum below `edge` in `dims` dimensions; `None` beyond u128.
fn simplex_volume(dims: u128, edge: u128) -> Option<u128> {
    if edge == 0 {
        return Some(0);
    }
    let mut volume: u128 = 1;
    for d in 0..dims {
        volume = volume.checked_mul(edge + d)? / (d + 1);
    }
    Some(volume)
}

#[cfg(test)]
mod tests {
    use super::*;
    use daisy_core::block::cantor_number;

    fn graph(tasks: &str) -> DependencyGraph {
        let pipeline = crate::pipeline::Pipeline::from_str(
            tasks,
            std::path::Path::new("p.toml"),
            crate::pipeline::python_worker::PYTHON_ON_PATH,
        );
        pipeline.unwrap().graph()
    }

    #[test]
    fn grid_indices_invert_cantor_numbers() {
        for dims in 1..=8 {
            for values in [
                [0, 0, 0, 0, 0, 0, 0, 0],
                [3, 1, 4, 1, 5, 9, 2, 6],
                [100, 0, 7, 0, 0, 1, 0, 2],
            ] {
                let index = Coordinate::new(&values[..dims]);
                let id = cantor_number(&index);
                assert_eq!(grid_index(id, dims), Some(index), "{dims} dims, id {id}");
            }
        }
        let big = Coordinate::new(&[464, 463, 2]);
        assert_eq!(grid_index(cantor_number(&big), 3), Some(big));
    }

    #[test]
    fn every_block_is_found_by_its_id_and_no_other_id_finds_one() {
        let graph = graph(
            r#"
            name = "p"
            [[task]]
            id = "context"
            total_roi = { offset = [-3, 5, 0], shape = [50, 43, 29] }
            read_roi = { offset = [0, 0, 0], shape = [12, 12, 12] }
            write_roi = { offset = [2, 3, 1], shape = [8, 7, 9] }
            block_command = ["true"]
            [[task]]
            id = "shrunk"
            total_roi = { offset = [0, 0], shape = [45, 38] }
            read_roi = { offset = [-2, -2], shape = [14, 14] }
            write_roi = { offset = [0, 0], shape = [10, 10] }
            fit = "shrink"
            read_write_conflict = false
            block_command = ["true"]
            "#,
        );
        for task in graph.task_indices() {
            let blocks: Vec<Block> = graph.task_graph(task).all_blocks().collect();
            assert!(blocks.len() > 10, "{}", blocks.len());
            for block in &blocks {
                assert_eq!(block_by_id(&graph, task, block.id.spatial), Some(*block));
            }
            let ids: std::collections::HashSet<u64> = blocks.iter().map(|b| b.id.spatial).collect();
            let largest = *ids.iter().max().unwrap();
            for id in (0..largest + 50).filter(|id| !ids.contains(id)) {
                assert_eq!(block_by_id(&graph, task, id), None, "id {id}");
            }
        }
    }
}
