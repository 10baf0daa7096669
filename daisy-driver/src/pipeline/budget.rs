//! `[resources]` resolved into the ids the driver hands out: a count is
//! the ids `0` to `n - 1`, a list is its ids as given. A `gpu` count is
//! special: when the driver itself may see only some GPUs
//! (`CUDA_VISIBLE_DEVICES`, set by SLURM for a job with `--gres=gpu`, or
//! by hand), the budget's GPUs are the first `n` of those, since device
//! `0` of a worker told `CUDA_VISIBLE_DEVICES=0` would be a GPU the driver
//! was never given.

use super::schema::{Amounts, Pool};
use std::collections::BTreeMap;

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

/// The budget's ids per key, or what is wrong; `visible_gpus` is the
/// driver's `CUDA_VISIBLE_DEVICES`, if set.
pub(super) fn ids(
    pools: &BTreeMap<String, Pool>,
    visible_gpus: Option<&str>,
) -> Result<BTreeMap<String, Vec<String>>, String> {
    pools
        .iter()
        .map(|(key, pool)| {
            let ids = match (pool, key.as_str(), visible_gpus) {
                (Pool::Ids(ids), _, _) => ids.clone(),
                (Pool::Count(count), "gpu", Some(visible)) => first_visible(*count, visible)?,
                (Pool::Count(count), _, _) => (0..*count).map(|id| id.to_string()).collect(),
            };
            Ok((key.clone(), ids))
        })
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
        let ids = ids(&budget, None).unwrap();
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
        let ids = ids(&budget, Some("4,6,7")).unwrap();
        assert_eq!(ids["gpu"], ["4", "6"]);
        assert_eq!(
            ids["cpu"],
            ["0"],
            "only gpu is read from CUDA_VISIBLE_DEVICES"
        );
        let listed = pools(&[("gpu", Pool::Ids(strings(&["1"])))]);
        assert_eq!(
            super::ids(&listed, Some("4,6")).unwrap()["gpu"],
            ["1"],
            "a list is as given"
        );
    }

    #[test]
    fn more_gpus_than_the_driver_may_see_are_refused() {
        let budget = pools(&[("gpu", Pool::Count(4))]);
        let error = ids(&budget, Some("0,1")).unwrap_err();
        assert!(error.contains("only 2 GPUs"), "{error}");
    }
}
