"""Shared code of the LSF stand-in: bsub, bjobs, bkill and bresume.

LSF cannot be installed here, so these commands speak LSF's documented
formats (see README.md) and run the jobs for real on the local SLURM: an
LSF job is one SLURM job, an LSF job array `name[1-N]%cap` one SLURM array
`--array=1-N%cap`, so PEND, RUN, DONE and EXIT are real scheduler states.

Terms: the *LSF id* is the number the stand-in hands out (from 10001 up,
deliberately unlike SLURM's ids, so a caller that confuses the two fails);
the *SLURM id* is sbatch's. Each job has a directory
`<state dir>/jobs/<LSF id>/` with `job.json` (the mapping and what bsub
was asked), the job script as submitted and the SLURM wrapper that runs it.
The state dir is `$LSF_STANDIN_DIR`, default /tmp/lsf-standin.
"""

import fcntl
import getpass
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_STATE_DIR = "/tmp/lsf-standin"
FIRST_JOB_ID = 10001
# LSF's usual default queue (bparams "Default Queues: normal"); it maps to
# SLURM's default partition, every other queue to the partition so named.
DEFAULT_QUEUE = "normal"
FINISHED = ("DONE", "EXIT")
PRUNE_AFTER_SECONDS = 7 * 24 * 3600

# SLURM client errors that mean "the controller is unreachable right now".
_SLURM_DOWN = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Zero Bytes were transmitted",
    "Communication connection failure",
)
# What LSF commands print while mbatchd does not answer.
LSF_DOWN_MESSAGE = "batch system daemon not responding ... still trying"


def max_job_array_size():
    """lsb.params' MAX_JOB_ARRAY_SIZE (LSF's default 1000), here from the
    environment variable LSF_STANDIN_MAX_JOB_ARRAY_SIZE."""
    return int(os.environ.get("LSF_STANDIN_MAX_JOB_ARRAY_SIZE") or 1000)


class LsfDown(Exception):
    """SLURM (our mbatchd) did not answer; callers print LSF_DOWN_MESSAGE."""


def state_dir():
    path = Path(os.environ.get("LSF_STANDIN_DIR") or DEFAULT_STATE_DIR)
    (path / "jobs").mkdir(parents=True, exist_ok=True)
    return path


def allocate_job_id():
    """The next LSF id, under a lock so concurrent bsubs never share one."""
    directory = state_dir()
    with open(directory / "next-job-id.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        counter = directory / "next-job-id"
        text = counter.read_text().strip() if counter.exists() else ""
        job_id = int(text) if text.isdigit() else FIRST_JOB_ID
        counter.write_text(f"{job_id + 1}\n")
    return job_id


def job_dir(lsf_id):
    return state_dir() / "jobs" / str(lsf_id)


def save_job(meta):
    path = job_dir(meta["lsf_id"]) / "job.json"
    path.write_text(json.dumps(meta, indent=2) + "\n")


def load_job(lsf_id):
    path = job_dir(lsf_id) / "job.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def prune_old_jobs():
    """Forgets jobs submitted more than a week ago (LSF forgets finished
    jobs after CLEAN_PERIOD, an hour by default; a week keeps any test's
    jobs), so the state dir does not grow without end."""
    limit = time.time() - PRUNE_AFTER_SECONDS
    for path in (state_dir() / "jobs").iterdir():
        try:
            if (path / "job.json").stat().st_mtime < limit:
                shutil.rmtree(path, ignore_errors=True)
        except OSError:
            pass


def all_job_ids():
    jobs = (state_dir() / "jobs").iterdir()
    ids = [p.name for p in jobs if p.name.isdigit() and (p / "job.json").exists()]
    return sorted(ids, key=int)


def run_slurm(args, **kwargs):
    """Runs a SLURM client; LsfDown if the controller does not answer."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, **kwargs)
    except FileNotFoundError as error:
        raise LsfDown(f"{args[0]} not found: {error}") from error
    if done.returncode != 0 and any(m in done.stderr for m in _SLURM_DOWN):
        raise LsfDown(done.stderr.strip())
    return done


def user_name():
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def host_name():
    return socket.gethostname().split(".")[0]


# --- job ids and index lists ----------------------------------------------

_JOB_SPEC = re.compile(r"^(\d+)(?:\[([0-9,:\-]+)\])?$")


def parse_job_spec(text):
    """`123` -> (123, None); `123[1-3,7]` -> (123, [1, 2, 3, 7])."""
    match = _JOB_SPEC.match(text.strip())
    if not match:
        raise ValueError(text)
    indices = expand_indices(match.group(2)) if match.group(2) else None
    return int(match.group(1)), indices


def expand_indices(text):
    """LSF/SLURM index lists: `1-5`, `1,3`, `1-9:2`; a `%cap` is dropped."""
    indices = []
    for part in text.split("%")[0].split(","):
        if not part:
            continue
        bounds, _, step = part.partition(":")
        first, _, last = bounds.partition("-")
        first, last = int(first), int(last or first)
        if first < 1 or last < first:
            raise ValueError(text)
        indices.extend(range(first, last + 1, int(step or 1)))
    return indices


def element_name(lsf_id, index):
    """How LSF names one element: `123[4]`, or `123` outside arrays."""
    return f"{lsf_id}[{index}]" if index else str(lsf_id)


# --- SLURM job states in LSF's terms -----------------------------------------

_RECORD_FIELD = re.compile(r"(?:^|\s)(\w+)=(\S*)")


def element_states(meta):
    """{index: (STAT, exit code text, time left)} for the job's elements
    SLURM knows; the time left is LSF's `time_left` ("H:MM L"), "-" without
    a run limit or once the element ended.

    `scontrol show job` covers jobs slurmctld still holds (MinJobAge after
    they end); older ones are read from the job completion log, like LSF
    reading lsb.events for recently finished jobs. An index absent from
    the result is one the scheduler forgot.
    """
    slurm_id = str(meta["slurm_id"])
    done = run_slurm(["scontrol", "-o", "show", "job", slurm_id])
    states = {}
    if done.returncode == 0:
        states = _states_from_records(done.stdout.splitlines(), slurm_id)
    elif "Invalid job id" not in done.stderr:
        raise LsfDown(done.stderr.strip())
    if any(i not in states for i in meta["indices"]):
        finished = _states_from_records(_jobcomp_lines(), slurm_id)
        for index, state in finished.items():
            states.setdefault(index, state)
    for index in killed_pending(meta["lsf_id"]):
        states.setdefault(index, ("EXIT", "-", "-"))
    return states


def _states_from_records(lines, slurm_id):
    states = {}
    for line in lines:
        fields = dict(_RECORD_FIELD.findall(line))
        array_id = fields.get("ArrayJobId")
        if (array_id or fields.get("JobId")) != slurm_id:
            continue
        stat = lsf_stat(fields.get("JobState", ""), fields.get("Reason", ""))
        code = lsf_exit_code(stat, fields.get("ExitCode", "0:0"))
        left = time_left(stat, fields.get("TimeLimit", ""), fields.get("RunTime", ""))
        task_ids = fields.get("ArrayTaskId")
        for index in expand_indices(task_ids) if array_id and task_ids else [0]:
            states[index] = (stat, code, left)
    return states


def time_left(stat, time_limit, run_time):
    """LSF's TIME_LEFT of a job: "H:MM L" while it runs under a run limit,
    else "-". Whole minutes, rounded up: a running job never shows 0:00."""
    limit, ran = slurm_seconds(time_limit), slurm_seconds(run_time)
    if stat != "RUN" or limit is None or ran is None:
        return "-"
    minutes = (max(limit - ran, 0) + 59) // 60
    return f"{minutes // 60}:{minutes % 60:02d} L"


def slurm_seconds(text):
    """Seconds in SLURM's [days-]hours:minutes:seconds; None otherwise."""
    match = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d+):(\d+)", text)
    if not match:
        return None
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def _jobcomp_lines():
    """Lines of SLURM's jobcomp/filetxt log (JobCompLoc), if there is one."""
    config = run_slurm(["scontrol", "show", "config"]).stdout
    match = re.search(r"^JobCompLoc\s*=\s*(\S+)", config, re.MULTILINE)
    try:
        return Path(match.group(1)).read_text().splitlines() if match else []
    except OSError:
        return []


def lsf_stat(slurm_state, reason):
    """LSF's STAT for a SLURM job state (bjobs "Job states" in README)."""
    state = slurm_state.split("+")[0]
    if state == "PENDING":
        return "PSUSP" if reason.startswith("JobHeld") else "PEND"
    if state in ("RUNNING", "CONFIGURING", "COMPLETING", "RESIZING"):
        return "RUN"
    if state in ("SUSPENDED", "STOPPED"):
        return "USUSP"
    if state == "COMPLETED":
        return "DONE"
    return "EXIT"  # FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY...


def lsf_exit_code(stat, slurm_exit_code):
    """bjobs' EXIT_CODE: `-` unless the job exited; 128+n after signal n."""
    if stat != "EXIT":
        return "-"
    code, _, signal = slurm_exit_code.partition(":")
    code, signal = int(code or 0), int(signal or 0)
    if signal:
        return str(128 + signal)
    return str(code) if code else "-"


def print_lsf_down():
    print(LSF_DOWN_MESSAGE, file=sys.stderr)
    return 255


def now_text():
    return time.strftime("%b %d %H:%M")


def select(spec):
    """What a bkill/bresume argument names: [(LSF id, label, SLURM target,
    {index: STAT})].

    `123` is one target, the whole job or array; `123[1-2]` one target per
    element. No STATs: no such job or element.
    """
    try:
        lsf_id, indices = parse_job_spec(spec)
    except ValueError:
        return [(None, spec, None, {})]
    meta = load_job(lsf_id)
    if meta is None:
        return [(lsf_id, spec, None, {})]
    states, slurm_id = element_states(meta), meta["slurm_id"]
    stats = {i: states[i][0] for i in meta["indices"] if i in states}
    if indices is None:
        return [(lsf_id, spec, str(slurm_id), stats)]
    return [
        (lsf_id, element_name(lsf_id, i), f"{slurm_id}_{i}", {i: stats[i]} if i in stats else {})
        for i in indices
    ]


def record_killed_pending(lsf_id, indices):
    """Remembers pending elements bkill cancels: SLURM drops a pending
    array element without a trace, LSF shows it as EXIT."""
    path = job_dir(lsf_id) / "killed-pending.json"
    with open(job_dir(lsf_id) / "killed-pending.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        known = set(json.loads(path.read_text())) if path.exists() else set()
        path.write_text(json.dumps(sorted(known | set(indices))) + "\n")


def killed_pending(lsf_id):
    path = job_dir(lsf_id) / "killed-pending.json"
    try:
        return set(json.loads(path.read_text()))
    except (OSError, ValueError):
        return set()


def mcpu_hosts(nodelist, tasks_per_node):
    """LSB_MCPU_HOSTS ("node1 2 node2 2") of a SLURM job: its hosts from
    `scontrol show hostnames`, its slots from SLURM_TASKS_PER_NODE
    ("2(x2),1": two nodes of 2 tasks, one of 1)."""
    hosts = run_slurm(["scontrol", "show", "hostnames", nodelist]).stdout.split()
    slots = []
    for part in tasks_per_node.split(","):
        count, _, repeat = part.partition("(x")
        slots += [int(count)] * int(repeat.rstrip(")") or 1)
    return " ".join(f"{host} {count}" for host, count in zip(hosts, slots))


if __name__ == "__main__":
    if sys.argv[1:2] == ["mcpu-hosts"] and len(sys.argv) == 4:
        print(mcpu_hosts(sys.argv[2], sys.argv[3]))
    else:
        sys.exit("usage: lsf_standin.py mcpu-hosts NODELIST TASKS_PER_NODE")
