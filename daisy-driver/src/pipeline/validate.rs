//! Rules between fields and between tasks, which no single value shows.
//!
//! - The budget: a task whose `requires` exceeds the global budget on any
//!   key could never start a worker, so the file is refused up front
//!   (DESIGN "Resource budget").
//! - Links: ids are unique (done markers and logs are kept per id), every
//!   upstream id names another task of the same dimension, and the
//!   upstream relation has no cycle (its tasks could never start). Each
//!   cycle is reported with the tasks on it.

use super::problems::{hint, Problem, Subject};
use super::resolve::TaskDraft;
use super::schema::Amounts;
use daisy_core::TaskIdx;
use std::collections::hash_map::Entry;
use std::collections::HashMap;

/// What is wrong with a task's `requires` against the global `budget`:
/// one message for the keys the budget has too little of, then one per
/// key it lacks. An amount of 0 always fits.
pub(super) fn budget_problems(requires: &Amounts, budget: &Amounts) -> Vec<String> {
    let short: Vec<(&str, u64, u64)> = (requires.iter())
        .filter_map(|(key, &need)| Some((key.as_str(), need, *budget.get(key)?)))
        .filter(|&(_, need, have)| need > have)
        .collect();
    let mut messages = Vec::new();
    if !short.is_empty() {
        let need = braces(short.iter().map(|&(key, need, _)| (key, need)));
        let have = braces(short.iter().map(|&(key, _, have)| (key, have)));
        messages.push(format!(
            "requires {need} but the global budget only has {have}"
        ));
    }
    for (key, need) in requires {
        if *need > 0 && !budget.contains_key(key) {
            messages.push(format!(
                "requires {{{key}: {need}}} but the global budget has no {key}"
            ));
        }
    }
    messages
}

/// `{cpu: 4, gpu: 1}`
fn braces<'k>(amounts: impl Iterator<Item = (&'k str, u64)>) -> String {
    let entries: Vec<String> = amounts
        .map(|(key, amount)| format!("{key}: {amount}"))
        .collect();
    format!("{{{}}}", entries.join(", "))
}

/// Resolves upstream ids to task positions, written into each config's
/// `spec.upstream`, and reports duplicate ids, bad upstream entries,
/// dimension mismatches along upstream links, and cycles.
pub(super) fn link_tasks(drafts: &mut [TaskDraft], problems: &mut Vec<Problem>) {
    let links = Links::new(drafts, problems);
    let edges: Vec<Vec<usize>> = (drafts.iter())
        .map(|draft| links.upstream_of(draft, problems))
        .collect();
    for cycle in cycles(edges.clone()) {
        problems.push(Subject::Pipeline.problem("upstream", cycle_message(&cycle, drafts)));
    }
    for (draft, upstream) in drafts.iter_mut().zip(edges) {
        if let Some(config) = &mut draft.config {
            config.spec.upstream = upstream.into_iter().map(|i| TaskIdx(i as u32)).collect();
        }
    }
}

/// The tasks by id, to resolve upstream entries against.
struct Links<'d> {
    drafts: &'d [TaskDraft],
    /// Each id's first task; a later task with the same id is a problem.
    positions: HashMap<&'d str, usize>,
}

impl<'d> Links<'d> {
    fn new(drafts: &'d [TaskDraft], problems: &mut Vec<Problem>) -> Self {
        let mut positions = HashMap::new();
        for (i, draft) in drafts.iter().enumerate() {
            let Some(id) = draft.id.as_deref() else {
                continue;
            };
            match positions.entry(id) {
                Entry::Vacant(entry) => {
                    entry.insert(i);
                }
                Entry::Occupied(first) => {
                    let message = format!(
                        "id = {id:?} is already the id of [[task]] #{}",
                        first.get() + 1
                    );
                    problems.push(draft.problem("id", message));
                }
            }
        }
        Self { drafts, positions }
    }

    /// The positions of `draft`'s upstream tasks; entries that name no
    /// other task, or name one twice, are reported and left out.
    fn upstream_of(&self, draft: &TaskDraft, problems: &mut Vec<Problem>) -> Vec<usize> {
        let mut upstream = Vec::new();
        for name in &draft.upstream {
            let problem = match self.positions.get(name.as_str()) {
                _ if draft.id.as_ref() == Some(name) => {
                    Some(format!("upstream lists {name:?}, the task itself"))
                }
                None => {
                    let ids = self.drafts.iter().filter_map(|d| d.id.as_deref());
                    Some(format!(
                        "upstream task {name:?} does not exist{}",
                        hint(name, ids)
                    ))
                }
                Some(i) if upstream.contains(i) => Some(format!("upstream lists {name:?} twice")),
                Some(&i) => {
                    upstream.push(i);
                    dimension_problem(draft, &self.drafts[i], name)
                }
            };
            if let Some(message) = problem {
                problems.push(draft.problem("upstream", message));
            }
        }
        upstream
    }
}

/// Blocks of a task are matched to upstream blocks by overlapping ROIs,
/// which needs the same number of dimensions.
fn dimension_problem(draft: &TaskDraft, upstream: &TaskDraft, name: &str) -> Option<String> {
    let (Some(dims), Some(upstream_dims)) = (draft.dims, upstream.dims) else {
        return None;
    };
    (dims != upstream_dims).then(|| {
        format!("upstream task {name:?} has {upstream_dims} dimensions but this task has {dims}")
    })
}

fn cycle_message(cycle: &[usize], drafts: &[TaskDraft]) -> String {
    let names: Vec<String> = (cycle.iter().chain(cycle.first()))
        .map(|&i| format!("{:?}", drafts[i].id.as_deref().unwrap_or_default()))
        .collect();
    format!(
        "upstream forms a cycle: {} (each task lists the next as upstream)",
        names.join(" -> ")
    )
}

/// Every cycle of the graph with `edges[i]` the successors of `i`, each
/// as the nodes along it. Once found, a cycle's nodes lose their edges so
/// it is not found again; a cycle sharing one of them shows up once the
/// first is fixed.
fn cycles(mut edges: Vec<Vec<usize>>) -> Vec<Vec<usize>> {
    let mut found = Vec::new();
    while let Some(cycle) = find_cycle(&edges) {
        for &node in &cycle {
            edges[node].clear();
        }
        found.push(cycle);
    }
    found
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Visit {
    New,
    /// On the current depth-first path.
    Open,
    Done,
}

/// The nodes of some cycle, in edge order; iterative depth-first search,
/// so long upstream chains cannot overflow the stack.
fn find_cycle(edges: &[Vec<usize>]) -> Option<Vec<usize>> {
    let mut visits = vec![Visit::New; edges.len()];
    for start in 0..edges.len() {
        if visits[start] != Visit::New {
            continue;
        }
        visits[start] = Visit::Open;
        let mut path = vec![(start, 0)];
        while let Some((node, next_edge)) = path.last_mut() {
            let node = *node;
            let next = edges[node].get(*next_edge).copied();
            *next_edge += 1;
            match next.map(|next| (next, visits[next])) {
                None => {
                    visits[node] = Visit::Done;
                    path.pop();
                }
                Some((next, Visit::Open)) => {
                    let on_path = path.iter().map(|&(node, _)| node);
                    return Some(on_path.skip_while(|&node| node != next).collect());
                }
                Some((next, Visit::New)) => {
                    visits[next] = Visit::Open;
                    path.push((next, 0));
                }
                Some((_, Visit::Done)) => {}
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::tests::{assert_has, problems, task};
    use crate::pipeline::Pipeline;
    use std::path::Path;

    fn amounts(entries: &[(&str, u64)]) -> Amounts {
        entries.iter().map(|&(k, v)| (k.to_string(), v)).collect()
    }

    #[test]
    fn budget_lists_only_the_offending_keys() {
        let budget = amounts(&[("cpu", 8), ("gpu", 2), ("mem", 64)]);
        let requires = amounts(&[
            ("cpu", 16),
            ("gpu", 2),
            ("mem", 128),
            ("tpu", 1),
            ("fpga", 0),
        ]);
        assert_eq!(
            budget_problems(&requires, &budget),
            [
                "requires {cpu: 16, mem: 128} but the global budget only has {cpu: 8, mem: 64}",
                "requires {tpu: 1} but the global budget has no tpu",
            ]
        );
        assert!(budget_problems(&amounts(&[("gpu", 2)]), &budget).is_empty());
        assert!(budget_problems(&Amounts::new(), &Amounts::new()).is_empty());
    }

    #[test]
    fn cycles_are_found_with_their_nodes() {
        assert_eq!(find_cycle(&[vec![1], vec![2], vec![]]), None);
        assert_eq!(
            find_cycle(&[vec![1], vec![2], vec![0]]),
            Some(vec![0, 1, 2])
        );
        assert_eq!(find_cycle(&[vec![1], vec![2], vec![1]]), Some(vec![1, 2]));
        let two = cycles(vec![vec![1], vec![0], vec![3], vec![2], vec![0]]);
        assert_eq!(two, [vec![0, 1], vec![2, 3]]);
        let chain: Vec<Vec<usize>> = (0..100_000).map(|i| vec![i + 1]).chain([vec![0]]).collect();
        assert_eq!(find_cycle(&chain).map(|c| c.len()), Some(100_001));
    }

    #[test]
    fn upstream_entries_must_name_other_tasks() {
        let text = format!(
            "name = \"p\"\n{}{}{}",
            task("predict", ""),
            task(
                "relabel",
                "upstream = [\"predcit\", \"relabel\", \"predict\", \"predict\"]"
            ),
            task("merge", "upstream = [\"relabel\"]"),
        );
        let found = problems(&text);
        assert_eq!(
            found,
            [
                r#"task "relabel": upstream task "predcit" does not exist (did you mean "predict"?)"#,
                r#"task "relabel": upstream lists "relabel", the task itself"#,
                r#"task "relabel": upstream lists "predict" twice"#,
            ]
        );
    }

    #[test]
    fn every_cycle_is_named() {
        let text = format!(
            "name = \"p\"\n{}{}{}{}{}",
            task("a", "upstream = [\"c\"]"),
            task("b", "upstream = [\"a\"]"),
            task("c", "upstream = [\"b\"]"),
            task("x", "upstream = [\"y\"]"),
            task("y", "upstream = [\"x\", \"a\"]"),
        );
        let found = problems(&text);
        let note = "(each task lists the next as upstream)";
        assert_has(
            &found,
            &format!(r#"upstream forms a cycle: "a" -> "c" -> "b" -> "a" {note}"#),
        );
        assert_has(
            &found,
            &format!(r#"upstream forms a cycle: "x" -> "y" -> "x" {note}"#),
        );
        assert_eq!(found.len(), 2);
    }

    #[test]
    fn upstream_resolves_to_positions() {
        let text = format!(
            "name = \"p\"\n{}{}{}",
            task("c", "upstream = [\"b\", \"a\"]"),
            task("a", ""),
            task("b", "upstream = [\"a\"]"),
        );
        let pipeline = Pipeline::from_str(
            &text,
            Path::new("p.toml"),
            crate::pipeline::python_worker::PYTHON_ON_PATH,
        )
        .unwrap();
        let upstream: Vec<Vec<TaskIdx>> = pipeline
            .tasks
            .iter()
            .map(|t| t.spec.upstream.clone())
            .collect();
        assert_eq!(
            upstream,
            [vec![TaskIdx(2), TaskIdx(1)], vec![], vec![TaskIdx(1)]]
        );
        assert_eq!(
            pipeline.graph().downstream_tasks(TaskIdx(1)),
            [TaskIdx(0), TaskIdx(2)]
        );
    }
}
