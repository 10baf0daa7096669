//! The sbatch job script of a group of workers: the values of the
//! placeholders of `slurm-templates/worker.sbatch`, rendered by the shared
//! [`template`](crate::template) rules (`{{name}}`; a line whose
//! placeholder has no value is left out; unknown names are refused with
//! the template's file and line). Pure, so every rule is tested without
//! SLURM.

use crate::arrays;
use crate::template::{self, JobScript, Values};
use crate::{LaunchError, WorkerRequest};

/// The built-in template (`slurm-templates/worker.sbatch`), compiled in so
/// the driver needs no data files.
pub const BUILTIN_TEMPLATE: &str = include_str!("../../../slurm-templates/worker.sbatch");

/// Every placeholder a template may use; see the built-in template's
/// header for what each one holds.
pub const PLACEHOLDERS: &[&str] = &[
    "job_name",
    "task_id",
    "first_worker_id",
    "last_worker_id",
    "workers",
    "partition",
    "account",
    "qos",
    "time",
    "cpus",
    "gpus",
    "mem_mb",
    "workers_per_job",
    "nodes",
    "ntasks_per_node",
    "gpus_per_task",
    "mem_per_cpu_mb",
    "output",
    "error",
    "log_dir",
    "directives",
    "setup",
    "worker_command",
    "run_workers",
];

/// The sbatch backend's scripts.
pub(crate) const KIND: template::Kind = template::Kind {
    builtin: BUILTIN_TEMPLATE,
    builtin_name: "<built-in worker.sbatch>",
    extension: "sbatch",
    starts_several: "as job steps",
};

/// What the sbatch backend submits for a group of workers of one task
/// (consecutive ids), and where it keeps it.
pub fn job_script(group: &[WorkerRequest]) -> Result<JobScript, LaunchError> {
    KIND.job_script(group, &values_for(group))
}

/// The placeholder values of a group of workers.
pub fn values_for(group: &[WorkerRequest]) -> Values {
    let (first, last) = (&group[0], &group[group.len() - 1]);
    let options = &first.cluster;
    let per_job = arrays::per_job(group) as u32;
    let steps = per_job > 1;
    let resource = |key: &str| first.requires.get(key).copied().filter(|n| *n > 0);
    // A job of several workers asks per task, since SLURM has no memory
    // per task and a `--gres` counts per node.
    let (gpus, gpus_per_task) = split_by(steps, resource("gpu"));
    let (mem_mb, mem_per_cpu_mb) = split_by(steps, resource("mem"));
    let cpus = resource("cpu");
    let mem_per_cpu_mb = mem_per_cpu_mb.map(|mem| mem.div_ceil(cpus.unwrap_or(1)));
    let log_file = |extension: &str| {
        let path = first.log_dir.join(format!("worker-%A_%a.{extension}"));
        Some(template::directive_quote(&path.display().to_string()))
    };
    let number = |n: Option<u32>| n.filter(|_| steps).map(|n| n.to_string());
    let worker_command = template::worker_command(first);
    let run_workers = match steps {
        true => steps_block(first, per_job, cpus),
        false => format!("exec {worker_command}"),
    };
    Values::from([
        ("job_name", Some(template::job_name(&first.task_id))),
        ("task_id", Some(first.task_id.clone())),
        ("first_worker_id", Some(first.worker_id.to_string())),
        ("last_worker_id", Some(last.worker_id.to_string())),
        ("workers", Some(group.len().to_string())),
        ("partition", options.partition.clone()),
        ("account", options.account.clone()),
        ("qos", options.qos.clone()),
        ("time", options.time.clone()),
        ("cpus", cpus.map(|n| n.to_string())),
        ("gpus", gpus.map(|n| n.to_string())),
        ("mem_mb", mem_mb.map(|n| n.to_string())),
        ("workers_per_job", number(Some(per_job))),
        ("nodes", number(options.nodes)),
        ("ntasks_per_node", number(options.ntasks_per_node)),
        ("gpus_per_task", gpus_per_task.map(|n| n.to_string())),
        ("mem_per_cpu_mb", mem_per_cpu_mb.map(|n| n.to_string())),
        ("output", log_file("out")),
        ("error", log_file("err")),
        (
            "log_dir",
            Some(template::shell_quote(&first.log_dir.display().to_string())),
        ),
        (
            "directives",
            template::directive_lines("#SBATCH", &options.directives),
        ),
        ("setup", template::joined_lines(&options.setup)),
        ("worker_command", Some(worker_command)),
        ("run_workers", Some(run_workers)),
    ])
}

/// `value` as (one worker per job, several per job): set on one side only.
fn split_by(steps: bool, value: Option<u64>) -> (Option<u64>, Option<u64>) {
    match steps {
        true => (None, value),
        false => (value, None),
    }
}

/// How a job of `per_job` workers runs them: one job step each, started
/// together, their ids counted on from the array element's first; then it
/// waits until no worker step is left, also those the driver started
/// later in the place of one that died ([`worker_step_command`]).
fn steps_block(first: &WorkerRequest, per_job: u32, cpus: Option<u64>) -> String {
    let step = worker_step_command(first, cpus);
    [
        format!("# {per_job} workers in this job, each its own job step: one that dies leaves"),
        "# the others running, and the driver may start another in its place here.".into(),
        format!(
            "first=$(( {} + ${{SLURM_ARRAY_TASK_ID:-0}} * {per_job} ))",
            first.worker_id
        ),
        format!("for place in $(seq 0 {}); do", per_job - 1),
        "  id=$(( first + place ))".into(),
        format!("  DAISY_WORKER_ID=$id {step} &"),
        "done".into(),
        "wait".into(),
        "# The job ends (freeing its nodes) once no worker step is left.".into(),
        r#"while squeue --noheader --steps --jobs="$SLURM_JOB_ID" --format=%i 2>/dev/null \"#
            .into(),
        r"    | grep -qvE '\.(batch|extern)$'; do sleep 5; done".into(),
    ]
    .join("\n")
}

/// The `srun` that runs worker `$id` as a job step (see [`srun_options`]).
fn worker_step_command(request: &WorkerRequest, cpus: Option<u64>) -> String {
    let dir = template::shell_quote(&request.log_dir.display().to_string());
    let options = srun_options("$id", &dir, cpus).join(" ");
    format!("srun {options} {}", template::worker_command(request))
}

/// srun's options for worker `id` as a job step of one task on one node,
/// logging to `<log_dir>/worker-<id>.out` and `.err` as a local worker
/// does: in a job script (`id` a shell word such as `$id`, `log_dir`
/// quoted), and for the sbatch backend, which runs srun with `--jobid` to
/// start a worker inside a job that has room (plain values).
pub(crate) fn srun_options(id: &str, log_dir: &str, cpus: Option<u64>) -> Vec<String> {
    let mut options = vec![
        "--ntasks=1".to_owned(),
        "--nodes=1".into(),
        "--exact".into(),
    ];
    options.extend(cpus.map(|n| format!("--cpus-per-task={n}")));
    options.extend([
        format!("--job-name=daisy-w{id}"),
        "--open-mode=append".into(),
        format!("--output={log_dir}/worker-{id}.out"),
        format!("--error={log_dir}/worker-{id}.err"),
    ]);
    options
}

#[cfg(test)]
mod tests;
