//! The global resource budget (`[resources]`), what running workers take
//! from it, and how many workers a task asks for: the rules the driver
//! starts workers by and `plan` simulates.
//!
//! Every start of a worker must first `try_allocate` the task's
//! `requires`; the share comes back with `release` when the worker's slot
//! ends. Submitted (queued) workers hold their share too, so a queue wait
//! never leads to over-submission. Startup validation already refused any
//! task that could not fit even alone.

use std::collections::BTreeMap;

#[derive(Debug, Clone)]
pub struct Budget {
    total: BTreeMap<String, u64>,
    used: BTreeMap<String, u64>,
}

impl Budget {
    pub fn new(total: BTreeMap<String, u64>) -> Self {
        Self {
            total,
            used: BTreeMap::new(),
        }
    }

    /// Takes `requires` from the budget if all of it is available.
    pub fn try_allocate(&mut self, requires: &BTreeMap<String, u64>) -> bool {
        let fits = requires.iter().all(|(key, &need)| {
            let total = self.total.get(key).copied().unwrap_or(0);
            self.used.get(key).copied().unwrap_or(0) + need <= total
        });
        if fits {
            for (key, &need) in requires {
                *self.used.entry(key.clone()).or_default() += need;
            }
        }
        fits
    }

    /// Takes up to `wanted` shares of `requires`, as many as fit, and says
    /// how many it took.
    pub fn allocate_up_to(&mut self, requires: &BTreeMap<String, u64>, wanted: u32) -> u32 {
        (0..wanted)
            .take_while(|_| self.try_allocate(requires))
            .count() as u32
    }

    /// Gives back what an earlier `try_allocate` took.
    pub fn release(&mut self, requires: &BTreeMap<String, u64>) {
        for (key, &need) in requires {
            if let Some(used) = self.used.get_mut(key) {
                *used = used.saturating_sub(need);
            }
        }
    }

    /// What is in use now, per key.
    pub fn used(&self) -> &BTreeMap<String, u64> {
        &self.used
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

    fn map(items: &[(&str, u64)]) -> BTreeMap<String, u64> {
        items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn allocations_never_exceed_the_budget_and_come_back() {
        let mut budget = Budget::new(map(&[("cpu", 4), ("gpu", 1)]));
        let gpu_job = map(&[("cpu", 1), ("gpu", 1)]);
        assert!(budget.try_allocate(&gpu_job));
        assert!(!budget.try_allocate(&gpu_job), "the only gpu is taken");
        assert_eq!(
            budget.used(),
            &map(&[("cpu", 1), ("gpu", 1)]),
            "a refusal takes nothing"
        );
        let cpu_job = map(&[("cpu", 3)]);
        assert!(budget.try_allocate(&cpu_job));
        assert!(!budget.try_allocate(&map(&[("cpu", 1)])));
        budget.release(&gpu_job);
        assert!(budget.try_allocate(&map(&[("cpu", 1)])));
        assert!(
            budget.try_allocate(&BTreeMap::new()),
            "nothing required always fits"
        );
        assert!(
            !budget.try_allocate(&map(&[("fpga", 1)])),
            "an unknown key has none"
        );
    }

    #[test]
    fn allocate_up_to_takes_what_fits_and_no_more() {
        let mut budget = Budget::new(map(&[("gpu", 3)]));
        assert_eq!(budget.allocate_up_to(&map(&[("gpu", 1)]), 2), 2);
        assert_eq!(budget.allocate_up_to(&map(&[("gpu", 1)]), 5), 1);
        assert_eq!(budget.used(), &map(&[("gpu", 3)]));
        assert_eq!(
            budget.allocate_up_to(&BTreeMap::new(), 4),
            4,
            "free workers"
        );
    }

    #[test]
    fn demand_is_one_worker_per_runnable_block_up_to_max_workers() {
        assert_eq!(worker_demand(3, 8), 3);
        assert_eq!(worker_demand(1_000_000, 8), 8);
        assert_eq!(worker_demand(5, 0), 0, "hand-launched tasks");
    }
}
