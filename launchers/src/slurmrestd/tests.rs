//! The launcher's logic against a stand-in slurmrestd (a tiny HTTP server
//! on loopback answering with bodies recorded from the real one), and the
//! pure parts (request building, response reading) on those recordings.
//! What slurmrestd itself does is tested in `tests/slurmrestd.rs`.
//!
//! `samples/` holds answers of slurmrestd 22.05.8 (openapi/v0.0.38,
//! Debian bookworm) on the local test cluster: `jobs.json` is a `GET
//! /jobs` listing trimmed to the jobs of one session (the first record
//! whole, the others to the fields that matter): array 251 of three that
//! completed; 254 `exit 3`; held arrays 255 (0-1) and 256 (0-3%2, element
//! 1 cancelled alone, then the array); 257 (0-2%1, `sleep 40`) with two
//! elements done and one running; 258 killed by SIGKILL; 259 over its
//! 1-minute limit; 262 (0-1) with element 0 cancelled while running; 263
//! held; 264 (0-2) whose elements exit with their index.
//! `jobs_pending_array.json` is array 257 earlier, one element running and
//! two pending. The other samples are what their names say; the refused
//! token ones were answered to a token with one character changed, the
//! controller-down ones by a second slurmrestd whose slurm.conf named a
//! port no slurmctld listens on.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::api::*;
use super::client::{self, classify, Failure, Refusal};
use super::job::{self, job_for};
use super::*;
use crate::sbatch::squeue::ExitCode;
use crate::ClusterOptions;
use crate::{JobId, Launcher, Paced};

const SECRET: &str = "tok-5ecr3t";

const JOBS: &str = include_str!("samples/jobs.json");
const JOBS_PENDING_ARRAY: &str = include_str!("samples/jobs_pending_array.json");
const JOBS_LOAD_FAILED: &str = include_str!("samples/jobs_load_failed.json");
const SUBMIT_OK: &str = include_str!("samples/submit_ok.json");
const SUBMIT_BAD_PARTITION: &str = include_str!("samples/submit_bad_partition.json");
const SUBMIT_NO_ENVIRONMENT: &str = include_str!("samples/submit_no_environment.json");
const SUBMIT_TOKEN_REFUSED: &str = include_str!("samples/submit_token_refused.json");
const SUBMIT_CONTROLLER_DOWN: &str = include_str!("samples/submit_controller_down.json");
const DELETE_OK: &str = include_str!("samples/delete_ok.json");
const DELETE_UNKNOWN: &str = include_str!("samples/delete_unknown.json");
const DELETE_TOKEN_REFUSED: &str = include_str!("samples/delete_token_refused.json");

/// The payload of a token `scontrol token lifespan=3600` printed (the
/// signature is replaced: only slurmctld checks it).
/// A token `scontrol token` printed (its `exp` is in the past by now: only
/// for reading claims).
const RECORDED_TOKEN: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.\
    eyJleHAiOjE3OTU5NDczNjIsImlhdCI6MTc5NTk0Mzc2Miwic3VuIjoicm9vdCJ9.signature";

// ---------------------------------------------------------------------
// A stand-in slurmrestd.

/// A request the stand-in received.
#[derive(Clone, Debug)]
struct Seen {
    /// "POST /slurm/v0.0.38/job/submit".
    route: String,
    headers: Vec<(String, String)>,
    body: String,
}

type Answers = BTreeMap<String, VecDeque<(u16, String)>>;

/// Answers each route from its queue (the last answer repeats; an
/// unscripted route gets 404) and records every request.
struct FakeRestd {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    answers: Arc<Mutex<Answers>>,
    dir: tempfile::TempDir,
}

impl FakeRestd {
    fn new() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Mutex::new(Answers::new()));
        let (s, a) = (seen.clone(), answers.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                serve(stream, &s, &a);
            }
        });
        let dir = tempfile::tempdir().unwrap();
        Self {
            url,
            seen,
            answers,
            dir,
        }
    }

    /// Queues an answer for `route` ("GET /jobs": the API prefix is added).
    fn answer(&self, route: &str, status: u16, body: &str) {
        let (method, path) = route.split_once(' ').unwrap();
        let route = format!("{method} {API_PREFIX}{path}");
        let mut answers = self.answers.lock().unwrap();
        answers
            .entry(route)
            .or_default()
            .push_back((status, body.to_owned()));
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn routes(&self) -> Vec<String> {
        let prefix = |route: &str| route.replacen(API_PREFIX, "", 1);
        self.seen().iter().map(|seen| prefix(&seen.route)).collect()
    }

    fn launcher(&self, token: &str) -> SlurmrestdLauncher {
        SlurmrestdLauncher::new(&self.url, "alice", token)
            .unwrap()
            .with_retry_delays(vec![Duration::ZERO; 3])
            .with_poll_interval(Duration::from_secs(60))
            .with_environment(vec![("PATH".into(), "/usr/bin:/bin".into())])
            .with_cancel_on_drop(false)
    }

    fn requests(&self, first: u64, count: u64) -> Vec<WorkerRequest> {
        (first..first + count)
            .map(|worker_id| WorkerRequest {
                task_id: "predict".into(),
                worker_id,
                program: "/bin/daisy-worker".into(),
                args: vec!["--verbose".into()],
                env: vec![(
                    "DAISY_CONTEXT".into(),
                    format!("{{\"token\":\"{SECRET}\"}}"),
                )],
                working_dir: self.dir.path().into(),
                log_dir: self.dir.path().join("logs"),
                requires: BTreeMap::from([("cpu".into(), 2), ("mem".into(), 512)]),
                cluster: ClusterOptions::default(),
            })
            .collect()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// One HTTP/1.1 exchange, then the connection is closed.
fn serve(stream: TcpStream, seen: &Mutex<Vec<Seen>>, answers: &Mutex<Answers>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let route = line
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    let mut headers: Vec<(String, String)> = Vec::new();
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).unwrap();
        match header.trim_end().split_once(':') {
            Some((name, value)) => headers.push((name.to_ascii_lowercase(), value.trim().into())),
            None => break,
        }
    }
    let length = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .map_or(0, |(_, value)| value.parse().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    let body = String::from_utf8(body).unwrap();
    let (status, reply) = next_answer(answers, &route);
    seen.lock().unwrap().push(Seen {
        route,
        headers,
        body,
    });
    let mut stream = stream;
    let head = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reply.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(reply.as_bytes());
}

fn next_answer(answers: &Mutex<Answers>, route: &str) -> (u16, String) {
    let mut answers = answers.lock().unwrap();
    match answers.get_mut(route) {
        Some(queue) if queue.len() > 1 => queue.pop_front().unwrap(),
        Some(queue) if !queue.is_empty() => queue[0].clone(),
        _ => (404, "{}".into()),
    }
}

/// The recorded submission answer, for job `id`.
fn submitted(id: u64) -> String {
    SUBMIT_OK.replace("\"job_id\": 251", &format!("\"job_id\": {id}"))
}

fn ids(results: Vec<Result<JobId, LaunchError>>) -> Vec<String> {
    results.into_iter().map(|r| r.unwrap().0).collect()
}

/// A token that expires in 2100: tests must not depend on today's date.
fn live_token() -> String {
    token_expiring(4_102_444_800)
}

/// A token whose `exp` is `exp`.
fn token_expiring(exp: u64) -> String {
    let payload = format!("{{\"exp\":{exp},\"sun\":\"alice\"}}");
    format!("x.{}.y", base64url(payload.as_bytes()))
}

fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut text = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().fold(0u32, |n, b| (n << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            text.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    text
}

// ---------------------------------------------------------------------
// The launcher against the stand-in.

#[test]
fn a_group_is_one_submission_with_the_context_in_the_environment_only() {
    let fake = FakeRestd::new();
    fake.answer("POST /job/submit", 200, &submitted(77));
    let mut launcher = fake.launcher(&live_token());
    assert_eq!(
        ids(launcher.start_many(&fake.requests(10, 3))),
        ["77_0", "77_1", "77_2"]
    );
    let seen = fake.seen();
    assert_eq!(fake.routes(), ["POST /job/submit"]);
    let header = |name: &str| {
        let found = seen[0].headers.iter().find(|(n, _)| n == name);
        found.map(|(_, value)| value.clone())
    };
    assert_eq!(header("x-slurm-user-name").as_deref(), Some("alice"));
    assert_eq!(
        header("x-slurm-user-token").as_deref(),
        Some(live_token().as_str())
    );
    let body: serde_json::Value = serde_json::from_str(&seen[0].body).unwrap();
    let job = &body["job"];
    assert_eq!(job["array"], "0-2");
    assert_eq!(job["name"], "daisy-predict");
    assert_eq!(
        (
            job["cpus_per_task"].as_u64(),
            job["memory_per_node"].as_u64()
        ),
        (Some(2), Some(512))
    );
    let output = fake.path("logs/worker-%A_%a.out").display().to_string();
    assert_eq!(job["standard_output"], output.as_str());
    assert_eq!(job["environment"]["PATH"], "/usr/bin:/bin");
    assert!(job["environment"]["DAISY_CONTEXT"]
        .as_str()
        .unwrap()
        .contains(SECRET));
    let script = body["script"].as_str().unwrap();
    assert!(script.contains("exec /bin/daisy-worker --verbose") && !script.contains(SECRET));
    let kept = std::fs::read_to_string(fake.path("logs/worker-10-12.sbatch")).unwrap();
    assert_eq!(kept, script);
    assert_eq!(launcher.calls().submissions, 1);
}

#[test]
fn one_listing_per_poll_and_each_end_reported_once() {
    let fake = FakeRestd::new();
    fake.answer("POST /job/submit", 200, &submitted(264));
    fake.answer("GET /jobs", 200, JOBS);
    let mut launcher = fake.launcher(&live_token());
    ids(launcher.start_many(&fake.requests(0, 3)));
    let ends = launcher.poll_ended();
    let failed = |code| JobEnd::Failed {
        reason: format!("SLURM job state FAILED (exit code {code})"),
    };
    let expected = [
        (0, JobId("264_0".into()), JobEnd::Exited { code: 0 }),
        (1, JobId("264_1".into()), failed(1)),
        (2, JobId("264_2".into()), failed(2)),
    ];
    assert_eq!(ends, expected);
    assert!(launcher.poll_ended().is_empty());
    assert_eq!(launcher.calls().polls, 1, "nothing left to ask about");
}

#[test]
fn pending_and_running_elements_keep_their_slots() {
    let fake = FakeRestd::new();
    fake.answer("POST /job/submit", 200, &submitted(257));
    fake.answer("GET /jobs", 200, JOBS_PENDING_ARRAY);
    let mut launcher = fake
        .launcher(&live_token())
        .with_poll_interval(Duration::ZERO);
    ids(launcher.start_many(&fake.requests(0, 3)));
    assert!(launcher.poll_ended().is_empty());
    assert!(launcher.poll_ended().is_empty());
    assert_eq!(launcher.calls().polls, 2);
}

#[test]
fn an_element_slurmctld_forgot_ended_unknown_and_the_others_cancelled() {
    let fake = FakeRestd::new();
    fake.answer("POST /job/submit", 200, &submitted(256));
    fake.answer("GET /jobs", 200, JOBS);
    let mut launcher = fake.launcher(&live_token());
    ids(launcher.start_many(&fake.requests(0, 4)));
    let ends = launcher.poll_ended();
    let kinds: Vec<(u64, &JobEnd)> = ends.iter().map(|(w, _, end)| (*w, end)).collect();
    assert_eq!(kinds[0], (0, &JobEnd::Cancelled));
    assert!(
        matches!(kinds[1], (1, JobEnd::Failed { reason }) if reason.contains("256_1 is unknown to slurmctld"))
    );
    assert_eq!(
        &kinds[2..],
        [(2, &JobEnd::Cancelled), (3, &JobEnd::Cancelled)]
    );
}

#[test]
fn a_failed_listing_reports_nothing_and_backs_off() {
    let fake = FakeRestd::new();
    fake.answer("POST /job/submit", 200, &submitted(251));
    fake.answer("GET /jobs", 500, JOBS_LOAD_FAILED);
    let mut launcher = fake.launcher(&live_token());
    ids(launcher.start_many(&fake.requests(0, 1)));
    assert!(launcher.poll_ended().is_empty());
    assert!(launcher.poll_ended().is_empty(), "backing off: no request");
    assert_eq!(launcher.calls().polls, 1);
}

#[test]
fn a_listing_that_is_not_json_reports_nothing() {
    let fake = FakeRestd::new();
    fake.answer("POST /job/submit", 200, &submitted(251));
    fake.answer("GET /jobs", 502, "<html>Bad Gateway</html>");
    fake.answer("GET /jobs", 401, "Authentication failure");
    let mut launcher = fake
        .launcher(&live_token())
        .with_poll_interval(Duration::ZERO);
    ids(launcher.start_many(&fake.requests(0, 1)));
    assert!(launcher.poll_ended().is_empty());
    assert!(launcher.poll_ended().is_empty());
    assert_eq!(launcher.calls().polls, 2);
}

#[test]
fn transient_submission_failures_are_retried() {
    let fake = FakeRestd::new();
    fake.answer("POST /job/submit", 500, SUBMIT_CONTROLLER_DOWN);
    fake.answer("POST /job/submit", 200, &submitted(8));
    let mut launcher = fake.launcher(&live_token());
    assert_eq!(launcher.start(&fake.requests(0, 1)[0]).unwrap().0, "8_0");
    assert_eq!(launcher.calls().submissions, 2);
}

#[test]
fn an_unreachable_slurmrestd_fails_transiently_after_the_retries() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let fake = FakeRestd::new();
    let mut launcher = SlurmrestdLauncher::new(&url, "alice", &live_token())
        .unwrap()
        .with_retry_delays(vec![Duration::ZERO; 3])
        .with_cancel_on_drop(false);
    let error = launcher.start(&fake.requests(0, 1)[0]).unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(
            error,
            LaunchError::Submit {
                permanent: false,
                ..
            }
        ),
        "{message}"
    );
    assert!(message.contains("Connection refused"), "{message}");
    assert_eq!(launcher.calls().submissions, 4);
}

#[test]
fn a_bad_partition_fails_every_worker_for_good_with_slurms_message() {
    let fake = FakeRestd::new();
    fake.answer("POST /job/submit", 500, SUBMIT_BAD_PARTITION);
    let mut launcher = fake.launcher(&live_token());
    let results = launcher.start_many(&fake.requests(0, 2));
    for result in results {
        let error = result.unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(
                error,
                LaunchError::Submit {
                    permanent: true,
                    ..
                }
            ),
            "{message}"
        );
        assert!(
            message.contains("Invalid partition name specified (SLURM error 2000)"),
            "{message}"
        );
    }
    assert_eq!(launcher.calls().submissions, 1);
}

#[test]
fn a_refused_token_is_a_permanent_error_saying_how_to_renew() {
    let fake = FakeRestd::new();
    fake.answer("POST /job/submit", 500, SUBMIT_TOKEN_REFUSED);
    let mut launcher = fake.launcher(&live_token());
    let error = launcher.start(&fake.requests(0, 1)[0]).unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(
            error,
            LaunchError::Submit {
                permanent: true,
                ..
            }
        ),
        "{message}"
    );
    assert!(
        message.contains("refuses a token") && message.contains("scontrol token"),
        "{message}"
    );
    assert!(!message.contains(&live_token()), "{message}");
}

#[test]
fn an_expired_token_is_refused_before_any_request() {
    let fake = FakeRestd::new();
    let mut launcher = fake.launcher(&token_expiring(1_000_000_000));
    let error = launcher.start(&fake.requests(0, 1)[0]).unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(
            error,
            LaunchError::Submit {
                permanent: true,
                ..
            }
        ),
        "{message}"
    );
    assert!(
        message.contains("SLURM_JWT expired") && message.contains("scontrol token"),
        "{message}"
    );
    assert!(fake.seen().is_empty());
}

#[test]
fn a_directive_without_translation_is_refused_before_submission() {
    let fake = FakeRestd::new();
    let mut launcher = fake.launcher(&live_token());
    let mut requests = fake.requests(0, 1);
    requests[0].cluster.directives = vec!["--exclusive".into()];
    let error = launcher.start(&requests[0]).unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(
            error,
            LaunchError::Submit {
                permanent: true,
                ..
            }
        ),
        "{message}"
    );
    assert!(
        message.contains("--exclusive is not translated"),
        "{message}"
    );
    assert!(fake.seen().is_empty());
}

#[test]
fn cancel_deletes_arrays_whole_or_by_element_and_reports_each_once() {
    let fake = FakeRestd::new();
    fake.answer("POST /job/submit", 200, &submitted(251));
    fake.answer("POST /job/submit", 200, &submitted(300));
    for id in ["251_0", "251", "300"] {
        fake.answer(&format!("DELETE /job/{id}"), 200, DELETE_OK);
    }
    let mut launcher = fake.launcher(&live_token());
    ids(launcher.start_many(&fake.requests(0, 3)));
    ids(launcher.start_many(&fake.requests(5, 1)));
    launcher.cancel(&[0]);
    launcher.cancel(&[1, 2, 99]);
    launcher.cancel_all();
    let routes = fake.routes();
    assert_eq!(
        &routes[2..],
        ["DELETE /job/251_0", "DELETE /job/251", "DELETE /job/300"]
    );
    let ends = launcher.poll_ended();
    assert_eq!(ends.len(), 4);
    assert!(ends.iter().all(|(_, _, end)| *end == JobEnd::Cancelled));
    assert!(launcher.poll_ended().is_empty());
    assert_eq!(launcher.calls().cancels, 3);
    assert_eq!(launcher.calls().polls, 0);
}

#[test]
fn cancelling_a_job_slurmctld_forgot_is_quiet_and_not_retried() {
    let fake = FakeRestd::new();
    fake.answer("POST /job/submit", 200, &submitted(99999));
    fake.answer("DELETE /job/99999", 500, DELETE_UNKNOWN);
    let mut launcher = fake.launcher(&live_token());
    ids(launcher.start_many(&fake.requests(0, 1)));
    launcher.cancel_all();
    assert_eq!(launcher.calls().cancels, 1);
}

#[test]
fn dropping_the_launcher_cancels_its_jobs() {
    let fake = FakeRestd::new();
    fake.answer("POST /job/submit", 200, &submitted(42));
    fake.answer("DELETE /job/42", 200, DELETE_OK);
    let mut launcher = fake.launcher(&live_token()).with_cancel_on_drop(true);
    ids(launcher.start_many(&fake.requests(0, 2)));
    drop(launcher);
    assert_eq!(fake.routes(), ["POST /job/submit", "DELETE /job/42"]);
}

// ---------------------------------------------------------------------
// Responses.

#[test]
fn the_listing_becomes_records_with_indices_and_exit_codes() {
    let reply: JobsResponse = serde_json::from_str(JOBS).unwrap();
    let records = records(&reply.jobs);
    assert_eq!(records.len(), 17);
    let find = |raw: &str| records.iter().find(|r| r.raw == raw).unwrap();
    let (done, exit3, held) = (find("252"), find("254"), find("256"));
    assert_eq!(
        (done.job.as_str(), done.indices.as_slice()),
        ("251", &[0][..])
    );
    assert_eq!(exit3.exit, Some(ExitCode { code: 3, signal: 0 }));
    assert!(exit3.indices.is_empty() && exit3.state == "FAILED");
    assert_eq!(
        (held.indices.as_slice(), held.state.as_str()),
        (&[0, 2, 3][..], "CANCELLED")
    );
    assert_eq!(find("258").exit, Some(ExitCode { code: 0, signal: 9 }));
    assert_eq!(find("259").state, "TIMEOUT");
    let pending: JobsResponse = serde_json::from_str(JOBS_PENDING_ARRAY).unwrap();
    let pending = super::api::records(&pending.jobs);
    assert_eq!(pending[1].indices, [1, 2]);
}

#[test]
fn states_map_like_the_sbatch_backends() {
    let reply: JobsResponse = serde_json::from_str(JOBS).unwrap();
    let records = records(&reply.jobs);
    let end = |raw: &str| {
        let record = records.iter().find(|r| r.raw == raw).unwrap();
        crate::sbatch::squeue::job_end(&record.state, record.exit)
    };
    assert_eq!(end("252"), Some(JobEnd::Exited { code: 0 }));
    assert_eq!(end("265"), Some(JobEnd::Cancelled));
    assert_eq!(end("262"), None, "running");
    assert_eq!(end("263"), None, "held");
    let reason = |raw| match end(raw) {
        Some(JobEnd::Failed { reason }) => reason,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        reason("258"),
        "SLURM job state FAILED (exit code 0, signal 9)"
    );
    assert_eq!(
        reason("259"),
        "SLURM job state TIMEOUT (exit code 0, signal 15)"
    );
}

#[test]
fn wait_statuses_become_exit_codes_and_signals() {
    assert_eq!(wait_status(768), ExitCode { code: 3, signal: 0 });
    assert_eq!(wait_status(9), ExitCode { code: 0, signal: 9 });
    assert_eq!(wait_status(0), ExitCode { code: 0, signal: 0 });
}

#[test]
fn recorded_refusals_are_classified() {
    let failure = |status, body: &str| {
        let reply: Reply = serde_json::from_str(body).unwrap();
        classify(status, &reply.errors, "alice")
    };
    let kind = |failure: &Failure| match failure {
        Failure::Transient(_) => "transient",
        Failure::Permanent(Refusal::Auth(_)) => "auth",
        Failure::Permanent(Refusal::Refused { .. }) => "refused",
        Failure::Permanent(Refusal::Unexpected(_)) => "unexpected",
    };
    let cases = [
        (
            SUBMIT_BAD_PARTITION,
            "refused",
            "Invalid partition name specified",
        ),
        (
            SUBMIT_NO_ENVIRONMENT,
            "refused",
            "environment must be set (SLURM error 2127)",
        ),
        (SUBMIT_TOKEN_REFUSED, "auth", "Zero Bytes"),
        (DELETE_TOKEN_REFUSED, "auth", "scontrol token"),
        (
            SUBMIT_CONTROLLER_DOWN,
            "transient",
            "Unable to contact slurm controller",
        ),
        (
            JOBS_LOAD_FAILED,
            "transient",
            "Failed while looking for jobs (SLURM error -1)",
        ),
        (DELETE_UNKNOWN, "refused", "Invalid job id specified"),
    ];
    for (body, expected, text) in cases {
        let failure = failure(500, body);
        assert_eq!(kind(&failure), expected, "{failure:?}");
        assert!(failure.message().contains(text), "{failure:?}");
    }
    assert!(failure(500, SUBMIT_NO_ENVIRONMENT)
        .message()
        .contains("its own log says which"));
    assert_eq!(kind(&classify(401, &[], "alice")), "auth");
    assert_eq!(kind(&classify(502, &[], "alice")), "transient");
    let reply: Reply = serde_json::from_str(DELETE_OK).unwrap();
    assert!(reply.errors.is_empty());
}

#[test]
fn a_submission_answer_gives_the_job_id() {
    let reply: SubmitResponse = serde_json::from_str(SUBMIT_OK).unwrap();
    assert_eq!(reply.job_id, Some(251));
    let refused: SubmitResponse = serde_json::from_str(SUBMIT_BAD_PARTITION).unwrap();
    assert_eq!(
        (refused.job_id, refused.errors[0].number()),
        (None, Some(2000))
    );
}

// ---------------------------------------------------------------------
// Requests.

fn rendered(requests: &[WorkerRequest]) -> String {
    crate::sbatch::script::job_script(requests).unwrap().text
}

#[test]
fn the_templates_directives_become_job_properties() {
    let fake = FakeRestd::new();
    let mut requests = fake.requests(4, 2);
    for request in &mut requests {
        request.requires.insert("gpu".into(), 1);
        request.cluster = ClusterOptions {
            partition: Some("gpu".into()),
            account: Some("lab".into()),
            qos: Some("high".into()),
            time: Some("1-02:03:04".into()),
            directives: vec![
                "--hold".into(),
                "-C a100".into(),
                "--comment='two words'".into(),
            ],
            max_array_parallel: Some(1),
            ..ClusterOptions::default()
        };
    }
    let job = job_for(&requests, &rendered(&requests), &[]).unwrap();
    let expected = JobProperties {
        name: Some("daisy-predict".into()),
        array: Some("0-1%1".into()),
        partition: Some("gpu".into()),
        account: Some("lab".into()),
        qos: Some("high".into()),
        time_limit: Some(24 * 60 + 2 * 60 + 4),
        cpus_per_task: Some(2),
        memory_per_node: Some(512),
        gres: Some("gpu:1".into()),
        constraints: Some("a100".into()),
        comment: Some("two words".into()),
        hold: Some(true),
        current_working_directory: Some(fake.dir.path().display().to_string()),
        standard_output: Some(fake.path("logs/worker-%A_%a.out").display().to_string()),
        standard_error: Some(fake.path("logs/worker-%A_%a.err").display().to_string()),
        environment: job::environment(&[], &requests[0].env),
        ..JobProperties::default()
    };
    assert_eq!(job, expected);
}

#[test]
fn paths_with_spaces_lose_the_quotes_sbatch_would_remove() {
    let fake = FakeRestd::new();
    let mut requests = fake.requests(0, 1);
    requests[0].log_dir = "/runs/my run/logs".into();
    let job = job_for(&requests, &rendered(&requests), &[]).unwrap();
    assert_eq!(
        job.standard_output.as_deref(),
        Some("/runs/my run/logs/worker-%A_%a.out")
    );
}

#[test]
fn only_directives_before_the_first_command_count() {
    let script = "#!/bin/bash\n# comment\n#SBATCH -p a\n\n#SBATCH  --hold\necho hi\n#SBATCH -p b\n";
    assert_eq!(
        job::directive_lines(script),
        [(3, "#SBATCH -p a"), (5, "#SBATCH  --hold")]
    );
    assert!(job::directive_lines("#SBATCHx --hold\n").is_empty());
}

#[test]
fn untranslatable_options_are_named_with_their_line() {
    let fake = FakeRestd::new();
    let requests = fake.requests(0, 1);
    let error = |script: &str| job_for(&requests, script, &[]).unwrap_err();
    let message = error("#!/bin/sh\n#SBATCH --exclusive\n");
    assert!(
        message.starts_with("line 2 of the job script") && message.contains("--job-name/-J"),
        "{message}"
    );
    assert!(error("#SBATCH --array=0-3\n").contains("daisy sets the array itself"));
    assert!(error("#SBATCH --export=NONE\n").contains("environment"));
    assert!(error("#SBATCH --time=soon\n").contains("not a value"));
    assert!(error("#SBATCH --partition\n").contains("needs a value"));
    assert!(error("#SBATCH --comment=\"open\n").contains("unclosed quote"));
}

#[test]
fn options_in_every_form() {
    let parsed = |word: &str| job::option_name(word).unwrap();
    assert_eq!(parsed("--mem=4G"), ("mem".into(), Some("4G".into())));
    assert_eq!(parsed("--hold"), ("hold".into(), None));
    assert_eq!(
        parsed("-pdebug"),
        ("partition".into(), Some("debug".into()))
    );
    assert_eq!(parsed("-t"), ("time".into(), None));
    assert!(job::option_name("-Z").is_err());
    let words = job::split_words(" --a=\"x y\" 'z w' v").unwrap();
    assert_eq!(words, ["--a=x y", "z w", "v"]);
}

#[test]
fn time_limits_in_slurms_formats() {
    let cases = [
        ("30", Some(30)),
        ("30:01", Some(31)),
        ("1:00:00", Some(60)),
        ("2-0", Some(2880)),
        ("1-1:30", Some(1530)),
        ("1-00:00:30", Some(1441)),
        ("UNLIMITED", Some(u32::MAX)),
        ("", None),
        ("1:2:3:4", None),
        ("x", None),
    ];
    for (text, minutes) in cases {
        assert_eq!(job::minutes(text), minutes, "{text}");
    }
}

#[test]
fn memory_sizes_in_megabytes() {
    let cases = [
        ("512", Some(512)),
        ("512M", Some(512)),
        ("2G", Some(2048)),
        ("1T", Some(1_048_576)),
        ("1500K", Some(2)),
        ("4gb", Some(4096)),
        ("lots", None),
        ("1P", None),
    ];
    for (text, megabytes) in cases {
        assert_eq!(job::megabytes(text), megabytes, "{text}");
    }
}

#[test]
fn the_requests_environment_wins_and_is_never_shown() {
    let base = [("PATH".into(), "/bin".into()), ("A".into(), "base".into())];
    let extra = [
        ("A".into(), "mine".into()),
        ("DAISY_CONTEXT".into(), SECRET.into()),
    ];
    let env = job::environment(&base, &extra);
    assert_eq!(env.0["A"], "mine");
    let submission = JobSubmission {
        script: "#!/bin/sh\n".into(),
        job: JobProperties {
            environment: env,
            ..JobProperties::default()
        },
    };
    let shown = format!("{submission:?}");
    assert!(
        shown.contains("DAISY_CONTEXT") && !shown.contains(SECRET),
        "{shown}"
    );
    let json = serde_json::to_value(&submission).unwrap();
    assert_eq!(json["job"]["environment"]["DAISY_CONTEXT"], SECRET);
    assert_eq!(
        json["job"].as_object().unwrap().len(),
        1,
        "unset properties left out"
    );
}

#[test]
fn arrays_with_and_without_a_cap() {
    assert_eq!(job::array_spec(3, None), "0-2");
    assert_eq!(job::array_spec(1, Some(4)), "0-0%4");
}

// ---------------------------------------------------------------------
// Configuration.

#[test]
fn token_claims_are_read_without_verification() {
    let claims = token_claims(RECORDED_TOKEN).unwrap();
    assert_eq!(claims.exp, Some(1_795_947_362));
    assert_eq!(claims.sun.as_deref(), Some("root"));
    assert_eq!(token_claims("not-a-jwt"), None);
    assert_eq!(token_claims("a.!!!.c"), None);
    assert_eq!(token_claims(&token_expiring(5)).unwrap().exp, Some(5));
}

#[test]
fn settings_come_from_the_environment() {
    let vars = |pairs: &'static [(&str, &str)]| {
        move |name: &str| {
            let found = pairs.iter().find(|(n, _)| *n == name);
            found.map(|(_, value)| value.to_string())
        }
    };
    let error = settings(vars(&[("USER", "alice")]))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("SLURM_JWT") && error.contains("scontrol token"),
        "{error}"
    );
    let (url, user, _) = settings(vars(&[("SLURM_JWT", "t"), ("USER", "alice")])).unwrap();
    assert_eq!(
        (url.as_str(), user.as_str()),
        (DEFAULT_SLURMRESTD_URL, "alice")
    );
    let (_, user, _) = settings(vars(&[("SLURM_JWT", RECORDED_TOKEN)])).unwrap();
    assert_eq!(user, "root", "the token's user when USER is unset");
    let chosen = settings(vars(&[
        ("SLURM_JWT", "t"),
        ("USER", "a"),
        ("SLURMRESTD_URL", "unix:/s"),
    ]));
    assert_eq!(chosen.unwrap().0, "unix:/s");
    assert!(matches!(
        settings(vars(&[("SLURM_JWT", "t")])),
        Err(SlurmrestdConfigError::MissingUser)
    ));
}

#[test]
fn urls_are_http_or_unix_sockets() {
    let parsed = |url: &str| client::parse_url(url).map_err(|e| e.to_string());
    assert_eq!(parsed("http://h:6820/"), Ok(("http://h:6820".into(), None)));
    let socket = Ok((
        "http://localhost".into(),
        Some("/run/slurmrestd.sock".into()),
    ));
    assert_eq!(parsed("unix:/run/slurmrestd.sock"), socket);
    assert_eq!(parsed("unix:///run/slurmrestd.sock"), socket);
    assert!(parsed("https://h:6820").unwrap_err().contains("rustls-tls"));
    assert!(parsed("h:6820").unwrap_err().contains("expected http://"));
    assert!(parsed("unix:").is_err() && parsed("http://").is_err());
}

#[test]
fn forwarded_variables_are_the_listed_ones_that_are_set() {
    let env = forwarded_env(|name| (name == "PATH" || name == "SLURM_JWT").then(|| "v".into()));
    assert_eq!(env, [("PATH".to_owned(), "v".to_owned())]);
}
