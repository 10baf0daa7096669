//! A worker pinned to the cores the driver gave it: `DAISY_PIN_CPUS`
//! (`0,1,5`), set for local workers of a task with `pin = true`. The
//! worker binds itself before it starts any thread or user code, so
//! everything it runs inherits the binding, and workers sharing a machine
//! never compete for a core or migrate between caches.

use nix::sched::{sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// The variable the driver names the cores in.
pub const PIN_ENV: &str = "DAISY_PIN_CPUS";

/// Binds this process to the cores `DAISY_PIN_CPUS` names, if it is set.
/// A value that cannot be applied is logged and the worker runs unpinned:
/// a binding is an optimisation, not a reason to lose the worker.
pub fn pin_to_given_cpus() {
    let Ok(given) = std::env::var(PIN_ENV) else {
        return;
    };
    match cpus(&given).and_then(|cpus| bind(&cpus)) {
        Ok(()) => tracing::info!("pinned to cores {given}"),
        Err(why) => tracing::warn!("{PIN_ENV}={given:?}: not pinned: {why}"),
    }
}

/// `0,1,5` as core numbers.
fn cpus(given: &str) -> Result<Vec<usize>, String> {
    given
        .split(',')
        .map(|cpu| {
            cpu.trim()
                .parse()
                .map_err(|_| format!("{cpu:?} is not a core number"))
        })
        .collect()
}

fn bind(cpus: &[usize]) -> Result<(), String> {
    let mut set = CpuSet::new();
    for &cpu in cpus {
        set.set(cpu).map_err(|e| format!("core {cpu}: {e}"))?;
    }
    sched_setaffinity(Pid::from_raw(0), &set).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_lists_are_read_and_garbage_refused() {
        assert_eq!(cpus("0,1, 5"), Ok(vec![0, 1, 5]));
        assert!(cpus("0,gpu").unwrap_err().contains("\"gpu\""));
        assert!(cpus("").is_err());
    }
}
