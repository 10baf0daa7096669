//! The dashboard's HTTP server: hyper's HTTP/1, one task per connection
//! on the driver's runtime. Read-only: GET and HEAD alone are answered
//! (anything else is 405), and no route changes the run. Every route
//! that shows the run needs the token; the page's script and stylesheet,
//! which hold nothing of the run, do not.
//!
//! | route | what |
//! |---|---|
//! | `/` | the page |
//! | `/api/status` | what `status --json` prints, at most 2 s old |
//! | `/api/stream` | server-sent events, a `snapshot` per drawing |
//! | `/report.html` | the report page of the run as it stands |
//! | `/dashboard.js`, `/dashboard.css` | the page's script and style |

use super::page;
use super::snapshots::Snapshots;
use super::stream::EventStream;
use crate::inspect::report;
use crate::run_dir::RunDir;
use http_body_util::{combinators::BoxBody, BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// Connections served at a time; more wait to be accepted.
const MAX_CONNECTIONS: usize = 64;

/// A client that sends no complete request head in this time is dropped.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// What every connection shares.
pub struct Served {
    pub token: String,
    pub snapshots: Snapshots,
    pub run_dir: RunDir,
}

type Body = BoxBody<Bytes, Infallible>;

/// Accepts and serves connections until aborted.
pub async fn serve(listener: TcpListener, served: Arc<Served>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors, say: try again shortly.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let served = Arc::clone(&served);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let served = Arc::clone(&served);
                async move { Ok::<_, Infallible>(respond(&request, &served).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
            drop(slot);
        });
    }
}

/// The answer to one request.
async fn respond(request: &Request<Incoming>, served: &Served) -> Response<Body> {
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "the dashboard is read-only: GET and HEAD only\n",
        );
        let allow = HeaderValue::from_static("GET, HEAD");
        response.headers_mut().insert(header::ALLOW, allow);
        return response;
    }
    let path = request.uri().path();
    match path {
        "/dashboard.js" => return file("text/javascript; charset=utf-8", page::SCRIPT.into()),
        "/dashboard.css" => {
            let style = format!("{}\n{}", report::STYLE, page::STYLE);
            return file("text/css; charset=utf-8", style);
        }
        _ => {}
    }
    if !authorized(request, &served.token) {
        return text(
            StatusCode::FORBIDDEN,
            "this dashboard needs its token: open the URL the driver printed when the run \
             started (also in the run directory's dashboard.url)\n",
        );
    }
    match path {
        "/" => file("text/html; charset=utf-8", page::INDEX.into()),
        "/api/status" => match served.snapshots.fresh().await {
            Some(snapshot) => with_type(
                Full::new(snapshot.status_json.clone()).boxed(),
                "application/json",
            ),
            None => text(StatusCode::SERVICE_UNAVAILABLE, "the run is over\n"),
        },
        "/api/stream" => {
            let mut response = with_type(
                EventStream::open(&served.snapshots).boxed(),
                "text/event-stream",
            );
            let no_buffering = HeaderValue::from_static("no");
            response
                .headers_mut()
                .insert("x-accel-buffering", no_buffering);
            response
        }
        "/report.html" => {
            let run_dir = served.run_dir.clone();
            match tokio::task::spawn_blocking(move || report::page(&run_dir)).await {
                Ok(Ok(page)) => file("text/html; charset=utf-8", page),
                // The page is served from the run's start, a moment before
                // its first event is written.
                Ok(Err(report::ReportError::NoEvents(_))) => text(
                    StatusCode::OK,
                    "the run is starting: its report shows once it recorded its first event\n",
                ),
                Ok(Err(error)) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("{error}\n")),
                Err(_) => text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "drawing the report failed\n",
                ),
            }
        }
        _ => text(StatusCode::NOT_FOUND, "no such page\n"),
    }
}

/// The token in the query (`?token=`, as the printed URL has it) or in
/// an `Authorization: Bearer` (or Jupyter's `token`) header.
fn authorized(request: &Request<Incoming>, token: &str) -> bool {
    let in_query = (request.uri().query().unwrap_or_default().split('&'))
        .filter_map(|pair| pair.strip_prefix("token="))
        .any(|given| same(given, token));
    let in_header = (request.headers().get(header::AUTHORIZATION))
        .and_then(|value| value.to_str().ok())
        .and_then(|value| (value.strip_prefix("Bearer ")).or_else(|| value.strip_prefix("token ")))
        .is_some_and(|given| same(given.trim(), token));
    in_query || in_header
}

/// Compares in time independent of where they differ, so that response
/// times do not reveal the token a byte at a time.
fn same(given: &str, token: &str) -> bool {
    let (given, token) = (given.as_bytes(), token.as_bytes());
    let differing = (given.iter().zip(token)).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    given.len() == token.len() && differing == 0
}

fn file(content_type: &'static str, content: String) -> Response<Body> {
    with_type(Full::new(Bytes::from(content)).boxed(), content_type)
}

fn text(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = file("text/plain; charset=utf-8", message.to_string());
    *response.status_mut() = status;
    response
}

/// A 200 response with `body`, and the headers every answer carries.
fn with_type(body: Body, content_type: &'static str) -> Response<Body> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    let fixed = [
        (header::CONTENT_TYPE, content_type),
        (header::CACHE_CONTROL, "no-store"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // The token is in the page's URL: no other site is told it.
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
             connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::same;

    #[test]
    fn only_the_whole_token_matches() {
        assert!(same("abc", "abc"));
        assert!(!same("abd", "abc"));
        assert!(!same("ab", "abc"));
        assert!(!same("abcd", "abc"));
        assert!(!same("", "abc"));
    }
}
