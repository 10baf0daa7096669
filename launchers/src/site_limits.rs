//! Site limits: refusals that mean "not now" rather than "no". A cluster
//! caps how many jobs a user, account or QOS may have queued (SLURM's
//! `MaxSubmitJobs`, LSF's `MAX_PEND_JOBS`), how large an array may be
//! (`MaxArraySize`), and a pipeline may cap its own (`max_jobs`). A
//! submission refused by one is neither a failure (the task must not be
//! abandoned for it, least of all on the largest clusters) nor passing
//! trouble worth retrying within seconds (the limit holds until jobs
//! leave the queue). So the cluster launcher ([`crate::queue`]) keeps
//! such requests here, [`Held`], and submits them again later: after a
//! site limit with backoff ([`SITE_LIMIT_FIRST_PAUSE`] doubling up to
//! [`MAX_BACKOFF`](crate::MAX_BACKOFF)), after `max_jobs` as soon as one
//! of the task's jobs ended.
//!
//! What counts as a limit is read from the scheduler's own words, here,
//! so that the three backends agree: [`slurm_limit`] for sbatch and
//! slurmrestd, [`lsf_limit`] for bsub.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::pacing::Backoff;
use crate::WorkerRequest;

/// The first pause after a site limit refused a submission; it doubles
/// with every refusal in a row up to [`MAX_BACKOFF`](crate::MAX_BACKOFF).
pub const SITE_LIMIT_FIRST_PAUSE: Duration = Duration::from_secs(5);

/// The limit named when a task's own `max_jobs` holds a submission back.
pub const MAX_JOBS: &str = "max_jobs";

/// The limit named for an array larger than SLURM's `MaxArraySize`.
pub(crate) const MAX_ARRAY_SIZE: &str = "MaxArraySize";

/// The limit a SLURM refusal names when waiting can help, or `None` when
/// it is an error (or no refusal). SLURM 22.05's sbatch prints the job's
/// reason on the line before its message, e.g.
///
/// ```text
/// sbatch: error: QOSMaxSubmitJobPerUserLimit
/// sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, user's size and/or time limits)
/// ```
///
/// Submit-count reasons (`QOSMaxSubmitJobPerUserLimit`,
/// `QOSMaxSubmitJobPerAccountLimit`, `AssocMaxSubmitJobLimit`,
/// `AssocGrpSubmitJobsLimit`, `QOSGrpSubmitJobsLimit`) free up as jobs
/// leave the queue: a limit. The same message with a size or time reason
/// (`QOSMaxWallDurationPerJobLimit`, `QOSMaxCpuPerJobLimit`) never passes:
/// an error. The message with no reason (slurmrestd's, or a site plugin's)
/// counts as a limit, as its words say "job submit limit" first. An array
/// beyond `MaxArraySize` ("Invalid job array specification") is one too:
/// the launcher splits arrays smaller and tries again.
pub(crate) fn slurm_limit(message: &str) -> Option<String> {
    let words = || message.split(|c: char| !c.is_ascii_alphanumeric());
    if let Some(reason) = words().find(|w| w.contains("MaxSubmitJob") || w.contains("GrpSubmitJob"))
    {
        return Some(reason.to_owned());
    }
    if message.contains("MaxArraySize") || message.contains("Invalid job array specification") {
        return Some(MAX_ARRAY_SIZE.to_owned());
    }
    let other_reason =
        words().any(|w| (w.starts_with("QOS") || w.starts_with("Assoc")) && w.ends_with("Limit"));
    if message.contains("Job violates accounting/QOS policy") && !other_reason {
        return Some("accounting/QOS policy (job submit limit)".to_owned());
    }
    None
}

/// LSF's parameter for the largest job array (lsb.params).
pub(crate) const LSF_MAX_ARRAY_SIZE: &str = "MAX_JOB_ARRAY_SIZE";

/// Whether `limit` is an array size limit (SLURM's or LSF's): the queue's
/// array size is to be asked again.
pub(crate) fn is_array_size(limit: &str) -> bool {
    limit == MAX_ARRAY_SIZE || limit == LSF_MAX_ARRAY_SIZE
}

/// The number a `NAME = N` line of a scheduler's configuration listing
/// gives (`scontrol show config`, `bparams -a`).
pub(crate) fn configured_number(listing: &str, name: &str) -> Option<usize> {
    listing.lines().find_map(|line| {
        let (key, value) = line.split_once('=')?;
        (key.trim() == name).then(|| value.trim().parse().ok())?
    })
}

/// LSF's words for a refusal that waiting can help, and the parameter
/// each means (lsb.params, lsb.users). bsub itself retries these unless
/// `LSB_NTRIES` is set, so the bsub backend sets it to 1: the launcher
/// waits instead, without blocking the launcher thread.
const LSF_LIMITS: &[(&str, &str)] = &[
    ("pending job threshold", "MAX_PEND_JOBS"),
    ("maximum number of pending jobs", "MAX_PEND_JOBS"),
    ("pending job slot threshold", "MAX_PEND_SLOTS"),
    ("max_pend_jobs", "MAX_PEND_JOBS"),
    ("max_pend_slots", "MAX_PEND_SLOTS"),
    ("max_job_array_size", LSF_MAX_ARRAY_SIZE),
    // LSBE_BIG_IDX: an index above MAX_JOB_ARRAY_SIZE; smaller arrays pass.
    ("job array index too large", LSF_MAX_ARRAY_SIZE),
];

/// The LSF parameter a bsub refusal names when waiting can help.
pub(crate) fn lsf_limit(message: &str) -> Option<String> {
    let message = message.to_ascii_lowercase();
    LSF_LIMITS
        .iter()
        .find(|(words, _)| message.contains(words))
        .map(|(_, limit)| limit.to_string())
}

/// Requests held back by a limit, by worker id, and when to try again.
#[derive(Default)]
pub(crate) struct Held {
    requests: BTreeMap<u64, (WorkerRequest, String)>,
    /// Spacing of new attempts after site limits refused; `max_jobs`
    /// alone sets no pause (its room is counted, not asked for).
    backoff: Backoff,
}

impl Held {
    /// Holds `request` back for `limit`.
    pub(crate) fn hold(&mut self, request: WorkerRequest, limit: String) {
        self.requests.insert(request.worker_id, (request, limit));
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Whether some request waits and may be tried again at `now`.
    pub(crate) fn due(&self, now: Instant) -> bool {
        !self.requests.is_empty() && !self.backoff.waiting_at(now)
    }

    /// When the next attempt is due, if a site limit made them wait.
    pub(crate) fn next_attempt(&self) -> Option<Instant> {
        self.backoff.resume_at().filter(|_| !self.is_empty())
    }

    /// A site limit refused again at `now`: the pause doubles.
    pub(crate) fn refused_at(&mut self, now: Instant) {
        self.backoff.failed_at(now, SITE_LIMIT_FIRST_PAUSE);
    }

    /// No site limit refused the last attempt: the next is not delayed.
    pub(crate) fn site_limits_passed(&mut self) {
        self.backoff = Backoff::default();
    }

    /// Every held request in worker-id order, with the limit it waited
    /// for, to be tried again (those still refused are held anew).
    pub(crate) fn take_all(&mut self) -> Vec<(WorkerRequest, String)> {
        std::mem::take(&mut self.requests).into_values().collect()
    }

    /// Lets `worker` go (cancelled): it will not be submitted.
    pub(crate) fn release(&mut self, worker: u64) -> bool {
        self.requests.remove(&worker).is_some()
    }

    /// Every held worker id.
    pub(crate) fn workers(&self) -> Vec<u64> {
        self.requests.keys().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recorded from SLURM 22.05 (the local cluster, QOS daisy-two-jobs
    /// with MaxSubmitJobsPerUser=2, MaxArraySize=8) and, for the other
    /// reasons, SLURM's job_reason strings in the same message.
    #[test]
    fn slurm_submit_count_limits_and_array_sizes_are_limits() {
        let policy = "sbatch: error: Batch job submission failed: Job violates accounting/QOS \
                      policy (job submit limit, user's size and/or time limits)";
        for (reason, expected) in [
            ("QOSMaxSubmitJobPerUserLimit", "QOSMaxSubmitJobPerUserLimit"),
            (
                "QOSMaxSubmitJobPerAccountLimit",
                "QOSMaxSubmitJobPerAccountLimit",
            ),
            ("AssocMaxSubmitJobLimit", "AssocMaxSubmitJobLimit"),
            ("AssocGrpSubmitJobsLimit", "AssocGrpSubmitJobsLimit"),
            ("QOSGrpSubmitJobsLimit", "QOSGrpSubmitJobsLimit"),
        ] {
            let stderr = format!("sbatch: error: {reason}\n{policy}");
            assert_eq!(slurm_limit(&stderr).as_deref(), Some(expected), "{stderr}");
        }
        assert_eq!(
            slurm_limit(policy).as_deref(),
            Some("accounting/QOS policy (job submit limit)"),
            "without a reason line (slurmrestd)"
        );
        // slurmrestd 22.05's answer to the same refusal (error 2050,
        // ESLURM_ACCOUNTING_POLICY), as the launcher words it.
        let rest = "Job violates accounting/QOS policy (job submit limit, user's size and/or \
                    time limits) (SLURM error 2050)";
        assert!(slurm_limit(rest).is_some(), "{rest}");
        let array = "sbatch: error: Batch job submission failed: Invalid job array specification";
        assert_eq!(slurm_limit(array).as_deref(), Some(MAX_ARRAY_SIZE));
    }

    #[test]
    fn slurm_size_and_time_limits_and_other_refusals_are_errors() {
        let policy = "sbatch: error: Batch job submission failed: Job violates accounting/QOS \
                      policy (job submit limit, user's size and/or time limits)";
        for reason in ["QOSMaxWallDurationPerJobLimit", "QOSMaxCpuPerJobLimit"] {
            let stderr = format!("sbatch: error: {reason}\n{policy}");
            assert_eq!(slurm_limit(&stderr), None, "{stderr}");
        }
        for stderr in [
            "sbatch: error: invalid partition specified: nosuch\n\
             sbatch: error: Batch job submission failed: Invalid partition name specified",
            "sbatch: error: Batch job submission failed: Invalid qos specification",
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
            "",
        ] {
            assert_eq!(slurm_limit(stderr), None, "{stderr}");
        }
    }

    #[test]
    fn configured_numbers_are_read_from_name_value_lines() {
        let bparams = "lsb.params configuration at Sat Dec 05 21:13:30 2026\n\
                       \x20   DEFAULT_QUEUE = normal\n\
                       \x20   MAX_JOB_ARRAY_SIZE = 2000\n";
        assert_eq!(configured_number(bparams, LSF_MAX_ARRAY_SIZE), Some(2000));
        assert_eq!(configured_number(bparams, "MAX_PEND_JOBS"), None);
        assert_eq!(
            configured_number("MAX_JOB_ARRAY_SIZE = lots", LSF_MAX_ARRAY_SIZE),
            None
        );
    }

    #[test]
    fn lsf_pending_job_thresholds_and_the_array_size_are_limits() {
        assert_eq!(
            lsf_limit("Pending job threshold reached. Job not submitted.").as_deref(),
            Some("MAX_PEND_JOBS")
        );
        assert_eq!(
            lsf_limit("Job array index too large. Job not submitted.").as_deref(),
            Some("MAX_JOB_ARRAY_SIZE")
        );
        assert_eq!(lsf_limit("nosuch: No such queue. Job not submitted."), None);
    }

    #[test]
    fn a_site_limit_pauses_attempts_doubling_and_passing_resets_them() {
        let mut held = Held::default();
        let t0 = Instant::now();
        assert!(!held.due(t0), "nothing held, nothing due");
        let request = WorkerRequest {
            task_id: "t".into(),
            worker_id: 1,
            program: "/bin/daisy-worker".into(),
            args: vec![],
            env: vec![],
            working_dir: "/".into(),
            log_dir: "/logs".into(),
            requires: Default::default(),
            cluster: Default::default(),
        };
        held.hold(request, "QOSMaxSubmitJobPerUserLimit".into());
        assert!(held.due(t0), "max_jobs or a first hold: due at once");
        held.refused_at(t0);
        assert!(!held.due(t0 + Duration::from_secs(4)));
        assert!(held.due(t0 + SITE_LIMIT_FIRST_PAUSE));
        held.refused_at(t0);
        assert!(!held.due(t0 + Duration::from_secs(9)), "doubled to 10 s");
        assert!(held.due(t0 + Duration::from_secs(10)));
        for _ in 0..20 {
            held.refused_at(t0);
        }
        assert_eq!(held.next_attempt(), Some(t0 + crate::MAX_BACKOFF), "capped");
        held.site_limits_passed();
        assert!(held.due(t0));
        let taken = held.take_all();
        assert_eq!(taken.len(), 1);
        assert!(held.is_empty() && held.next_attempt().is_none());
    }
}
