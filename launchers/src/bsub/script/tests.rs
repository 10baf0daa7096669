use std::collections::BTreeMap;

use super::*;
use crate::template::assert_bash_syntax;
use crate::{ClusterOptions, TemplateProblem};

/// The text of `group`'s job script.
fn script_for(group: &[WorkerRequest]) -> Result<String, LaunchError> {
    job_script(group).map(|script| script.text)
}

fn request(worker_id: u64) -> WorkerRequest {
    WorkerRequest {
        task_id: "predict".into(),
        worker_id,
        program: "/opt/daisy/bin/daisy-worker".into(),
        args: vec!["--log-level".into(), "debug info".into()],
        env: vec![("DAISY_CONTEXT".into(), r#"{"token":"s3cr3t-token"}"#.into())],
        working_dir: "/work/run".into(),
        log_dir: "/work/run/daisy_run/seg/logs/predict".into(),
        requires: BTreeMap::new(),
        cluster: ClusterOptions::default(),
    }
}

fn group(first: u64, count: u64, edit: impl Fn(&mut WorkerRequest)) -> Vec<WorkerRequest> {
    (first..first + count)
        .map(|id| {
            let mut request = request(id);
            edit(&mut request);
            request
        })
        .collect()
}

fn directives(script: &str) -> Vec<&str> {
    script
        .lines()
        .filter(|line| line.starts_with("#BSUB"))
        .collect()
}

#[test]
fn a_full_request_renders_every_directive() {
    let workers = group(4, 3, |r| {
        r.requires = BTreeMap::from([("cpu".into(), 4), ("gpu".into(), 1), ("mem".into(), 16000)]);
        r.cluster = ClusterOptions {
            partition: Some("gpu".into()),
            account: Some("lab-funke".into()),
            time: Some("04:30:00".into()),
            directives: vec!["-R \"span[hosts=1]\"".into(), "#BSUB -x".into()],
            setup: vec!["module load cuda".into()],
            max_array_parallel: Some(2),
            ..ClusterOptions::default()
        };
    });
    let script = script_for(&workers).unwrap();
    let logs = "/work/run/daisy_run/seg/logs/predict";
    let expected = [
        "#BSUB -J \"daisy-predict[1-3]%2\"".to_owned(),
        "#BSUB -q gpu".into(),
        "#BSUB -P lab-funke".into(),
        "#BSUB -W 4:30".into(),
        "#BSUB -n 4".into(),
        "#BSUB -R \"rusage[mem=16000]\"".into(),
        "#BSUB -gpu \"num=1\"".into(),
        "#BSUB -cwd /work/run".into(),
        format!("#BSUB -o {logs}/worker-%J_%I.out"),
        format!("#BSUB -e {logs}/worker-%J_%I.err"),
        "#BSUB -R \"span[hosts=1]\"".into(),
        "#BSUB -x".into(),
    ];
    assert_eq!(directives(&script), expected);
    assert!(script.contains("\nmodule load cuda\n"), "{script}");
    let command = "exec /opt/daisy/bin/daisy-worker --log-level 'debug info'";
    assert!(script.ends_with(&format!("{command}\n")), "{script}");
    assert!(script.contains("worker ids 4 to 6"), "{script}");
}

#[test]
fn unset_options_leave_their_lines_out() {
    let script = script_for(&group(0, 1, |_| {})).unwrap();
    let expected = [
        "#BSUB -J \"daisy-predict[1-1]\"",
        "#BSUB -cwd /work/run",
        "#BSUB -o /work/run/daisy_run/seg/logs/predict/worker-%J_%I.out",
        "#BSUB -e /work/run/daisy_run/seg/logs/predict/worker-%J_%I.err",
    ];
    assert_eq!(directives(&script), expected);
    assert!(!script.contains("{{"), "{script}");
}

#[test]
fn the_token_is_never_in_the_script() {
    let script = script_for(&group(0, 5, |r| r.cluster.max_array_parallel = Some(1))).unwrap();
    assert!(!script.contains("s3cr3t"), "{script}");
    assert!(!script.contains("DAISY_CONTEXT="), "{script}");
}

#[test]
fn paths_with_spaces_are_quoted() {
    let workers = group(0, 1, |r| {
        r.log_dir = "/my logs/predict".into();
        r.working_dir = "/my work".into();
    });
    let script = script_for(&workers).unwrap();
    assert!(
        script.contains("#BSUB -o \"/my logs/predict/worker-%J_%I.out\"\n"),
        "{script}"
    );
    assert!(script.contains("#BSUB -cwd \"/my work\"\n"), "{script}");
}

#[test]
fn slurm_walltimes_become_lsf_run_limits() {
    for (time, minutes) in [
        ("30", 30),
        ("90:30", 91),
        ("04:00:00", 240),
        ("1-12:00:00", 2160),
        ("2-0", 2880),
        ("0-1:30", 90),
        ("0:0:1", 1),
    ] {
        assert_eq!(walltime_minutes(time), Some(minutes), "{time}");
    }
    for bad in ["", "4h", "1:2:3:4", "x-1", "-1", "1-"] {
        assert_eq!(walltime_minutes(bad), None, "{bad:?}");
    }
    assert_eq!(
        walltime_option("36:00:00").unwrap().as_deref(),
        Some("36:00")
    );
    assert_eq!(walltime_option("0").unwrap(), None, "SLURM's 0: no limit");
}

#[test]
fn an_unreadable_walltime_is_a_permanent_refusal_naming_it() {
    let workers = group(0, 1, |r| r.cluster.time = Some("4h".into()));
    let error = script_for(&workers).unwrap_err();
    assert!(
        matches!(
            error,
            LaunchError::Submit {
                permanent: true,
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("time = \"4h\""), "{error}");
}

#[test]
fn a_custom_template_gets_bsub_names_and_unknown_ones_are_listed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mine.bsub");
    std::fs::write(
        &path,
        "#BSUB -J \"{{job_array}}\"\n#BSUB -q {{partition}}\n",
    )
    .unwrap();
    let workers = group(0, 2, |r| r.cluster.template = Some(path.clone()));
    let error = script_for(&workers).unwrap_err();
    match &error {
        LaunchError::Template {
            line: 2,
            problem: TemplateProblem::UnknownName { name, known },
            ..
        } => {
            assert_eq!(name, "partition");
            assert!(
                known.contains(&"queue") && known.contains(&"job_array"),
                "{known:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn placeholders_list_exactly_the_names_filled() {
    let values = values_for(&group(0, 1, |_| {})).unwrap();
    let names: Vec<&str> = values.keys().copied().collect();
    let mut listed = PLACEHOLDERS.to_vec();
    listed.sort_unstable();
    assert_eq!(names, listed);
}

#[test]
fn the_builtin_template_keeps_its_directive_prefix_out_of_comments() {
    for line in BUILTIN_TEMPLATE
        .lines()
        .filter(|line| line.contains("BSUB"))
    {
        assert!(
            line.starts_with("#BSUB "),
            "LSF would read this comment: {line}"
        );
    }
}

#[test]
fn scripts_are_kept_beside_the_logs() {
    let path = KIND.script_path(Path::new("/logs/predict"), 4, 6);
    assert_eq!(path, Path::new("/logs/predict/worker-4-6.bsub"));
}

#[test]
fn a_job_of_several_workers_asks_for_their_slots_and_blaunches_each() {
    let script = script_for(&group(0, 8, |r| {
        r.cluster.workers_per_job = Some(4);
        r.cluster.ntasks_per_node = Some(2);
        r.requires = BTreeMap::from([("cpu".into(), 2), ("gpu".into(), 1), ("mem".into(), 8000)]);
    }))
    .unwrap();
    for line in [
        "#BSUB -J \"daisy-predict[1-2]\"",
        "#BSUB -n 8",
        "#BSUB -R \"rusage[mem=4000]\"",
        "#BSUB -R \"span[ptile=4]\"",
        "#BSUB -gpu \"num=1/task\"",
        "first=$(( 0 + (${LSB_JOBINDEX:-1} - 1) * 4 ))",
        "  host=$1 workers=$(( $2 / 2 )); shift 2",
    ] {
        assert!(script.contains(&format!("{line}\n")), "{line}:\n{script}");
    }
    assert!(
        script.contains("DAISY_WORKER_ID=$id blaunch -z \"$host\" "),
        "{script}"
    );
    assert!(!script.contains("\nexec "), "{script}");
    assert_bash_syntax(&script);
}
