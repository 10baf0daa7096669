//! A block command: the user's program, started once per block.
//!
//! The block reaches it twice, so that both a shell one-liner and a
//! program that reads its environment work unchanged: as `{placeholders}`
//! in the arguments and as `DAISY_BLOCK` (the block as JSON),
//! `DAISY_TASK_ID`, `DAISY_BLOCK_ID`, `DAISY_READ_ROI` and
//! `DAISY_WRITE_ROI`. Exit 0 is success.

use super::group::{self, describe, GroupChild, SpawnError, Waited};
use super::spawn::Environment;
use super::{BlockFailure, BlockLog, OpenLog, StderrTail, DEFAULT_GRACE};
use crate::cost::block_command_cost;
use daisy_core::protocol::{BlockCost, WireBlock};
use daisy_core::template::{CommandError, CommandTemplate};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A command line to run once per block.
#[derive(Debug, Clone)]
pub struct BlockCommand {
    argv: CommandTemplate,
    /// The user's variables, set before the `DAISY_*` ones (which win).
    env: BTreeMap<String, String>,
    /// Per-block limit; past it the block's process group is terminated.
    timeout: Option<Duration>,
    /// Between SIGTERM and SIGKILL on timeout.
    grace: Duration,
    /// Whether [`Self::run_costed`] measures what a block cost.
    resource_tracking: bool,
    /// The environment without the block's variables, built at the first
    /// block.
    environment: OnceLock<Environment>,
}

impl BlockCommand {
    /// Checks every argument's placeholders now, so that a typo fails
    /// before any block runs.
    pub fn new(
        argv: &[impl AsRef<str>],
        env: BTreeMap<String, String>,
        timeout: Option<Duration>,
    ) -> Result<Self, CommandError> {
        Ok(Self {
            argv: CommandTemplate::parse(argv)?,
            env,
            timeout,
            grace: DEFAULT_GRACE,
            resource_tracking: false,
            environment: OnceLock::new(),
        })
    }

    /// The program, unless a placeholder makes it differ per block.
    pub fn program(&self) -> Option<&str> {
        self.argv.program()
    }

    /// Replaces [`DEFAULT_GRACE`].
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// Measures what each block cost ([`crate::cost`]).
    pub fn with_resource_tracking(mut self, on: bool) -> Self {
        if on {
            crate::cost::start_gpu_sampling();
        }
        self.resource_tracking = on;
        self
    }

    /// Runs the command for `block`, appending its output to `log`, and
    /// waits for it (at most the timeout plus the grace period). The
    /// calling thread is the child's parent for PR_SET_PDEATHSIG, which is
    /// why the wait happens here rather than elsewhere.
    pub fn run(&self, block: &WireBlock, log: &BlockLog) -> Result<(), BlockFailure> {
        self.run_costed(block, log).0
    }

    /// [`Self::run`], with what the block cost if the command tracks
    /// resources and the block's process was started.
    pub fn run_costed(
        &self,
        block: &WireBlock,
        log: &BlockLog,
    ) -> (Result<(), BlockFailure>, Option<BlockCost>) {
        let started = Instant::now();
        let (mut child, tail) = match self.spawn(block, log) {
            Ok(spawned) => spawned,
            Err(failure) => return (Err(failure), None),
        };
        let outcome = self.wait(&mut child, &tail);
        let cost = (child.usage().filter(|_| self.resource_tracking))
            .map(|usage| block_command_cost(usage, child.pid() as i32, started));
        (outcome, cost)
    }

    /// The block's process, and where its stderr starts.
    fn spawn(
        &self,
        block: &WireBlock,
        log: &BlockLog,
    ) -> Result<(GroupChild, StderrTail), BlockFailure> {
        let OpenLog {
            stdout,
            stderr,
            tail,
        } = log.open().map_err(to_failure)?;
        let argv = self.argv.render(block);
        let values = block_env(block);
        let block_env: [(&str, &str); 5] =
            std::array::from_fn(|i| (BLOCK_ENV[i], values[i].as_str()));
        let env = self.environment().map_err(|cause| SpawnError {
            program: argv[0].clone(),
            cause,
        });
        let env = (env.map_err(to_failure)?, &block_env[..]);
        let spawned = GroupChild::spawn_shared((&argv[0], &argv[1..]), env, (&stdout, &stderr));
        let mut child = spawned.map_err(to_failure)?;
        if self.resource_tracking {
            child.measure_io();
        }
        Ok((child, tail))
    }

    /// The worker's environment, less its secret, plus the user's
    /// variables; the block's `DAISY_*` ones are added per process.
    fn environment(&self) -> io::Result<&Environment> {
        if let Some(environment) = self.environment.get() {
            return Ok(environment);
        }
        let environment = group::user_environment(&self.env, &BLOCK_ENV)?;
        Ok(self.environment.get_or_init(|| environment))
    }

    /// Waits for the block's process and reaps it.
    fn wait(&self, child: &mut GroupChild, tail: &StderrTail) -> Result<(), BlockFailure> {
        match child.wait_for(self.timeout) {
            Ok(Waited::Exited(status)) if status.success() => Ok(()),
            Ok(Waited::Exited(status)) => {
                Err(BlockFailure::with_tail(&describe(status), tail).ended_with(status))
            }
            Ok(Waited::TimedOut(timeout)) => {
                Err(group::on_timeout(child, timeout, self.grace, tail))
            }
            Err(e) => Err(BlockFailure::new(format!(
                "cannot wait for the block command: {e}"
            ))),
        }
    }
}

fn to_failure(error: impl std::fmt::Display) -> BlockFailure {
    BlockFailure::new(error.to_string())
}

/// The `DAISY_*` variables describing a block, in [`block_env`]'s order.
const BLOCK_ENV: [&str; 5] = [
    "DAISY_BLOCK",
    "DAISY_TASK_ID",
    "DAISY_BLOCK_ID",
    "DAISY_READ_ROI",
    "DAISY_WRITE_ROI",
];

/// The values of [`BLOCK_ENV`] for `block`.
fn block_env(block: &WireBlock) -> [String; 5] {
    [
        json(block),
        block.task_id.clone(),
        block.block_id.to_string(),
        json(&block.read_roi),
        json(&block.write_roi),
    ]
}

/// One-line JSON of a wire type; these are plain data, so this cannot fail.
fn json(value: &impl Serialize) -> String {
    serde_json::to_string(value).expect("wire types serialise to JSON")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::user_code::test_util::{block, is_gone, read_pid};
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    fn sh(script: &str) -> BlockCommand {
        BlockCommand::new(&["sh", "-c", script], BTreeMap::new(), None).unwrap()
    }

    fn log(dir: &Path) -> BlockLog {
        BlockLog::in_dir(&dir.join("logs"), "block")
    }

    #[test]
    fn placeholders_and_env_reach_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let script = format!(
            r#"echo {{task_id}} {{block_id}} {{read_offset}} {{write_shape}} $DAISY_BLOCK_ID "$DAISY_WRITE_ROI" $FOO > {0}
               echo "$DAISY_BLOCK" >> {0}; echo "$DAISY_TASK_ID $DAISY_READ_ROI" >> {0}"#,
            out.display()
        );
        let env = BTreeMap::from([("FOO".to_string(), "bar".to_string())]);
        let command = BlockCommand::new(&["sh", "-c", &script], env, None).unwrap();
        command.run(&block(17), &log(dir.path())).unwrap();
        let text = fs::read_to_string(&out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let write_roi = r#"{"offset":[8,72,136],"shape":[16,16,16]}"#;
        assert_eq!(
            lines[0],
            format!("predict 17 0,64,128 16,16,16 17 {write_roi} bar")
        );
        assert_eq!(
            serde_json::from_str::<WireBlock>(lines[1]).unwrap(),
            block(17)
        );
        assert_eq!(
            lines[2],
            r#"predict {"offset":[0,64,128],"shape":[32,32,32]}"#
        );
    }

    #[test]
    fn a_tracked_block_costs_what_it_and_the_children_it_waited_for_used() {
        let dir = tempfile::tempdir().unwrap();
        let script = "python3 -c 'data = b\"x\" * 30_000_000' && head -c 2000000 /dev/zero > out";
        let command = sh(&format!("cd {} && {script}", dir.path().display()));
        let (outcome, cost) = command
            .clone()
            .with_resource_tracking(true)
            .run_costed(&block(1), &log(dir.path()));
        outcome.unwrap();
        let cost = cost.expect("tracked");
        assert!(cost.peak_rss_bytes >= 30_000_000, "{cost:?}");
        assert!(cost.io_write_bytes >= 2_000_000, "{cost:?}");
        assert!(cost.cpu_seconds > 0.0, "{cost:?}");
        assert_eq!(
            (cost.gpu_util_pct, cost.gpu_mem_bytes),
            (None, None),
            "no GPU here"
        );
        let (_, untracked) = command.run_costed(&block(2), &log(dir.path()));
        assert_eq!(untracked, None);
    }

    #[test]
    fn literal_braces_reach_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let script = format!("echo '{{{{x}}}} {{{{{{block_id}}}}}}' > {}", out.display());
        sh(&script).run(&block(5), &log(dir.path())).unwrap();
        assert_eq!(fs::read_to_string(&out).unwrap(), "{x} {5}\n");
    }

    #[test]
    fn an_unknown_placeholder_is_refused_at_construction() {
        let err = BlockCommand::new(&["predict", "{blok_id}"], BTreeMap::new(), None).unwrap_err();
        assert!(matches!(&err, CommandError::UnknownPlaceholder { name, .. } if name == "blok_id"));
        assert!(err.to_string().contains("{block_id}"), "{err}");
        let empty: [&str; 0] = [];
        assert_eq!(
            BlockCommand::new(&empty, BTreeMap::new(), None).unwrap_err(),
            CommandError::Empty
        );
    }

    #[test]
    fn a_failure_carries_the_status_and_only_this_blocks_stderr() {
        let dir = tempfile::tempdir().unwrap();
        let first = sh("echo first >&2; exit 3")
            .run(&block(1), &log(dir.path()))
            .unwrap_err();
        assert_eq!(first.message, "exit status 3; stderr tail: first");
        let second = sh("echo second >&2; exit 4")
            .run(&block(2), &log(dir.path()))
            .unwrap_err();
        assert_eq!(second.message, "exit status 4; stderr tail: second");
        let stderr = fs::read_to_string(log(dir.path()).stderr).unwrap();
        assert_eq!(stderr, "first\nsecond\n");
    }

    #[test]
    fn output_is_appended_to_the_log() {
        let dir = tempfile::tempdir().unwrap();
        for id in [1, 2] {
            sh("echo out {block_id}; echo err {block_id} >&2")
                .run(&block(id), &log(dir.path()))
                .unwrap();
        }
        assert_eq!(
            fs::read_to_string(log(dir.path()).stdout).unwrap(),
            "out 1\nout 2\n"
        );
        assert_eq!(
            fs::read_to_string(log(dir.path()).stderr).unwrap(),
            "err 1\nerr 2\n"
        );
        let silent = sh("exit 1").run(&block(3), &log(dir.path())).unwrap_err();
        assert_eq!(silent.message, "exit status 1; stderr was empty");
    }

    #[test]
    fn a_block_killed_by_a_signal_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let failure = sh("kill -9 $$")
            .run(&block(1), &log(dir.path()))
            .unwrap_err();
        assert!(
            failure.message.starts_with("killed by SIGKILL"),
            "{failure}"
        );
    }

    #[test]
    fn a_command_that_cannot_start_names_the_program() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no-such-program");
        let command =
            BlockCommand::new(&[missing.to_str().unwrap()], BTreeMap::new(), None).unwrap();
        let failure = command.run(&block(1), &log(dir.path())).unwrap_err();
        assert!(failure.message.contains("no-such-program"), "{failure}");
        assert!(failure.message.contains("No such file"), "{failure}");
        fs::write(&missing, "#!/bin/sh\n").unwrap();
        let failure = command.run(&block(1), &log(dir.path())).unwrap_err();
        assert!(failure.message.contains("Permission denied"), "{failure}");
    }

    #[test]
    fn the_users_path_finds_the_program_and_a_script_without_interpreter_runs_with_sh() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        fs::create_dir(&bin).unwrap();
        let out = dir.path().join("out");
        let script = bin.join("no-shebang");
        fs::write(&script, format!("echo ran \"$1\" > {}\n", out.display())).unwrap();
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        let env = BTreeMap::from([("PATH".to_string(), bin.display().to_string())]);
        let command = BlockCommand::new(&["no-shebang", "{block_id}"], env, None).unwrap();
        command.run(&block(3), &log(dir.path())).unwrap();
        assert_eq!(fs::read_to_string(&out).unwrap(), "ran 3\n");
    }

    #[test]
    fn a_block_starts_with_no_signal_blocked_and_sigpipe_not_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let command =
            BlockCommand::new(&["cat", "/proc/self/status"], BTreeMap::new(), None).unwrap();
        command.run(&block(1), &log(dir.path())).unwrap();
        let status = fs::read_to_string(log(dir.path()).stdout).unwrap();
        let mask = |name: &str| {
            let line = status.lines().find(|l| l.starts_with(name)).unwrap();
            u64::from_str_radix(line[name.len()..].trim(), 16).unwrap()
        };
        assert_eq!(mask("SigBlk:"), 0, "{status}");
        let sigpipe = 1 << (libc::SIGPIPE - 1);
        assert_eq!(mask("SigIgn:") & sigpipe, 0, "{status}");
    }

    #[test]
    fn a_timeout_kills_the_block_and_its_children_even_if_they_ignore_sigterm() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!(
            "trap '' TERM; echo started >&2; sleep 30 & echo $! > {}; wait",
            pid_file.display()
        );
        // Long enough for the shell to have said "started" on a loaded
        // machine; the grace only saves time (SIGTERM is ignored).
        let command = BlockCommand::new(
            &["sh", "-c", &script],
            BTreeMap::new(),
            Some(Duration::from_secs(5)),
        )
        .unwrap()
        .with_grace(Duration::from_millis(200));
        let failure = command.run(&block(1), &log(dir.path())).unwrap_err();
        assert_eq!(failure.message, "timed out after 5s; stderr tail: started");
        assert!(is_gone(read_pid(&pid_file)));
    }

    #[test]
    fn processes_left_behind_by_a_finished_block_are_killed() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        let script = format!("sleep 30 & echo $! > {}", pid_file.display());
        sh(&script).run(&block(1), &log(dir.path())).unwrap();
        assert!(is_gone(read_pid(&pid_file)));
    }
}
