//! Samples recorded from SLURM 22.05.8 (Debian bookworm's slurm-wlm) on
//! the local test cluster, except where a test says otherwise.

use super::*;

/// `squeue --noheader --array --format=%i|%A|%T`, an array of 20 with
/// `%2`, a held job and an array of 10 with `%1`.
const SQUEUE: &str = "\
3_4|3|PENDING
3_5|3|PENDING
4|4|PENDING
24_0|25|RUNNING
3_2|7|RUNNING
3_3|8|COMPLETING
";

/// The same without `--array`: pending elements are folded into ranges.
const SQUEUE_FOLDED: &str = "\
3_[2-19%2]|3|PENDING
24_[1-2,4,8-9%1]|24|PENDING
27_[0]|27|PENDING
3_0|5|RUNNING
";

/// `scontrol -o show job 24`, trimmed to the fields that matter (the real
/// lines go on with RunTime=..., Command=..., StdOut=...), after
/// `scancel 24_3 24_[5-7]` (those elements vanish) and `scancel 24`.
const SCONTROL: &str = "\
JobId=24 ArrayJobId=24 ArrayTaskId=8-9%1 ArrayTaskThrottle=1 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901756 Nice=0 Account=(null) QOS=(null) JobState=CANCELLED Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00
JobId=34 ArrayJobId=24 ArrayTaskId=4 ArrayTaskThrottle=1 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A JobState=COMPLETING Reason=None ExitCode=0:15
JobId=33 ArrayJobId=24 ArrayTaskId=2 ArrayTaskThrottle=1 JobName=wrap JobState=COMPLETED Reason=None Dependency=(null) ExitCode=0:0
JobId=6 ArrayJobId=3 ArrayTaskId=1 ArrayTaskThrottle=2 JobName=daisy-exp JobState=FAILED Reason=NonZeroExitCode Dependency=(null) Requeue=1 ExitCode=1:0
JobId=27 ArrayJobId=27 ArrayTaskId=4294967294 JobName=wrap JobState=CANCELLED Reason=None ExitCode=0:0
JobId=4 JobName=wrap UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=0 Nice=0 Account=(null) QOS=(null) JobState=CANCELLED Reason=JobHeldUser Dependency=(null) ExitCode=0:0
";

/// `sacct -c --noheader --parsable2 --format=JobID,JobIDRaw,State,ExitCode
/// -j 5,6,24,34` without accounting: the jobcomp file knows raw ids only.
const SACCT_JOBCOMP: &str = "\
5|5|COMPLETED|0:0
6|6|FAILED|1:0
24|24|CANCELLED|0:0
34|34|CANCELLED|0:0
";

/// `sacct -X --noheader --parsable2 --format=JobID,JobIDRaw,State,ExitCode
/// --jobs=3,6,7` with slurmdbd (start-local-slurm.sh with
/// DAISY_SLURM_ACCOUNTING=1): array 3 of six elements that exit with their
/// index, held array 6 whose element 1 was cancelled alone (it vanished:
/// not even accounting keeps it), array 7 with element 0 cancelled and 1
/// running; then, after `scancel 6 7`, the last three lines; then two step
/// lines, which sacct prints without -X.
const SACCT_DATABASE: &str = "\
3_0|4|COMPLETED|0:0
3_1|5|FAILED|1:0
3_2|9|FAILED|2:0
3_3|10|FAILED|3:0
3_4|11|FAILED|4:0
3_5|3|FAILED|5:0
6_[0,2-3]|6|PENDING|0:0
7_0|8|CANCELLED by 0|0:0
7_1|7|RUNNING|0:0
6_[0,2-3]|6|CANCELLED by 0|0:0
7_0|8|CANCELLED by 0|0:0
7_1|7|CANCELLED by 0|0:0
3_0.batch|4.batch|COMPLETED|0:0
3_5.batch|3.batch|FAILED|5:0
";

fn element(job: &str, index: u32, raw: &str, state: &str) -> Record {
    Record {
        job: job.into(),
        indices: vec![index],
        raw: raw.into(),
        state: state.into(),
        exit: None,
    }
}

#[test]
fn squeue_lines_become_one_record_per_element() {
    let records = parse_squeue(SQUEUE);
    assert_eq!(records.len(), 6);
    assert_eq!(records[0], element("3", 4, "3", "PENDING"));
    assert_eq!(records[3], element("24", 0, "25", "RUNNING"));
    assert_eq!(records[5], element("3", 3, "8", "COMPLETING"));
    assert_eq!(records[2].indices, Vec::<u32>::new(), "job 4 is no array");
}

#[test]
fn folded_pending_ranges_are_expanded() {
    let records = parse_squeue(SQUEUE_FOLDED);
    assert_eq!(records[0].indices, (2..=19).collect::<Vec<_>>());
    assert_eq!(records[1].indices, [1, 2, 4, 8, 9]);
    assert_eq!(records[2].indices, [0]);
    assert_eq!(records[3], element("3", 0, "5", "RUNNING"));
}

#[test]
fn index_lists_with_steps_caps_and_garbage() {
    assert_eq!(expand_indices("0-15:4%2").unwrap(), [0, 4, 8, 12]);
    assert_eq!(expand_indices("7").unwrap(), [7]);
    assert_eq!(expand_indices("5-3"), None);
    assert_eq!(expand_indices("a-b"), None);
    assert_eq!(expand_indices("0-99999999"), None);
}

#[test]
fn job_ids_steps_and_other_lines() {
    assert_eq!(parse_job_id("24_3").unwrap(), ("24".into(), vec![3]));
    assert_eq!(parse_job_id("4").unwrap(), ("4".into(), vec![]));
    assert_eq!(parse_job_id("24_3.batch"), None);
    assert_eq!(parse_job_id("25.extern"), None);
    assert_eq!(parse_job_id("JOBID"), None);
    assert!(parse_squeue("squeue: error: something\n").is_empty());
}

#[test]
fn scontrol_records_carry_array_indices_state_and_exit_code() {
    let records = parse_scontrol(SCONTROL);
    assert_eq!(records.len(), 6);
    assert_eq!(
        (records[0].job.as_str(), records[0].indices.as_slice()),
        ("24", &[8, 9][..])
    );
    assert_eq!(records[0].state, "CANCELLED");
    assert_eq!(records[1].raw, "34");
    assert_eq!(
        records[1].exit,
        Some(ExitCode {
            code: 0,
            signal: 15
        })
    );
    assert_eq!(records[3].exit, Some(ExitCode { code: 1, signal: 0 }));
    assert_eq!(
        (records[4].job.as_str(), records[4].indices.len()),
        ("27", 0),
        "no index: matched by its raw id"
    );
    assert_eq!(
        (records[5].job.as_str(), records[5].indices.len()),
        ("4", 0)
    );
    assert!(parse_scontrol("No jobs in the system\n").is_empty());
}

#[test]
fn sacct_from_the_jobcomp_file_knows_raw_ids() {
    let records = parse_sacct(SACCT_JOBCOMP);
    assert_eq!(records.len(), 4);
    assert_eq!(
        (records[1].raw.as_str(), records[1].state.as_str()),
        ("6", "FAILED")
    );
    assert!(records.iter().all(|r| r.indices.is_empty()));
}

#[test]
fn sacct_with_a_database_knows_elements_and_skips_steps() {
    let records = parse_sacct(SACCT_DATABASE);
    assert_eq!(records.len(), 12, "steps are skipped");
    let summary = |r: &Record| {
        (
            r.job.clone(),
            r.indices.clone(),
            r.raw.clone(),
            r.state.clone(),
        )
    };
    assert_eq!(
        summary(&records[5]),
        ("3".into(), vec![5], "3".into(), "FAILED".into())
    );
    assert_eq!(records[5].exit, Some(ExitCode { code: 5, signal: 0 }));
    assert_eq!(
        summary(&records[6]),
        ("6".into(), vec![0, 2, 3], "6".into(), "PENDING".into())
    );
    assert_eq!(
        summary(&records[7]),
        ("7".into(), vec![0], "8".into(), "CANCELLED".into())
    );
    assert_eq!(records[9].indices, [0, 2, 3]);
}

#[test]
fn states_map_to_ends() {
    let exit = |code, signal| Some(ExitCode { code, signal });
    for active in [
        "PENDING",
        "RUNNING",
        "COMPLETING",
        "CONFIGURING",
        "SUSPENDED",
        "REQUEUED",
    ] {
        assert_eq!(job_end(active, None), None, "{active}");
    }
    assert_eq!(
        job_end("COMPLETED", exit(0, 0)),
        Some(JobEnd::Exited { code: 0 })
    );
    assert_eq!(job_end("CANCELLED", exit(0, 15)), Some(JobEnd::Cancelled));
    let failed = |state, exit| match job_end(state, exit) {
        Some(JobEnd::Failed { reason }) => reason,
        other => panic!("{state}: {other:?}"),
    };
    assert_eq!(
        failed("FAILED", exit(1, 0)),
        "SLURM job state FAILED (exit code 1)"
    );
    assert_eq!(
        failed("TIMEOUT", exit(0, 15)),
        "SLURM job state TIMEOUT (exit code 0, signal 15)"
    );
    for state in [
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "PREEMPTED",
    ] {
        assert!(failed(state, None).contains(state));
    }
}

#[test]
fn sbatch_parsable_output_with_and_without_cluster() {
    assert_eq!(parse_sbatch("35\n").as_deref(), Some("35"));
    assert_eq!(parse_sbatch("1234;cluster2\n").as_deref(), Some("1234"));
    assert_eq!(parse_sbatch("Submitted batch job 35\n"), None);
    assert_eq!(parse_sbatch(""), None);
}

#[test]
fn exit_codes() {
    assert_eq!(parse_exit("2:0"), Some(ExitCode { code: 2, signal: 0 }));
    assert_eq!(
        parse_exit("0:125"),
        Some(ExitCode {
            code: 0,
            signal: 125
        })
    );
    assert_eq!(parse_exit(""), None);
}
