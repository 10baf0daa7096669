//! Property tests of the geometry rules (issue 11, item 10): any regions at
//! all, including empty, negative and huge ones, get an answer without a
//! panic, and every task the rules accept has blocks.

use daisy_core::geometry::geometry_problems;
use daisy_core::{Coordinate, DependencyGraph, Fit, Roi, TaskSpec};
use proptest::prelude::*;

/// Any i64 at all, or one near the sizes tasks really have, so that both
/// accepted and refused tasks come up often.
fn value() -> impl Strategy<Value = i64> {
    prop_oneof![4 => -3i64..=12, 1 => any::<i64>(), 1 => (1i64 << 40) - 2..=(1i64 << 40) + 2]
}

fn roi(dims: usize) -> impl Strategy<Value = Roi> {
    let coordinate = move || proptest::collection::vec(value(), dims);
    (coordinate(), coordinate())
        .prop_map(|(offset, shape)| Roi::new(Coordinate::new(&offset), Coordinate::new(&shape)))
}

fn any_task() -> impl Strategy<Value = TaskSpec> {
    (1usize..=3, 1usize..=3, 1usize..=3, 0usize..3).prop_flat_map(|(t, r, w, fit)| {
        (roi(t), roi(r), roi(w)).prop_map(move |(total, read, write)| TaskSpec {
            fit: [Fit::Valid, Fit::Overhang, Fit::Shrink][fit],
            ..TaskSpec::new("any", total, read, write)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn accepted_tasks_have_blocks_and_refused_ones_say_why(spec in any_task()) {
        let problems = geometry_problems(&spec);
        match DependencyGraph::new(vec![spec.clone()]) {
            Ok(graph) => {
                prop_assert!(problems.is_empty());
                let blocks = graph.task_graph(daisy_core::TaskIdx(0)).num_blocks();
                prop_assert!(blocks > 0, "{spec:?} was accepted with no blocks");
            }
            Err(error) => {
                prop_assert!(!problems.is_empty());
                prop_assert!(error.to_string().contains(&problems[0].message));
            }
        }
    }
}
