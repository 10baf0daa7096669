//! slurmrestd's OpenAPI v0.0.38 (SLURM 22.05), as far as daisy uses it:
//! the request and response bodies, and what they mean. Pure: no I/O, so
//! every rule is tested on bodies recorded from the real slurmrestd
//! (`samples/`).
//!
//! The types follow the schema the daemon serves at `GET /openapi/v3`,
//! except where the daemon's answers differ from it (see the quirks in
//! the module doc of `slurmrestd`): every response field is optional and
//! unknown ones are ignored, so other 0.0.38 builds parse too.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::sbatch::squeue::{self, ExitCode, Record};

/// The path prefix of every v0.0.38 endpoint.
pub const API_PREFIX: &str = "/slurm/v0.0.38";

/// `POST /slurm/v0.0.38/job/submit`: the script and its job's properties.
#[derive(Debug, Serialize)]
pub struct JobSubmission {
    pub script: String,
    pub job: JobProperties,
}

/// `v0.0.38_job_properties`: what sbatch would have read from the
/// command line and the script's `#SBATCH` lines (slurmrestd reads
/// neither). Unset fields are left out, so the cluster's defaults apply.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct JobProperties {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `0-<N-1>[%cap]`, as sbatch's `--array`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub array: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qos: Option<String>,
    /// Minutes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpus_per_task: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub minimum_nodes: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub maximum_nodes: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks_per_node: Option<u32>,
    /// Megabytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_per_node: Option<u64>,
    /// Megabytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_per_cpu: Option<u64>,
    /// sbatch's `--gres` syntax: `gpu:2`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gres: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_per_node: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpus_per_task: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub constraints: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dependency: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub licenses: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wckey: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mail_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mail_user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nice: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hold: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oversubscribe: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current_working_directory: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standard_output: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standard_error: Option<String>,
    /// Required by slurmrestd ("environment must be set"), and all the
    /// job gets: nothing is inherited from the driver.
    pub environment: Environment,
}

/// The job's whole environment, a JSON object (22.05 refuses the `K=V`
/// list of later API versions). It holds the run token, so `Debug` shows
/// names only and the request body must never be logged.
#[derive(Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Environment(pub BTreeMap<String, String>);

impl fmt::Debug for Environment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

/// One entry of a response's `errors`. The schema names the number
/// `error_number`; the daemon also answers `error_code` (submissions) and
/// `errno` (partitions), so all three are read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct ApiError {
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub error_number: Option<i64>,
    #[serde(default)]
    pub error_code: Option<i64>,
    #[serde(default)]
    pub errno: Option<i64>,
    #[serde(default)]
    pub description: Option<String>,
}

impl ApiError {
    /// SLURM's error number, whichever key it came under.
    pub fn number(&self) -> Option<i64> {
        self.error_number.or(self.error_code).or(self.errno)
    }
}

/// SLURM's error numbers that daisy tells apart (slurm_errno.h).
pub mod errno {
    /// "Unspecified error": what a failed job listing always says,
    /// whether slurmctld is down or refused the token.
    pub const UNSPECIFIED: i64 = -1;
    /// "Invalid job id specified": slurmctld does not know the job.
    pub const INVALID_JOB_ID: i64 = 2017;
    /// "Zero Bytes were transmitted or received": slurmctld closed the
    /// connection, which is how it refuses a token it cannot verify.
    pub const ZERO_BYTES: i64 = 5005;
    /// "Failure during parsing": slurmrestd could not read a job
    /// property; which one is only in slurmrestd's own log.
    pub const PARSING: i64 = 9001;
}

/// Any response: enough to read its errors when nothing else matters
/// (job cancellation answers with nothing more).
#[derive(Debug, Default, Deserialize)]
pub struct Reply {
    #[serde(default)]
    pub errors: Vec<ApiError>,
}

/// `v0.0.38_job_submission_response`. A `job_id` means the job was
/// queued, even when `errors` is not empty (a held job comes with
/// "Job is in held state, pending scheduler release").
#[derive(Debug, Default, Deserialize)]
pub struct SubmitResponse {
    #[serde(default)]
    pub errors: Vec<ApiError>,
    #[serde(default)]
    pub job_id: Option<u64>,
    #[serde(default)]
    pub job_submit_user_msg: Option<String>,
}

/// `v0.0.38_jobs_response` (`GET /jobs`).
#[derive(Debug, Default, Deserialize)]
pub struct JobsResponse {
    #[serde(default)]
    pub errors: Vec<ApiError>,
    #[serde(default)]
    pub jobs: Vec<JobInfo>,
}

/// The fields of `v0.0.38_job_response_properties` daisy reads.
///
/// An array shows as one record per element that started (its own
/// `job_id`, `array_task_id` set) and one record for the elements still
/// pending, or cancelled while pending (`job_id` = `array_job_id`,
/// `array_task_id` null, `array_task_string` "1-2%1").
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct JobInfo {
    #[serde(default)]
    pub job_id: u64,
    /// 0 for a job that is not an array.
    #[serde(default)]
    pub array_job_id: Option<u64>,
    #[serde(default)]
    pub array_task_id: Option<u32>,
    #[serde(default)]
    pub array_task_string: Option<String>,
    #[serde(default)]
    pub job_state: Option<String>,
    /// A wait status, not an exit code: `exit 3` shows as 768, a SIGKILL
    /// as 9.
    #[serde(default)]
    pub exit_code: Option<i64>,
}

/// The errors as one line: "Invalid partition name specified (SLURM error
/// 2000)", joined by "; ".
pub fn error_text(errors: &[ApiError]) -> String {
    let texts: Vec<String> = errors.iter().map(one_error).collect();
    texts.join("; ")
}

fn one_error(error: &ApiError) -> String {
    let text = error
        .description
        .as_deref()
        .or(error.error.as_deref())
        .unwrap_or("no message");
    match error.number() {
        Some(number) => format!("{text} (SLURM error {number})"),
        None => text.to_owned(),
    }
}

/// Whether any of `errors` has SLURM error number `number`.
pub fn has_errno(errors: &[ApiError], number: i64) -> bool {
    errors.iter().any(|error| error.number() == Some(number))
}

/// The listing as the sbatch backend's [`Record`]s (array job id, the
/// indices a record covers, raw id, state, exit), so both backends read
/// states alike. Records of jobs that are not arrays have no indices.
pub fn records(jobs: &[JobInfo]) -> Vec<Record> {
    jobs.iter().filter_map(record).collect()
}

fn record(job: &JobInfo) -> Option<Record> {
    let array = job.array_job_id.filter(|id| *id != 0);
    let indices = match (array, job.array_task_id) {
        (None, _) => Vec::new(),
        (Some(_), Some(index)) => vec![index],
        (Some(_), None) => squeue::expand_indices(job.array_task_string.as_deref()?)?,
    };
    let state = job.job_state.as_deref()?;
    Some(Record {
        job: array.unwrap_or(job.job_id).to_string(),
        indices,
        raw: job.job_id.to_string(),
        state: state.trim().to_ascii_uppercase(),
        exit: job.exit_code.map(wait_status),
    })
}

/// A wait status as SLURM's `code:signal`: 768 → 3:0, 9 → 0:9.
pub fn wait_status(status: i64) -> ExitCode {
    ExitCode {
        code: ((status >> 8) & 0xff) as i32,
        signal: (status & 0x7f) as i32,
    }
}

/// What a JWT says about itself (its payload, not verified: only
/// slurmctld can, with its key).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
pub struct TokenClaims {
    /// Expiry, seconds since the epoch.
    #[serde(default)]
    pub exp: Option<u64>,
    /// The SLURM user name the token was made for.
    #[serde(default)]
    pub sun: Option<String>,
}

/// The claims of a `header.payload.signature` token; `None` when it is
/// not one (then nothing is checked before slurmctld sees it).
pub fn token_claims(token: &str) -> Option<TokenClaims> {
    let payload = token.trim().split('.').nth(1)?;
    serde_json::from_slice(&base64url_decode(payload)?).ok()
}

/// Unpadded base64url (RFC 4648 §5), as JWTs use it.
fn base64url_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'-' => Some(62),
        b'_' => Some(63),
        _ => None,
    };
    let mut bytes = Vec::with_capacity(text.len() * 3 / 4);
    let (mut buffer, mut bits) = (0u32, 0u32);
    for c in text.trim_end_matches('=').bytes() {
        buffer = ((buffer << 6) | u32::from(value(c)?)) & 0xffff;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            bytes.push((buffer >> bits) as u8);
        }
    }
    Some(bytes)
}
