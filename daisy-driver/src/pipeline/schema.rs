//! The pipeline file as written: every table and field a user may give,
//! each declared once, with what it means, its default and the rule its
//! value keeps.
//!
//! These structs are the file's vocabulary: a key they do not declare is
//! refused (with the declared one it most resembles), and their field
//! order is the order problems are found in. `reader` fills them in,
//! reporting every refused value and missing field; `resolve` turns them
//! into the [`Pipeline`](super::Pipeline) (defaults that hang on other
//! fields, the task's launcher laid over `[launcher]`, upstream ids made
//! positions), checking the rules between fields.
//!
//! How to read a field: `default` may be left out (a bare `default` is
//! the type's: 0, false, empty); an `Option` with a `deserialize_with` and
//! no `default` is required; `deserialize_with = "with::rule"` checks the
//! value with `rules::rule`, any other value is checked by its type alone.

use super::rules::with;
use super::{LauncherKind, DEFAULT_MAX_WORKERS, DEFAULT_MAX_WORKER_RESTARTS};
use daisy_core::protocol::FunctionSource;
use daisy_core::{Fit, Roi};
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::time::Duration;

/// A table of the file as it was written: a launcher table, which
/// `resolve` lays over another before reading it.
pub(super) type Table = Map<String, Value>;

/// Resource name to amount: the budget, or what one worker requires.
pub(super) type Amounts = BTreeMap<String, u64>;

/// The top level of the file.
#[derive(Deserialize)]
pub(super) struct PipelineFile {
    /// Names the run: the default run directory is `daisy_run/<name>`, so
    /// it is a directory name. Required.
    #[serde(deserialize_with = "with::directory_name")]
    pub(super) name: Option<String>,
    /// `[resources]`: the global budget, resource name to a [`Pool`];
    /// every running worker holds its task's `requires` of it.
    #[serde(default)]
    pub(super) resources: BTreeMap<String, Pool>,
    /// `[launcher]`: how workers are started, a [`LauncherTable`]; local
    /// processes when it is left out.
    #[serde(default)]
    pub(super) launcher: Option<Table>,
    /// Whether workers measure what each block cost (CPU, memory, IO,
    /// GPU); every task's unless it says otherwise.
    #[serde(default)]
    pub(super) resource_tracking: bool,
    /// The `[[task]]` tables, each a [`TaskTable`]. Required, at least one.
    #[serde(deserialize_with = "with::task_tables")]
    pub(super) task: Option<Vec<Value>>,
}

/// One key of `[resources]` as written: `gpu = 4` (the ids `0` to `3`)
/// or `gpu = [0, 2]` (exactly those).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Pool {
    Count(u64),
    Ids(Vec<String>),
}

impl Default for Pool {
    fn default() -> Self {
        Pool::Count(0)
    }
}

impl<'de> Deserialize<'de> for Pool {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        with::pool(deserializer)
    }
}

/// A launcher table (`[launcher]`, or a task's `launcher`): the backend,
/// read as this, and the options of its jobs, read from the same table
/// as the launchers' own [`launchers::ClusterOptions`].
#[derive(Default, Deserialize)]
pub(super) struct LauncherTable {
    /// Which backend starts the workers.
    #[serde(default)]
    pub(super) kind: LauncherKind,
}

/// One `[[task]]` table.
#[derive(Deserialize)]
pub(super) struct TaskTable {
    /// Names the task: its done markers and logs are kept under it, so it
    /// is a directory name; `upstream` lists name tasks by it. Required.
    #[serde(deserialize_with = "with::directory_name")]
    pub(super) id: Option<String>,
    /// The region the task covers, `{ offset = [..], shape = [..] }`.
    /// Required.
    #[serde(deserialize_with = "with::roi")]
    pub(super) total_roi: Option<Roi>,
    /// What one block reads, placed at the origin of the grid. Required.
    #[serde(deserialize_with = "with::roi")]
    pub(super) read_roi: Option<Roi>,
    /// What one block writes, inside `read_roi`. Required.
    #[serde(deserialize_with = "with::roi")]
    pub(super) write_roi: Option<Roi>,
    /// How blocks at the border of `total_roi` are treated; daisy-core's
    /// default (`valid`) when left out.
    #[serde(default)]
    pub(super) fit: Option<Fit>,
    /// Whether blocks whose reads overlap others' writes wait for them;
    /// daisy-core's default (true) when left out.
    #[serde(default)]
    pub(super) read_write_conflict: Option<bool>,
    /// What one worker of the task takes from `[resources]`.
    #[serde(default)]
    pub(super) requires: Amounts,
    /// Whether each local worker is bound to the `cpu` ids it was given.
    #[serde(default)]
    pub(super) pin: bool,
    /// Workers the driver starts at most; 0 means hand-launched only.
    #[serde(default = "constant::<DEFAULT_MAX_WORKERS>")]
    pub(super) max_workers: u32,
    /// Times a failed block is tried again; daisy-core's default when
    /// left out.
    #[serde(default)]
    pub(super) max_retries: Option<u32>,
    /// Wait before a failed block is tried again, doubling each time;
    /// none when left out.
    #[serde(default, deserialize_with = "with::duration")]
    pub(super) retry_backoff: Option<Duration>,
    /// The longest `retry_backoff` grows to; daisy-core's default when
    /// left out.
    #[serde(default, deserialize_with = "with::duration")]
    pub(super) retry_backoff_max: Option<Duration>,
    /// Unclean worker exits tolerated before the task is abandoned.
    #[serde(default = "constant::<DEFAULT_MAX_WORKER_RESTARTS>")]
    pub(super) max_worker_restarts: u32,
    /// Per-block time limit, after which the worker kills the block.
    #[serde(default, deserialize_with = "with::duration")]
    pub(super) timeout: Option<Duration>,
    /// How long a launched worker may wait for a block before it is let
    /// go; kept until the task has nothing left to hand out when left out.
    #[serde(default, deserialize_with = "with::duration")]
    pub(super) idle_timeout: Option<Duration>,
    /// Blocks a worker takes per request, or `"auto"`; when left out, auto
    /// for Python functions and 1 for commands.
    #[serde(default, deserialize_with = "with::batch_size")]
    pub(super) batch_size: Option<u32>,
    /// Blocks a worker command is fed ahead of the one it works on.
    #[serde(default, deserialize_with = "with::prefetch")]
    pub(super) prefetch: u32,
    /// The ids of the tasks whose blocks this task's blocks read.
    #[serde(default)]
    pub(super) upstream: Vec<String>,
    /// A long-running worker program, fed blocks as JSON lines on stdin.
    /// A task gives exactly one of `command`, `block_command`,
    /// `process_function` and `worker_function`.
    #[serde(default, deserialize_with = "with::command_line")]
    pub(super) command: Option<Vec<String>>,
    /// A process per block, `{placeholders}` filled in.
    #[serde(default, deserialize_with = "with::block_command_line")]
    pub(super) block_command: Option<Vec<String>>,
    /// A Python function called with each block in the worker's process.
    #[serde(default, deserialize_with = "with::function_source")]
    pub(super) process_function: Option<FunctionSource>,
    /// A Python function that asks for blocks itself.
    #[serde(default, deserialize_with = "with::function_source")]
    pub(super) worker_function: Option<FunctionSource>,
    /// Where a Python function's worker imports from.
    #[serde(default)]
    pub(super) python_path: Vec<String>,
    /// What is started as this task's worker instead of the driver's
    /// choice (daisy-worker, or a Python worker for function tasks).
    #[serde(default, deserialize_with = "with::command_line")]
    pub(super) worker_program: Option<Vec<String>>,
    /// Extra environment variables for the user's command.
    #[serde(default, deserialize_with = "with::environment")]
    pub(super) env: BTreeMap<String, String>,
    /// The task's own launcher table, laid over `[launcher]`: a cheap
    /// task as local processes, a GPU task on another partition.
    #[serde(default)]
    pub(super) launcher: Option<Table>,
    /// Blocks not to run: a Zarr array of one flag per block, a path
    /// relative to the pipeline file.
    #[serde(default, deserialize_with = "launchers::non_empty")]
    pub(super) skip_mask: Option<String>,
    /// The pipeline's `resource_tracking`, for this task.
    #[serde(default)]
    pub(super) resource_tracking: Option<bool>,
    /// Zarr arrays the blocks write into (paths relative to the pipeline
    /// file): two blocks writing into one shard, or into one chunk of an
    /// unsharded array, are never in flight at once.
    #[serde(default)]
    pub(super) writes: Vec<String>,
    /// Accepts blocks that write parts of chunks other blocks also write
    /// (refused otherwise): they run one at a time per chunk.
    #[serde(default)]
    pub(super) share_chunks: bool,
}

/// serde's `default` takes a function: this one gives the constant it is
/// named with, `constant::<DEFAULT_MAX_WORKERS>`.
fn constant<const N: u32>() -> u32 {
    N
}

/// The fields `T`'s serde derive declares, in order, as the derive hands
/// them to `deserialize_struct`: read from the derive itself, so a list
/// of them cannot drift from the struct. Empty if `T` is no struct.
pub(super) fn declared_fields<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut fields = None;
    let _refused = T::deserialize(FieldRecorder {
        fields: &mut fields,
    });
    fields.unwrap_or_default()
}

/// A deserializer with no data: it only writes down the fields a struct
/// asks it for, then refuses.
struct FieldRecorder<'a> {
    fields: &'a mut Option<&'static [&'static str]>,
}

impl<'de> Deserializer<'de> for FieldRecorder<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("a field recorder holds no value"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.fields = Some(fields);
        Err(de::Error::custom("the fields are recorded"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map
        enum identifier ignored_any
    }
}
