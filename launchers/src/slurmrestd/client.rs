//! HTTP to slurmrestd: three calls (submit, list jobs, cancel), each with
//! the user's JWT in the `X-SLURM-USER-NAME`/`X-SLURM-USER-TOKEN` headers
//! and a timeout, and what a failed call means for the launcher
//! ([`Failure`]). Blocking (reqwest's blocking client): launcher methods
//! are synchronous and run on the driver's launcher thread.
//!
//! Plain HTTP, or a Unix socket (`unix:/path`): slurmrestd is meant to sit
//! on a trusted network or the local host, and reqwest is built without
//! TLS to keep the build light; an `https://` URL is refused with a
//! message saying so (it would need reqwest's `rustls-tls` feature).
//! Proxy variables are ignored, so the token goes to slurmrestd only.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::blocking::{Client, RequestBuilder};
use reqwest::header::{HeaderMap, HeaderValue};
use serde::de::DeserializeOwned;

use super::api::{
    self, errno, ApiError, JobInfo, JobSubmission, JobsResponse, Reply, SubmitResponse,
};
use super::SlurmrestdConfigError;
use crate::retry::CallError;
use crate::sbatch::commands::is_transient;

/// What to do about a refused or expired token, for every auth error.
pub const RENEW_ADVICE: &str = "JWTs expire: get a new one with `scontrol token \
    lifespan=<seconds>` (as the user the jobs run as), export it as SLURM_JWT \
    (`export $(scontrol token lifespan=86400)`) and restart the driver";

/// Why a call failed: transient (no answer, slurmctld unreachable: worth
/// trying again later) or a [`Refusal`].
pub type Failure = CallError<Refusal>;

/// Why slurmrestd will not do what was asked, by what the launcher
/// should do about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The token was refused or has expired: nothing works until the
    /// user renews it.
    Auth(String),
    /// slurmrestd or slurmctld refused the request itself (invalid
    /// partition, unknown job); `errors` are SLURM's.
    Refused {
        message: String,
        errors: Vec<ApiError>,
    },
    /// An answer that is not what v0.0.38 sends.
    Unexpected(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Auth(message) | Refusal::Unexpected(message) => f.write_str(message),
            Refusal::Refused { message, .. } => f.write_str(message),
        }
    }
}

impl Failure {
    /// The message for logs and errors.
    pub fn message(&self) -> String {
        self.to_string()
    }
}

/// A slurmrestd endpoint and the credentials to use it.
pub struct RestClient {
    http: Client,
    /// `http://host:port`, without a trailing slash.
    base: String,
    headers: HeaderMap,
    user: String,
    /// The token's expiry (seconds since the epoch), when it tells.
    expires: Option<u64>,
}

impl RestClient {
    /// A client for `url` (`http://host:port` or `unix:/path`) whose every
    /// request gives up after `timeout`.
    pub fn new(
        url: &str,
        user: &str,
        token: &str,
        timeout: Duration,
    ) -> Result<Self, SlurmrestdConfigError> {
        let (base, socket) = parse_url(url)?;
        let mut builder = Client::builder().timeout(timeout).no_proxy();
        if let Some(socket) = socket {
            builder = builder.unix_socket(socket);
        }
        Ok(Self {
            http: builder.build().map_err(SlurmrestdConfigError::Client)?,
            base,
            headers: auth_headers(user, token)?,
            user: user.to_owned(),
            expires: api::token_claims(token).and_then(|claims| claims.exp),
        })
    }

    /// Submits one job; its id, and SLURM's remarks on an accepted job
    /// ("Job is in held state").
    pub fn submit(&self, submission: &JobSubmission) -> Result<(u64, String), Failure> {
        let url = self.url("/job/submit");
        let (status, reply): (u16, SubmitResponse) =
            self.call(self.http.post(url).json(submission))?;
        match reply.job_id {
            Some(id) if is_success(status) => Ok((id, accepted_remarks(&reply))),
            _ => Err(self.failure(status, &reply.errors)),
        }
    }

    /// Every job slurmctld knows (one call, however many are ours).
    pub fn jobs(&self) -> Result<Vec<JobInfo>, Failure> {
        let (status, reply): (u16, JobsResponse) = self.call(self.http.get(self.url("/jobs")))?;
        match is_success(status) && reply.errors.is_empty() {
            true => Ok(reply.jobs),
            false => Err(self.failure(status, &reply.errors)),
        }
    }

    /// Cancels job `id` (`24` for a whole array, `24_3` for one element).
    pub fn cancel(&self, id: &str) -> Result<(), Failure> {
        let url = self.url(&format!("/job/{id}"));
        let (status, reply): (u16, Reply) = self.call(self.http.delete(url))?;
        match is_success(status) && reply.errors.is_empty() {
            true => Ok(()),
            false => Err(self.failure(status, &reply.errors)),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{}{path}", self.base, api::API_PREFIX)
    }

    /// Sends `request` with the credentials and reads the JSON answer; a
    /// body that is not JSON is judged by the HTTP status alone.
    fn call<T: DeserializeOwned>(&self, request: RequestBuilder) -> Result<(u16, T), Failure> {
        self.check_expiry()?;
        let response = request
            .headers(self.headers.clone())
            .send()
            .map_err(|error| transport_failure(&error))?;
        let status = response.status().as_u16();
        if status == 401 || status == 403 {
            return Err(self.failure(status, &[]));
        }
        let body = response.text().map_err(|error| transport_failure(&error))?;
        match serde_json::from_str(&body) {
            Ok(reply) => Ok((status, reply)),
            Err(error) => Err(not_json(status, &body, &error)),
        }
    }

    /// An expired token is refused before slurmctld sees it: slurmrestd
    /// 22.05 reports that only as an "Unspecified error".
    fn check_expiry(&self) -> Result<(), Failure> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        match self.expires {
            Some(expires) if expires <= now => Err(Failure::Permanent(Refusal::Auth(format!(
                "SLURM_JWT expired {} s ago; {RENEW_ADVICE}",
                now - expires
            )))),
            _ => Ok(()),
        }
    }

    fn failure(&self, status: u16, errors: &[ApiError]) -> Failure {
        classify(status, errors, &self.user)
    }
}

/// `(base, socket)`: `http://h:p/` → ("http://h:p", None); `unix:/s` or
/// `unix:///s` → ("http://localhost", Some("/s")).
pub fn parse_url(url: &str) -> Result<(String, Option<String>), SlurmrestdConfigError> {
    let bad = |problem: &str| SlurmrestdConfigError::BadUrl {
        url: url.to_owned(),
        problem: problem.to_owned(),
    };
    if let Some(path) = url.strip_prefix("unix:") {
        let path = format!("/{}", path.trim_start_matches('/'));
        return match path.len() > 1 {
            true => Ok(("http://localhost".to_owned(), Some(path))),
            false => Err(bad("no socket path after unix:")),
        };
    }
    if url.starts_with("https://") {
        return Err(bad(
            "https is not built in (reqwest without TLS, to keep the build \
            light); use http:// on a trusted network or unix:/path, or build reqwest \
            with its rustls-tls feature",
        ));
    }
    let host = url
        .strip_prefix("http://")
        .ok_or_else(|| bad("expected http://host:port or unix:/path/to/socket"))?;
    match host.trim_end_matches('/').is_empty() {
        true => Err(bad("no host")),
        false => Ok((url.trim_end_matches('/').to_owned(), None)),
    }
}

/// The user and token headers; the token is marked sensitive, so reqwest
/// never shows it in debug output.
fn auth_headers(user: &str, token: &str) -> Result<HeaderMap, SlurmrestdConfigError> {
    let value = |text: &str, what: &str| {
        HeaderValue::from_str(text.trim()).map_err(|_| {
            SlurmrestdConfigError::BadHeader(format!(
                "the {what} holds characters HTTP headers cannot"
            ))
        })
    };
    let mut token = value(token, "token")?;
    token.set_sensitive(true);
    let mut headers = HeaderMap::new();
    headers.insert("X-SLURM-USER-NAME", value(user, "user name")?);
    headers.insert("X-SLURM-USER-TOKEN", token);
    Ok(headers)
}

fn is_success(status: u16) -> bool {
    (200..300).contains(&status)
}

/// SLURM's remarks on an accepted submission, for the log.
fn accepted_remarks(reply: &SubmitResponse) -> String {
    let message = reply.job_submit_user_msg.as_deref().unwrap_or("").trim();
    let errors = api::error_text(&reply.errors);
    [message, errors.as_str()]
        .into_iter()
        .filter(|text| !text.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// What a refusal means; `user` is who the headers claim to be.
pub fn classify(status: u16, errors: &[ApiError], user: &str) -> Failure {
    if status == 401 || status == 403 {
        return Failure::Permanent(Refusal::Auth(format!(
            "slurmrestd refused the credentials (HTTP {status}): it needs the user name \
             ({user}) and a valid token; {RENEW_ADVICE}"
        )));
    }
    let message = match errors.is_empty() {
        true => format!("HTTP {status} without an error message"),
        false => api::error_text(errors),
    };
    if api::has_errno(errors, errno::ZERO_BYTES) {
        return Failure::Permanent(Refusal::Auth(format!(
            "slurmctld closed the connection ({message}), which is how it refuses a token \
             it cannot verify (wrong, or made for another user than {user}); {RENEW_ADVICE}"
        )));
    }
    if api::has_errno(errors, errno::UNSPECIFIED) {
        return Failure::Transient(format!(
            "{message}: slurmctld is unreachable, or it refused SLURM_JWT (slurmrestd 22.05 \
             says the same for both); if this persists: {RENEW_ADVICE}"
        ));
    }
    if is_transient(&message) || (status >= 500 && errors.is_empty()) {
        return Failure::Transient(message);
    }
    refused(message, errors)
}

/// A refusal, with a hint where SLURM's message says too little.
fn refused(message: String, errors: &[ApiError]) -> Failure {
    let message = match api::has_errno(errors, errno::PARSING) {
        true => format!(
            "{message}: slurmrestd could not read a job property; its own log says which \
             (for instance a --gres or --constraint the cluster does not define)"
        ),
        false => message,
    };
    Failure::Permanent(Refusal::Refused {
        message,
        errors: errors.to_vec(),
    })
}

/// A body that is not slurmrestd's JSON: from a proxy or a restarting
/// daemon when the status is 5xx (transient), else unexpected.
fn not_json(status: u16, body: &str, error: &serde_json::Error) -> Failure {
    let start: String = body.trim().chars().take(200).collect();
    match status {
        500.. => Failure::Transient(format!("HTTP {status}: {start:?}")),
        _ => Failure::Permanent(Refusal::Unexpected(format!(
            "HTTP {status}, not v0.0.38 JSON ({error}): {start:?}"
        ))),
    }
}

/// A request that got no answer: always worth retrying (connection
/// refused or reset, timeout), except a request reqwest could not build.
fn transport_failure(error: &reqwest::Error) -> Failure {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    match error.is_builder() {
        true => Failure::Permanent(Refusal::Unexpected(message)),
        false => Failure::Transient(message),
    }
}
