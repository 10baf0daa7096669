//! The global resource budget (`[resources]`), what running workers take
//! from it, and how many workers a task asks for: the rules the driver
//! starts workers by and `plan` simulates.
//!
//! A budget key holds ids, not just a count: `gpu = 4` is the GPUs `0` to
//! `3`, `gpu = [0, 2]` exactly those (see [`crate::pipeline`]). Every start
//! of a worker must first `try_allocate` the task's `requires`, which
//! hands it concrete ids (its [`Share`]: the GPUs it is told to use, the
//! cores it may be pinned to); the share comes back with `release` when
//! the worker's slot ends, so two live workers never hold the same id.
//! Submitted (queued) workers hold their share too, so a queue wait never
//! leads to over-submission. Startup validation already refused any task
//! that could not fit even alone.

use crate::pipeline::budget::Share;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct Budget {
    pools: BTreeMap<String, Pool>,
}

/// One key's ids and which of them are taken.
#[derive(Debug, Clone)]
struct Pool {
    ids: Vec<String>,
    taken: Vec<bool>,
    used: u64,
}

impl Pool {
    fn free(&self) -> u64 {
        self.ids.len() as u64 - self.used
    }

    /// The first `count` free ids, taken.
    fn take(&mut self, count: u64) -> Vec<String> {
        let free = (0..self.ids.len()).filter(|&at| !self.taken[at]);
        let chosen: Vec<usize> = free.take(count as usize).collect();
        for &at in &chosen {
            self.taken[at] = true;
        }
        self.used += chosen.len() as u64;
        chosen.into_iter().map(|at| self.ids[at].clone()).collect()
    }

    fn give_back(&mut self, ids: &[String]) {
        for id in ids {
            if let Some(at) = self.ids.iter().position(|known| known == id) {
                if std::mem::replace(&mut self.taken[at], false) {
                    self.used -= 1;
                }
            }
        }
    }
}

impl Budget {
    /// A budget of the given ids per key.
    pub fn new(ids: BTreeMap<String, Vec<String>>) -> Self {
        let pools = ids
            .into_iter()
            .map(|(key, ids)| {
                let taken = vec![false; ids.len()];
                (
                    key,
                    Pool {
                        ids,
                        taken,
                        used: 0,
                    },
                )
            })
            .collect();
        Self { pools }
    }

    /// Takes `requires` from the budget if all of it is available, and
    /// says which ids it took.
    pub fn try_allocate(&mut self, requires: &BTreeMap<String, u64>) -> Option<Share> {
        let fits = requires.iter().all(|(key, &need)| {
            need == 0 || self.pools.get(key).is_some_and(|pool| pool.free() >= need)
        });
        if !fits {
            return None;
        }
        let share = requires
            .iter()
            .filter(|(_, &need)| need > 0)
            .map(|(key, &need)| {
                let pool = self.pools.get_mut(key).expect("checked above");
                (key.clone(), pool.take(need))
            })
            .collect();
        Some(share)
    }

    /// Takes up to `wanted` shares of `requires`, as many as fit.
    pub fn allocate_up_to(&mut self, requires: &BTreeMap<String, u64>, wanted: u32) -> Vec<Share> {
        (0..wanted)
            .map_while(|_| self.try_allocate(requires))
            .collect()
    }

    /// Gives back what an earlier `try_allocate` took.
    pub fn release(&mut self, share: &Share) {
        for (key, ids) in share {
            if let Some(pool) = self.pools.get_mut(key) {
                pool.give_back(ids);
            }
        }
    }

    /// How much of each key is in use now.
    pub fn used(&self) -> BTreeMap<String, u64> {
        self.pools
            .iter()
            .map(|(key, pool)| (key.clone(), pool.used))
            .collect()
    }
}

/// Workers a task wants with `runnable` blocks (ready or being processed):
/// one per block, up to `max_workers`. More would only wait for blocks.
pub fn worker_demand(runnable: u64, max_workers: u32) -> u32 {
    runnable.min(u64::from(max_workers)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn map(items: &[(&str, u64)]) -> BTreeMap<String, u64> {
        items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    /// A budget whose keys hold the ids `0` to `n - 1`.
    fn counted(items: &[(&str, u64)]) -> Budget {
        let ids = |n: u64| (0..n).map(|id| id.to_string()).collect();
        Budget::new(
            items
                .iter()
                .map(|(k, n)| (k.to_string(), ids(*n)))
                .collect(),
        )
    }

    fn ids(share: &Share, key: &str) -> Vec<String> {
        share.get(key).cloned().unwrap_or_default()
    }

    #[test]
    fn allocations_never_exceed_the_budget_and_come_back() {
        let mut budget = counted(&[("cpu", 4), ("gpu", 1)]);
        let gpu_job = map(&[("cpu", 1), ("gpu", 1)]);
        let first = budget.try_allocate(&gpu_job).unwrap();
        assert!(
            budget.try_allocate(&gpu_job).is_none(),
            "the only gpu is taken"
        );
        assert_eq!(
            budget.used(),
            map(&[("cpu", 1), ("gpu", 1)]),
            "a refusal takes nothing"
        );
        let cpu_job = map(&[("cpu", 3)]);
        assert!(budget.try_allocate(&cpu_job).is_some());
        assert!(budget.try_allocate(&map(&[("cpu", 1)])).is_none());
        budget.release(&first);
        assert!(budget.try_allocate(&map(&[("cpu", 1)])).is_some());
        assert_eq!(
            budget.try_allocate(&BTreeMap::new()),
            Some(Share::new()),
            "nothing required always fits"
        );
        assert!(
            budget.try_allocate(&map(&[("fpga", 1)])).is_none(),
            "an unknown key has none"
        );
    }

    #[test]
    fn a_share_names_the_first_free_ids_in_the_order_given() {
        let listed = ["3", "1", "7"].map(String::from).to_vec();
        let mut budget = Budget::new([("gpu".to_string(), listed)].into());
        let one = map(&[("gpu", 1)]);
        let a = budget.try_allocate(&one).unwrap();
        let b = budget.try_allocate(&one).unwrap();
        assert_eq!(
            (ids(&a, "gpu"), ids(&b, "gpu")),
            (vec!["3".to_string()], vec!["1".to_string()])
        );
        budget.release(&a);
        let c = budget.try_allocate(&map(&[("gpu", 2)])).unwrap();
        assert_eq!(
            ids(&c, "gpu"),
            ["3", "7"],
            "the id given back is taken again"
        );
    }

    #[test]
    fn allocate_up_to_takes_what_fits_and_no_more() {
        let mut budget = counted(&[("gpu", 3)]);
        assert_eq!(budget.allocate_up_to(&map(&[("gpu", 1)]), 2).len(), 2);
        assert_eq!(budget.allocate_up_to(&map(&[("gpu", 1)]), 5).len(), 1);
        assert_eq!(budget.used(), map(&[("gpu", 3)]));
        assert_eq!(
            budget.allocate_up_to(&BTreeMap::new(), 4).len(),
            4,
            "free workers"
        );
    }

    /// A worker start (of one of three kinds of task) or the end of the
    /// `n`th live worker.
    #[derive(Clone, Debug)]
    enum Step {
        Start(usize),
        End(usize),
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        let step = prop_oneof![
            (0..3usize).prop_map(Step::Start),
            (0..16usize).prop_map(Step::End),
        ];
        proptest::collection::vec(step, 1..200)
    }

    proptest! {
        #[test]
        fn no_id_is_held_by_two_live_workers_and_none_is_lost(steps in steps()) {
            let mut budget = counted(&[("cpu", 8), ("gpu", 4)]);
            let tasks = [map(&[("gpu", 1), ("cpu", 2)]), map(&[("cpu", 3)]), map(&[("gpu", 2)])];
            let mut live: Vec<(usize, Share)> = Vec::new();
            for step in steps {
                match step {
                    Step::Start(task) => {
                        if let Some(share) = budget.try_allocate(&tasks[task]) {
                            live.push((task, share));
                        }
                    }
                    Step::End(n) if !live.is_empty() => {
                        let (_, share) = live.swap_remove(n % live.len());
                        budget.release(&share);
                    }
                    Step::End(_) => {}
                }
                for key in ["cpu", "gpu"] {
                    let mut held: Vec<String> = live.iter().flat_map(|(_, s)| ids(s, key)).collect();
                    let count = held.len() as u64;
                    held.sort();
                    held.dedup();
                    prop_assert_eq!(held.len() as u64, count, "an id of {} held twice", key);
                    prop_assert_eq!(budget.used().get(key).copied().unwrap_or(0), count);
                }
                for (task, share) in &live {
                    for (key, &need) in &tasks[*task] {
                        prop_assert_eq!(ids(share, key).len() as u64, need);
                    }
                }
            }
        }
    }

    #[test]
    fn demand_is_one_worker_per_runnable_block_up_to_max_workers() {
        assert_eq!(worker_demand(3, 8), 3);
        assert_eq!(worker_demand(1_000_000, 8), 8);
        assert_eq!(worker_demand(5, 0), 0, "hand-launched tasks");
    }
}
