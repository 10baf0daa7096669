use super::*;
use crate::template::{assert_bash_syntax, render, shell_quote};
use crate::{ClusterOptions, TemplateProblem};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The text of `group`'s job script.
fn script_for(group: &[WorkerRequest]) -> Result<String, LaunchError> {
    job_script(group).map(|script| script.text)
}

const SECRET: &str = "tok-5ecr3t";

fn request(worker_id: u64) -> WorkerRequest {
    WorkerRequest {
        task_id: "predict".into(),
        worker_id,
        program: "/opt/daisy/bin/daisy-worker".into(),
        args: vec!["--log-dir".into(), "/runs/r1/logs/predict".into()],
        env: vec![(
            "DAISY_CONTEXT".into(),
            format!("{{\"token\":\"{SECRET}\"}}"),
        )],
        working_dir: "/runs".into(),
        log_dir: "/runs/r1/logs/predict".into(),
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

fn sbatch_lines(script: &str) -> Vec<&str> {
    script
        .lines()
        .filter(|l| l.starts_with("#SBATCH"))
        .collect()
}

#[test]
fn the_builtin_template_without_options_names_the_job_and_its_logs_only() {
    let script = script_for(&group(4, 3, |_| {})).unwrap();
    assert_eq!(
        sbatch_lines(&script),
        [
            "#SBATCH --job-name=daisy-predict",
            "#SBATCH --output=/runs/r1/logs/predict/worker-%A_%a.out",
            "#SBATCH --error=/runs/r1/logs/predict/worker-%A_%a.err",
        ]
    );
    assert!(script.starts_with("#!/bin/bash\n"), "{script}");
    assert!(
        script.contains("\nexec /opt/daisy/bin/daisy-worker --log-dir /runs/r1/logs/predict\n"),
        "{script}"
    );
    assert!(script.contains("worker ids 4 to 6"), "{script}");
    assert!(!script.contains("{{"), "{script}");
    assert_bash_syntax(&script);
}

#[test]
fn every_option_and_resource_becomes_its_directive() {
    let script = script_for(&group(0, 2, |r| {
        r.cluster = ClusterOptions {
            partition: Some("gpu".into()),
            account: Some("lab".into()),
            qos: Some("high".into()),
            time: Some("1-02:00:00".into()),
            directives: vec!["--constraint=a100".into(), "#SBATCH --hold".into()],
            setup: vec!["module load cuda".into(), "source venv/bin/activate".into()],
            max_array_parallel: Some(4),
            template: None,
            ..ClusterOptions::default()
        };
        r.requires = BTreeMap::from([
            ("cpu".into(), 8),
            ("gpu".into(), 2),
            ("mem".into(), 16000),
            ("licence".into(), 1),
        ]);
    }))
    .unwrap();
    assert_eq!(
        sbatch_lines(&script)[3..],
        [
            "#SBATCH --partition=gpu",
            "#SBATCH --account=lab",
            "#SBATCH --qos=high",
            "#SBATCH --time=1-02:00:00",
            "#SBATCH --cpus-per-task=8",
            "#SBATCH --gres=gpu:2",
            "#SBATCH --mem=16000M",
            "#SBATCH --constraint=a100",
            "#SBATCH --hold",
        ]
    );
    assert!(
        !script.contains("licence"),
        "budget-only keys stay out:\n{script}"
    );
    let setup = script
        .find("module load cuda\nsource venv/bin/activate\n")
        .unwrap();
    assert!(setup < script.find("\nexec ").unwrap(), "{script}");
    assert_bash_syntax(&script);
}

#[test]
fn zero_resources_are_not_requested() {
    let script = script_for(&group(0, 1, |r| {
        r.requires = BTreeMap::from([("cpu".into(), 0), ("gpu".into(), 0)]);
    }))
    .unwrap();
    assert!(!script.contains("--cpus-per-task"), "{script}");
    assert!(!script.contains("--gres"), "{script}");
}

#[test]
fn the_token_never_reaches_the_script() {
    let script = script_for(&group(0, 5, |_| {})).unwrap();
    assert!(!script.contains(SECRET), "{script}");
    assert!(!script.contains("DAISY_CONTEXT="), "{script}");
}

#[test]
fn arguments_and_paths_are_quoted() {
    let script = script_for(&group(0, 1, |r| {
        r.program = "/opt/my tools/daisy-worker".into();
        r.args = vec!["it's".into(), "$HOME".into(), "".into(), "a=b,c:d".into()];
        r.log_dir = "/runs/my run/logs".into();
    }))
    .unwrap();
    let exec = script.lines().find(|l| l.starts_with("exec ")).unwrap();
    assert_eq!(
        exec,
        r#"exec '/opt/my tools/daisy-worker' 'it'\''s' '$HOME' '' a=b,c:d"#
    );
    assert!(script.contains("#SBATCH --output=\"/runs/my run/logs/worker-%A_%a.out\"\n"));
    assert_bash_syntax(&script);
}

#[test]
fn shell_quoting_round_trips_through_bash() {
    for word in [
        "plain",
        "two words",
        "it's",
        "$(rm -rf /)",
        "\"",
        "back\\slash",
        "",
        "*",
    ] {
        let echoed = Command::new("bash")
            .arg("-c")
            .arg(format!("printf %s {}", shell_quote(word)))
            .output()
            .unwrap();
        assert_eq!(String::from_utf8(echoed.stdout).unwrap(), word);
    }
}

#[test]
fn a_user_template_replaces_the_builtin_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mine.sbatch");
    std::fs::write(
        &path,
        "#!/bin/sh\n#SBATCH -J {{job_name}}\n{{worker_command}}\n",
    )
    .unwrap();
    let script = script_for(&group(0, 1, |r| r.cluster.template = Some(path.clone()))).unwrap();
    assert_eq!(
        script,
        "#!/bin/sh\n#SBATCH -J daisy-predict\n/opt/daisy/bin/daisy-worker --log-dir /runs/r1/logs/predict\n"
    );
}

#[test]
fn an_unknown_placeholder_names_the_template_line_and_placeholder() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mine.sbatch");
    std::fs::write(&path, "#!/bin/sh\n#SBATCH --nodes={{nodez}}\n").unwrap();
    let error = script_for(&group(0, 1, |r| r.cluster.template = Some(path.clone()))).unwrap_err();
    let message = error.to_string();
    assert!(message.contains(&*path.to_string_lossy()), "{message}");
    assert!(message.contains("line 2"), "{message}");
    assert!(message.contains("{{nodez}}"), "{message}");
    assert!(
        message.contains("job_name"),
        "lists the known ones: {message}"
    );
}

#[test]
fn an_unclosed_placeholder_is_an_error() {
    let error = render("ok\n{{job_name\n", Path::new("t.sbatch"), &Values::new()).unwrap_err();
    assert!(matches!(
        error,
        LaunchError::Template {
            line: 2,
            problem: TemplateProblem::Unclosed,
            ..
        }
    ));
}

#[test]
fn a_missing_user_template_is_named() {
    let missing = PathBuf::from("/nonexistent/worker.sbatch");
    let error =
        script_for(&group(0, 1, |r| r.cluster.template = Some(missing.clone()))).unwrap_err();
    assert!(matches!(&error, LaunchError::TemplateRead { path, .. } if *path == missing));
}

#[test]
fn the_builtin_template_uses_every_placeholder_and_nothing_else() {
    let values: Values = PLACEHOLDERS
        .iter()
        .map(|name| (*name, Some(String::new())))
        .collect();
    render(BUILTIN_TEMPLATE, Path::new(KIND.builtin_name), &values).unwrap();
    for name in PLACEHOLDERS {
        assert!(
            BUILTIN_TEMPLATE.contains(&format!("{{{{{name}}}}}")),
            "{name} unused"
        );
    }
}

#[test]
fn scripts_are_kept_by_worker_range() {
    let path = KIND.script_path(Path::new("/logs"), 3, 52);
    assert_eq!(path, Path::new("/logs/worker-3-52.sbatch"));
}

#[test]
fn a_job_of_several_workers_asks_per_task_and_runs_one_step_each() {
    let script = script_for(&group(6, 8, |r| {
        r.cluster.workers_per_job = Some(4);
        r.cluster.nodes = Some(2);
        r.cluster.ntasks_per_node = Some(2);
        r.requires = BTreeMap::from([("cpu".into(), 4), ("gpu".into(), 1), ("mem".into(), 10000)]);
    }))
    .unwrap();
    assert_eq!(
        sbatch_lines(&script)[3..],
        [
            "#SBATCH --cpus-per-task=4",
            "#SBATCH --ntasks=4",
            "#SBATCH --nodes=2",
            "#SBATCH --ntasks-per-node=2",
            "#SBATCH --gpus-per-task=1",
            "#SBATCH --mem-per-cpu=2500M",
        ]
    );
    assert!(
        script.contains("first=$(( 6 + ${SLURM_ARRAY_TASK_ID:-0} * 4 ))"),
        "{script}"
    );
    assert!(script.contains("for place in $(seq 0 3); do"), "{script}");
    assert!(
        script.contains(
            "DAISY_WORKER_ID=$id srun --ntasks=1 --nodes=1 --exact --cpus-per-task=4 \
             --job-name=daisy-w$id --open-mode=append \
             --output=/runs/r1/logs/predict/worker-$id.out \
             --error=/runs/r1/logs/predict/worker-$id.err \
             /opt/daisy/bin/daisy-worker --log-dir /runs/r1/logs/predict &"
        ),
        "{script}"
    );
    assert!(!script.contains("exec /opt"), "{script}");
    assert_bash_syntax(&script);
}

#[test]
fn a_template_without_run_workers_is_refused_for_several_workers_per_job() {
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("old.sbatch");
    std::fs::write(&template, "#!/bin/bash\nexec {{worker_command}}\n").unwrap();
    let with = |per_job| {
        script_for(&group(0, 2, |r| {
            r.cluster.template = Some(template.clone());
            r.cluster.workers_per_job = Some(per_job);
        }))
    };
    assert!(with(1).is_ok());
    let error = with(2).unwrap_err().to_string();
    assert!(
        error.contains("old.sbatch") && error.contains("{{run_workers}}"),
        "{error}"
    );
}
