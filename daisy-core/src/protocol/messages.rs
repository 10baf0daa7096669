//! The messages of the driver–worker protocol.
//!
//! Each message is a MessagePack map with a `"type"` key naming it (snake
//! case) and its fields by name, e.g. `{"type": "acquire_blocks", "max": 8}`.

use crate::protocol::tagged::tagged_messages;
use crate::protocol::user_code::{BlockResult, WireBlock};
use crate::scheduler::TaskCounters;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

/// A direction's messages: what their `type` key may say.
pub trait Message: DeserializeOwned {
    /// Every `type` of this direction, in the order of the docs.
    const TYPES: &'static [&'static str];
    /// This message's `type`, for logs (its content may be large).
    fn kind(&self) -> &'static str;
    /// Decodes the message whose `type` is `kind` from `body`, the whole
    /// map, in one pass (see [`super::tagged`]).
    fn from_tagged<'de, D: Deserializer<'de>>(kind: &str, body: D) -> Result<Self, D::Error>;
    /// The message whose `type` is `kind`, read from `payload` without
    /// serde if that is quicker and the layout allows; `None`: use serde.
    fn read_directly(_kind: &str, _payload: &[u8]) -> Option<Self> {
        None
    }
}

/// Reads nil as the default, as an absent key is: docs/protocol.md calls
/// such fields optional, and "optional" means nil too.
fn nil_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Who is connecting; a Hello without a role is a worker's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Takes blocks of one task and runs them.
    #[default]
    Worker,
    /// Watches the run (status, dashboards); never receives blocks.
    Observer,
}

/// The first frame of every connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    pub protocol: u32,
    /// The run's secret token (from DAISY_CONTEXT or a token file).
    pub token: String,
    #[serde(default, deserialize_with = "nil_as_default")]
    pub role: Role,
    /// The task a worker serves (required for workers).
    #[serde(default)]
    pub task_id: Option<String>,
    /// The slot a launched worker was started for; absent for workers
    /// started by hand.
    #[serde(default)]
    pub worker_id: Option<u64>,
    /// The batch job the worker runs in (SLURM/LSF job id), if any.
    #[serde(default)]
    pub job_id: Option<String>,
    #[serde(default, deserialize_with = "nil_as_default")]
    pub host: String,
    #[serde(default, deserialize_with = "nil_as_default")]
    pub pid: u32,
}

/// How the worker runs a task's blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CodeKind {
    /// `argv` runs once per block (placeholders substituted).
    BlockCommand,
    /// `argv` starts once and serves blocks as JSON lines on stdin/stdout.
    WorkerCommand,
    /// `function` is called once per block, in the worker's own process (a
    /// Python worker, `python -m daisy_rs.worker`); `argv` is empty.
    ProcessFunction,
    /// `function` is called once, takes no argument, and loops over its
    /// own client's blocks in the worker's process; `argv` is empty.
    WorkerFunction,
    /// A kind a later driver added: this worker cannot run it, and says so
    /// (`cannot_serve`) instead of failing to read the Welcome.
    #[serde(other)]
    Unknown,
}

impl CodeKind {
    /// Whether the code runs inside the worker's process (a function of an
    /// embedding interpreter) rather than as a program it starts.
    pub fn is_function(self) -> bool {
        matches!(self, Self::ProcessFunction | Self::WorkerFunction)
    }
}

/// Where a worker finds a task's function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FunctionSource {
    /// `"package.module:attribute"`, imported by the worker.
    Reference(String),
    /// A file holding the pickled function (cloudpickle), on a file
    /// system the workers share with the driver.
    Pickle(String),
}

/// A task's function and what the worker needs to load it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCode {
    pub source: FunctionSource,
    /// Directories put before the worker's module search path, so the
    /// modules the function comes from import as they did where it was
    /// declared.
    #[serde(default)]
    pub search_path: Vec<String>,
}

/// The user code of a task, as the pipeline file gives it. The driver
/// sends it in `Welcome`, so a worker needs nothing but the context to
/// start, and the pipeline file stays the one source of truth.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskCode {
    pub kind: CodeKind,
    pub argv: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Per-block time limit in seconds.
    #[serde(default)]
    pub timeout_s: Option<f64>,
    /// Blocks the worker asks for per `AcquireBlocks` and releases in one
    /// `ReleaseBlocks`: fewer round trips when blocks are short. 0 means
    /// "auto": the worker sizes its batches from how long its blocks take.
    #[serde(default = "one")]
    pub batch_size: u32,
    /// Blocks a worker command is fed ahead of the one it is answering,
    /// so it can read the next block while computing this one.
    #[serde(default)]
    pub prefetch: u32,
    /// Whether the worker measures what each block cost and sends it with
    /// the block's result ([`super::BlockCost`]); off when a driver does
    /// not say.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub resource_tracking: bool,
    /// The function to call (`process_function` and `worker_function`
    /// kinds only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionCode>,
}

/// `batch_size` of a driver that does not send it: one block at a time.
fn one() -> u32 {
    1
}

/// The driver's answer to an accepted Hello.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    /// The worker's id for this run (the slot's, or a new one).
    pub worker_id: u64,
    /// Both sides send a heartbeat this often ...
    pub heartbeat_interval_s: f64,
    /// ... and count the peer as gone after this many missed in a row.
    pub heartbeat_misses: u32,
    /// What to run (absent for observers).
    #[serde(default)]
    pub code: Option<TaskCode>,
    /// The longest a block of the task has run so far in this run, in
    /// seconds, for a worker's walltime estimate before its own first block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_block_s: Option<f64>,
}

/// What the driver-side sees per task in a snapshot. Fields after
/// `workers_connected` came later: a peer that does not send them is read
/// with their defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskSnapshot {
    pub task_id: String,
    pub counters: TaskCounters,
    pub workers_connected: u32,
    /// The task's workers by state.
    #[serde(default)]
    pub workers: WorkerCounts,
    /// The blocks workers hold now, oldest first.
    #[serde(default)]
    pub in_flight: Vec<InFlightBlock>,
    /// Blocks completed per second recently (the last half minute).
    #[serde(default)]
    pub blocks_per_s: f64,
    /// Seconds until the task's remaining blocks are done at that pace;
    /// absent when nothing completed recently.
    #[serde(default)]
    pub eta_s: Option<f64>,
}

/// A task's workers by state, counted over the run so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerCounts {
    /// Started (a job queued or starting) and not connected yet.
    pub submitted: u32,
    /// Connected now.
    pub connected: u32,
    /// Connected and holding no block.
    pub idle: u32,
    /// Gone uncleanly: crashed, killed, silent, or their connection broke.
    pub lost: u32,
    /// Never connected: the job ended first, or submitting it failed.
    pub failed_starts: u32,
}

/// A block a worker holds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct InFlightBlock {
    pub block_id: u64,
    pub worker_id: u64,
    /// Seconds since it was handed out.
    pub seconds: f64,
}

/// What an observer receives.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunSnapshot {
    pub pipeline: String,
    pub tasks: Vec<TaskSnapshot>,
    /// Seconds since the run started.
    #[serde(default)]
    pub seconds: f64,
}

tagged_messages! {
/// Messages a worker (or observer) sends to the driver.
#[derive(Clone, Debug, PartialEq)]
pub enum ToDriver ("ToDriver", mirror ToDriverMirror) {
    Hello(Hello),
    /// Asks for up to `max` blocks; answered with `Blocks` as soon as at
    /// least one is ready (the request is parked until then), or with
    /// `Shutdown` when the task has no more work.
    AcquireBlocks {
        max: u32,
    },
    /// Reports blocks the worker was given, in any order and batch size.
    ReleaseBlocks {
        results: Vec<BlockResult>,
    },
    Heartbeat,
    /// The worker takes no more blocks (walltime, SIGTERM, its code
    /// ended); blocks it still holds are released or handed back.
    Draining {
        reason: String,
        /// Because its job's walltime is too short for another block (not
        /// a signal): a worker that drains so before reporting any block
        /// made no progress and will not on a new job either.
        #[serde(
            default,
            deserialize_with = "nil_as_default",
            skip_serializing_if = "std::ops::Not::not"
        )]
        out_of_time: bool,
        /// Because its own code ended (a worker function returned, as a
        /// daisy 1.x worker process exits with status 0), not because it
        /// was stopped: the driver starts no other worker in its place
        /// while other workers of its task still run.
        #[serde(
            default,
            deserialize_with = "nil_as_default",
            skip_serializing_if = "std::ops::Not::not"
        )]
        by_choice: bool,
    },
    /// The worker cannot run the task's code (an unknown placeholder, a
    /// worker of another release) and leaves: an unclean exit, so a task
    /// whose workers all refuse is abandoned rather than restarted forever.
    CannotServe {
        reason: String,
    },
    /// Gives back blocks the worker holds without having run them to the
    /// end (it drains: walltime, SIGTERM, preemption). They go back to the
    /// queue and do not count as failed attempts.
    ReturnBlocks {
        block_ids: Vec<u64>,
        reason: String,
    },
    /// An observer asks for a [`RunSnapshot`].
    GetSnapshot,
}
}

impl Message for ToDriver {
    fn from_tagged<'de, D: Deserializer<'de>>(kind: &str, body: D) -> Result<Self, D::Error> {
        Self::deserialize_tagged(kind, body)
    }

    fn read_directly(kind: &str, payload: &[u8]) -> Option<Self> {
        (kind == "release_blocks")
            .then(|| crate::protocol::incoming::read_release(payload))
            .flatten()
    }

    const TYPES: &'static [&'static str] = &[
        "hello",
        "acquire_blocks",
        "release_blocks",
        "heartbeat",
        "draining",
        "cannot_serve",
        "return_blocks",
        "get_snapshot",
    ];

    fn kind(&self) -> &'static str {
        match self {
            ToDriver::Hello(_) => "hello",
            ToDriver::AcquireBlocks { .. } => "acquire_blocks",
            ToDriver::ReleaseBlocks { .. } => "release_blocks",
            ToDriver::Heartbeat => "heartbeat",
            ToDriver::Draining { .. } => "draining",
            ToDriver::CannotServe { .. } => "cannot_serve",
            ToDriver::ReturnBlocks { .. } => "return_blocks",
            ToDriver::GetSnapshot => "get_snapshot",
        }
    }
}

tagged_messages! {
/// Messages the driver sends.
#[derive(Clone, Debug, PartialEq)]
pub enum FromDriver ("FromDriver", mirror FromDriverMirror) {
    Welcome(Welcome),
    /// The Hello was refused; the driver closes the connection.
    Rejected {
        reason: String,
        /// The driver was only too busy to take the connection (too many
        /// others had not said hello yet): connecting again after a pause
        /// will do. Any other refusal would be repeated.
        #[serde(
            default,
            deserialize_with = "nil_as_default",
            skip_serializing_if = "std::ops::Not::not"
        )]
        retry_later: bool,
    },
    Blocks {
        blocks: Vec<WireBlock>,
    },
    /// No more work for this worker: exit cleanly.
    Shutdown {
        reason: String,
    },
    Heartbeat,
    /// A message was refused (e.g. a release of a block the worker does
    /// not hold); the connection stays open.
    Error {
        reason: String,
    },
    Snapshot(RunSnapshot),
}
}

impl Message for FromDriver {
    fn from_tagged<'de, D: Deserializer<'de>>(kind: &str, body: D) -> Result<Self, D::Error> {
        Self::deserialize_tagged(kind, body)
    }

    fn read_directly(kind: &str, payload: &[u8]) -> Option<Self> {
        (kind == "blocks")
            .then(|| crate::protocol::incoming::read_blocks(payload))
            .flatten()
    }

    const TYPES: &'static [&'static str] = &[
        "welcome",
        "rejected",
        "blocks",
        "shutdown",
        "heartbeat",
        "error",
        "snapshot",
    ];

    fn kind(&self) -> &'static str {
        match self {
            FromDriver::Welcome(_) => "welcome",
            FromDriver::Rejected { .. } => "rejected",
            FromDriver::Blocks { .. } => "blocks",
            FromDriver::Shutdown { .. } => "shutdown",
            FromDriver::Heartbeat => "heartbeat",
            FromDriver::Error { .. } => "error",
            FromDriver::Snapshot(_) => "snapshot",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_maps_tagged_with_their_type() {
        let bytes = rmp_serde::to_vec_named(&ToDriver::AcquireBlocks { max: 8 }).unwrap();
        let value: serde_json::Value = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"type": "acquire_blocks", "max": 8})
        );
        let bytes = rmp_serde::to_vec_named(&FromDriver::Heartbeat).unwrap();
        let value: serde_json::Value = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(value, serde_json::json!({"type": "heartbeat"}));
    }

    #[test]
    fn a_hello_from_another_implementation_parses_without_optional_fields() {
        let value = serde_json::json!({
            "type": "hello", "protocol": 1, "token": "t",
            "task_id": "predict", "extra": [1, 2]
        });
        let bytes = rmp_serde::to_vec_named(&value).unwrap();
        let message: ToDriver = rmp_serde::from_slice(&bytes).unwrap();
        let ToDriver::Hello(hello) = message else {
            panic!("not a hello: {message:?}");
        };
        assert_eq!(hello.task_id.as_deref(), Some("predict"));
        assert_eq!(hello.role, Role::Worker);
        assert_eq!((hello.worker_id, hello.pid), (None, 0));
    }

    #[test]
    fn function_code_travels_by_name_and_a_later_kind_decodes_as_unknown() {
        let code = TaskCode {
            kind: CodeKind::ProcessFunction,
            argv: Vec::new(),
            env: BTreeMap::new(),
            timeout_s: None,
            batch_size: 0,
            prefetch: 0,
            function: Some(FunctionCode {
                source: FunctionSource::Pickle("/runs/p.pickle".into()),
                search_path: vec!["/src".into()],
            }),
            resource_tracking: false,
        };
        let bytes = rmp_serde::to_vec_named(&code).unwrap();
        let value: serde_json::Value = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(value["kind"], "process_function");
        assert_eq!(
            value["function"],
            serde_json::json!({"source": {"pickle": "/runs/p.pickle"}, "search_path": ["/src"]})
        );
        let later = serde_json::json!({"kind": "wasm_module", "argv": []});
        let bytes = rmp_serde::to_vec_named(&later).unwrap();
        let decoded: TaskCode = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(decoded.kind, CodeKind::Unknown);
    }

    #[test]
    fn optional_hello_fields_may_be_nil() {
        let value = serde_json::json!({
            "type": "hello", "protocol": 1, "token": "t", "role": null,
            "task_id": "predict", "host": null, "pid": null
        });
        let bytes = rmp_serde::to_vec_named(&value).unwrap();
        let message: ToDriver = rmp_serde::from_slice(&bytes).unwrap();
        let ToDriver::Hello(hello) = message else {
            panic!("not a hello: {message:?}");
        };
        assert_eq!(
            (hello.role, hello.host.as_str(), hello.pid),
            (Role::Worker, "", 0)
        );
    }

    /// The `type` each message is written with is its kind, and a listed type.
    fn assert_types<T: Message + Serialize>(messages: &[T]) {
        for message in messages {
            let bytes = rmp_serde::to_vec_named(message).unwrap();
            let value: serde_json::Value = rmp_serde::from_slice(&bytes).unwrap();
            assert_eq!(value["type"], message.kind());
            assert!(T::TYPES.contains(&message.kind()), "{}", message.kind());
        }
        assert_eq!(messages.len(), T::TYPES.len(), "one example per type");
    }

    #[test]
    fn every_message_type_is_listed_under_its_kind() {
        let reason = || "r".to_string();
        assert_types(&[
            ToDriver::Hello(Hello {
                protocol: 1,
                token: reason(),
                role: Role::Observer,
                task_id: None,
                worker_id: None,
                job_id: None,
                host: reason(),
                pid: 0,
            }),
            ToDriver::AcquireBlocks { max: 1 },
            ToDriver::ReleaseBlocks { results: vec![] },
            ToDriver::Heartbeat,
            ToDriver::Draining {
                reason: reason(),
                out_of_time: false,
                by_choice: false,
            },
            ToDriver::CannotServe { reason: reason() },
            ToDriver::ReturnBlocks {
                block_ids: vec![],
                reason: reason(),
            },
            ToDriver::GetSnapshot,
        ]);
        assert_types(&[
            FromDriver::Welcome(Welcome {
                worker_id: 0,
                heartbeat_interval_s: 1.0,
                heartbeat_misses: 1,
                code: None,
                longest_block_s: None,
            }),
            FromDriver::Rejected {
                reason: reason(),
                retry_later: true,
            },
            FromDriver::Blocks { blocks: vec![] },
            FromDriver::Shutdown { reason: reason() },
            FromDriver::Heartbeat,
            FromDriver::Error { reason: reason() },
            FromDriver::Snapshot(RunSnapshot {
                pipeline: reason(),
                tasks: vec![],
                seconds: 0.0,
            }),
        ]);
    }
}
