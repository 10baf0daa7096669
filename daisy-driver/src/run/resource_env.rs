//! What a worker is told about the resources it was given, through its
//! environment (inherited by the user code it runs):
//!
//! - `DAISY_RESOURCES`: every key's ids as JSON (`{"cpu":["0","1"],
//!   "gpu":["2"]}`), and `DAISY_RESOURCE_<KEY>` per key (`0,1`) for shell
//!   scripts; both only where the driver chose the ids (local workers).
//! - `CUDA_VISIBLE_DEVICES`: its `gpu` ids, so each local worker sees its
//!   own GPUs and none starts on GPU 0 because the others do.
//! - The thread counts numeric libraries read (OpenMP, hence torch and
//!   numba's OpenMP layer; MKL; OpenBLAS, numpy's usual BLAS; numba;
//!   numexpr; Accelerate): its `cpu` count, so workers sharing a machine do
//!   not each start one thread per core of it. Also on clusters, where the
//!   scheduler picks the cores but the libraries still count the machine's.
//! - `DAISY_PIN_CPUS`: its `cpu` ids, when the task asks to be pinned; the
//!   worker binds itself to them before it runs anything.
//!
//! A variable the task's `env` sets is never overridden, nor is a thread
//! count set in the driver's environment: the user knows better than the
//! budget. The driver's own `CUDA_VISIBLE_DEVICES` is not a choice for
//! each worker but the GPUs the driver may hand out (the budget's `gpu`
//! ids come from it), so each worker's replaces it.

use crate::pipeline::budget::Share;
use std::collections::BTreeMap;

/// The variables numeric libraries size their thread pools by.
pub const THREAD_VARIABLES: [&str; 6] = [
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
];

/// The variable a worker pins itself to its cpu ids by.
pub use daisy_worker::PIN_ENV as PIN_VARIABLE;

/// Who chose the worker's ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The driver: the worker runs on this machine, and its share names
    /// the ids it may use.
    Local { pin: bool },
    /// A cluster scheduler: the job got its own cores and GPUs, which only
    /// it knows; the driver's ids are bookkeeping and are not told.
    Cluster,
}

/// The variables to add to a worker's environment for `share` of
/// `requires`, leaving out those the task's `env` sets and the thread
/// counts `inherited` (the driver's environment) has.
pub fn resource_env(
    share: &Share,
    requires: &BTreeMap<String, u64>,
    placement: Placement,
    task_env: &BTreeMap<String, String>,
    inherited: impl Fn(&str) -> bool,
) -> Vec<(String, String)> {
    let mut env = Vec::new();
    if let Placement::Local { pin } = placement {
        env.extend(told_ids(share));
        if let Some(gpus) = share.get("gpu") {
            env.push(("CUDA_VISIBLE_DEVICES".to_string(), gpus.join(",")));
        }
        if let (true, Some(cpus)) = (pin, share.get("cpu")) {
            env.push((PIN_VARIABLE.to_string(), cpus.join(",")));
        }
    }
    if let Some(&cpus) = requires.get("cpu").filter(|&&cpus| cpus > 0) {
        let threads = THREAD_VARIABLES
            .into_iter()
            .filter(|name| !inherited(name))
            .map(|name| (name.to_string(), cpus.to_string()));
        env.extend(threads);
    }
    env.retain(|(name, _)| !task_env.contains_key(name));
    env
}

/// `DAISY_RESOURCES` and one `DAISY_RESOURCE_<KEY>` per key.
fn told_ids(share: &Share) -> Vec<(String, String)> {
    if share.is_empty() {
        return Vec::new();
    }
    let all = serde_json::to_string(share).expect("a map of strings serialises");
    let per_key = share.iter().map(|(key, ids)| {
        let name = format!("DAISY_RESOURCE_{}", env_name(key));
        (name, ids.join(","))
    });
    std::iter::once(("DAISY_RESOURCES".to_string(), all))
        .chain(per_key)
        .collect()
}

/// A budget key as part of a variable name: `gpu` → `GPU`, `mem-gb` →
/// `MEM_GB`.
fn env_name(key: &str) -> String {
    key.chars()
        .map(|c| match c.is_ascii_alphanumeric() {
            true => c.to_ascii_uppercase(),
            false => '_',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(items: &[(&str, &[&str])]) -> Share {
        let ids = |ids: &[&str]| ids.iter().map(|id| id.to_string()).collect();
        items.iter().map(|(k, v)| (k.to_string(), ids(v))).collect()
    }

    fn requires(items: &[(&str, u64)]) -> BTreeMap<String, u64> {
        items.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn value<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
        env.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    #[test]
    fn a_local_worker_is_told_its_ids_its_gpus_and_its_thread_count() {
        let held = share(&[("cpu", &["4", "5"]), ("gpu", &["2"])]);
        let env = resource_env(
            &held,
            &requires(&[("cpu", 2), ("gpu", 1)]),
            Placement::Local { pin: false },
            &BTreeMap::new(),
            |_| false,
        );
        assert_eq!(value(&env, "CUDA_VISIBLE_DEVICES"), Some("2"));
        assert_eq!(
            value(&env, "DAISY_RESOURCES"),
            Some(r#"{"cpu":["4","5"],"gpu":["2"]}"#)
        );
        assert_eq!(value(&env, "DAISY_RESOURCE_CPU"), Some("4,5"));
        for name in THREAD_VARIABLES {
            assert_eq!(value(&env, name), Some("2"), "{name}");
        }
        assert_eq!(value(&env, PIN_VARIABLE), None, "not asked to pin");
    }

    #[test]
    fn a_pinned_worker_is_told_its_cores() {
        let held = share(&[("cpu", &["0", "1", "2"])]);
        let env = resource_env(
            &held,
            &requires(&[("cpu", 3)]),
            Placement::Local { pin: true },
            &BTreeMap::new(),
            |_| false,
        );
        assert_eq!(value(&env, PIN_VARIABLE), Some("0,1,2"));
    }

    #[test]
    fn a_cluster_worker_gets_thread_counts_but_no_ids() {
        let held = share(&[("cpu", &["0", "1"]), ("gpu", &["0"])]);
        let env = resource_env(
            &held,
            &requires(&[("cpu", 2), ("gpu", 1)]),
            Placement::Cluster,
            &BTreeMap::new(),
            |_| false,
        );
        assert_eq!(value(&env, "OMP_NUM_THREADS"), Some("2"));
        assert_eq!(value(&env, "CUDA_VISIBLE_DEVICES"), None);
        assert_eq!(value(&env, "DAISY_RESOURCES"), None);
    }

    #[test]
    fn what_the_task_sets_wins_and_so_do_the_drivers_thread_counts() {
        let task_env = [("MKL_NUM_THREADS".to_string(), "8".to_string())].into();
        let env = resource_env(
            &share(&[("gpu", &["1"])]),
            &requires(&[("cpu", 2), ("gpu", 1)]),
            Placement::Local { pin: false },
            &task_env,
            |name| name == "OMP_NUM_THREADS" || name == "CUDA_VISIBLE_DEVICES",
        );
        assert_eq!(value(&env, "OMP_NUM_THREADS"), None, "the driver's");
        assert_eq!(value(&env, "MKL_NUM_THREADS"), None, "the task's");
        assert_eq!(value(&env, "OPENBLAS_NUM_THREADS"), Some("2"));
        assert_eq!(
            value(&env, "CUDA_VISIBLE_DEVICES"),
            Some("1"),
            "the driver's GPUs are the budget's, not a worker's"
        );
    }

    #[test]
    fn a_task_without_cpus_or_ids_is_told_nothing() {
        let env = resource_env(
            &Share::new(),
            &BTreeMap::new(),
            Placement::Local { pin: false },
            &BTreeMap::new(),
            |_| false,
        );
        assert!(env.is_empty(), "{env:?}");
    }
}
