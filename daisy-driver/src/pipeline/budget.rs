//! `[resources]` resolved into the ids the driver hands out: a count is
//! the ids `0` to `n - 1`, a list is its ids as given. Two keys are what
//! the driver's own process may use, when that is known:
//! - a `gpu` count, where the driver may see only some GPUs
//!   (`CUDA_VISIBLE_DEVICES`, set by SLURM for a job with `--gres=gpu`,
//!   or by hand), is the first `n` of those, since device `0` of a worker
//!   told `CUDA_VISIBLE_DEVICES=0` would be a GPU the driver was never
//!   given;
//! - a `cpu` count no larger than the cores the driver may run on (its
//!   affinity: a SLURM job's cores, `taskset`) is the first `n` of those,
//!   so pinned workers land on the job's cores. A larger count is a count
//!   to share out, not cores: `0` to `n - 1`.

use super::schema::{Amounts, Pool};
use std::collections::BTreeMap;

/// Per budget key, the ids one worker holds, in the order the budget
/// lists them: what a run's budget hands a worker, and what the event
/// of its start records.
pub type Share = BTreeMap<String, Vec<String>>;

/// The variable naming the GPUs a process may use.
pub const VISIBLE_GPUS: &str = "CUDA_VISIBLE_DEVICES";

/// The budget as amounts, for the checks against each task's `requires`.
pub(super) fn amounts(pools: &BTreeMap<String, Pool>) -> Amounts {
    let amount = |pool: &Pool| match pool {
        Pool::Count(count) => *count,
        Pool::Ids(ids) => ids.len() as u64,
    };
    pools
        .iter()
        .map(|(key, pool)| (key.clone(), amount(pool)))
        .collect()
}

/// What the driver's process may use.
#[derive(Clone, Debug, Default)]
pub(super) struct Visible {
    /// `CUDA_VISIBLE_DEVICES`, if set.
    pub(super) gpus: Option<String>,
    /// The cores the driver may run on, in order.
    pub(super) cpus: Vec<usize>,
}

impl Visible {
    /// This process's.
    pub(super) fn of_this_process() -> Self {
        Self {
            gpus: std::env::var(VISIBLE_GPUS).ok(),
            cpus: allowed_cpus(),
        }
    }
}

/// The budget's ids per key, or what is wrong.
pub(super) fn ids(
    pools: &BTreeMap<String, Pool>,
    visible: &Visible,
) -> Result<BTreeMap<String, Vec<String>>, String> {
    pools
        .iter()
        .map(|(key, pool)| {
            let ids = match (pool, key.as_str(), &visible.gpus) {
                (Pool::Ids(ids), _, _) => ids.clone(),
                (Pool::Count(count), "gpu", Some(gpus)) => first_visible(*count, gpus)?,
                (&Pool::Count(count), "cpu", _) if count as usize <= visible.cpus.len() => {
                    let cpus = visible.cpus[..count as usize].iter();
                    cpus.map(|cpu| cpu.to_string()).collect()
                }
                (Pool::Count(count), _, _) => (0..*count).map(|id| id.to_string()).collect(),
            };
            Ok((key.clone(), ids))
        })
        .collect()
}

/// The cores this process may run on; none if that cannot be read.
fn allowed_cpus() -> Vec<usize> {
    let Ok(set) = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) else {
        return Vec::new();
    };
    (0..nix::sched::CpuSet::count())
        .filter(|&cpu| set.is_set(cpu).unwrap_or(false))
        .collect()
}

fn first_visible(count: u64, visible: &str) -> Result<Vec<String>, String> {
    let listed: Vec<&str> = visible.split(',').filter(|id| !id.is_empty()).collect();
    match listed.len() as u64 >= count {
        true => Ok(listed[..count as usize]
            .iter()
            .map(|id| id.to_string())
            .collect()),
        false => Err(format!(
            "resources.gpu = {count}, but this driver may use only {} GPUs \
             ({VISIBLE_GPUS}={visible:?}): lower it, or list the GPUs to use",
            listed.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools(items: &[(&str, Pool)]) -> BTreeMap<String, Pool> {
        items
            .iter()
            .map(|(k, p)| (k.to_string(), p.clone()))
            .collect()
    }

    fn strings(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|id| id.to_string()).collect()
    }

    #[test]
    fn counts_are_numbered_and_lists_kept_as_given() {
        let budget = pools(&[
            ("cpu", Pool::Count(3)),
            ("gpu", Pool::Ids(strings(&["2", "0"]))),
        ]);
        let ids = ids(&budget, &Visible::default()).unwrap();
        assert_eq!(ids["cpu"], ["0", "1", "2"]);
        assert_eq!(ids["gpu"], ["2", "0"]);
        assert_eq!(
            amounts(&budget),
            [("cpu".into(), 3), ("gpu".into(), 2)].into()
        );
    }

    #[test]
    fn a_gpu_count_takes_the_gpus_the_driver_may_see() {
        let budget = pools(&[("gpu", Pool::Count(2)), ("cpu", Pool::Count(1))]);
        let visible = Visible {
            gpus: Some("4,6,7".into()),
            cpus: vec![],
        };
        let ids = ids(&budget, &visible).unwrap();
        assert_eq!(ids["gpu"], ["4", "6"]);
        assert_eq!(
            ids["cpu"],
            ["0"],
            "only gpu is read from CUDA_VISIBLE_DEVICES"
        );
        let listed = pools(&[("gpu", Pool::Ids(strings(&["1"])))]);
        assert_eq!(
            super::ids(&listed, &visible).unwrap()["gpu"],
            ["1"],
            "a list is as given"
        );
    }

    #[test]
    fn more_gpus_than_the_driver_may_see_are_refused() {
        let budget = pools(&[("gpu", Pool::Count(4))]);
        let visible = Visible {
            gpus: Some("0,1".into()),
            cpus: vec![],
        };
        let error = ids(&budget, &visible).unwrap_err();
        assert!(error.contains("only 2 GPUs"), "{error}");
    }

    #[test]
    fn a_cpu_count_takes_the_cores_the_driver_may_run_on_if_it_fits_in_them() {
        let visible = Visible {
            gpus: None,
            cpus: vec![8, 9, 10, 11],
        };
        let fits = pools(&[("cpu", Pool::Count(2))]);
        assert_eq!(ids(&fits, &visible).unwrap()["cpu"], ["8", "9"]);
        let shared_out = pools(&[("cpu", Pool::Count(6))]);
        assert_eq!(
            ids(&shared_out, &visible).unwrap()["cpu"],
            ["0", "1", "2", "3", "4", "5"]
        );
    }
}
