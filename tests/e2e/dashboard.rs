//! `run --dashboard`: the live page and its JSON over real HTTP, as a
//! script or a browser asks them, during a run and at its end; the token;
//! no route that changes the run. `chromium` opens the page in a real
//! browser.

mod chromium;

use crate::util::*;
use reqwest::blocking::{Client, Response};
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Every route that shows something of the run.
const RUN_ROUTES: [&str; 4] = ["/", "/api/status", "/api/stream", "/report.html"];

/// A running driver with its dashboard.
struct Served {
    driver: ChildGuard,
    run_dir: PathBuf,
    /// `http://host:port` as printed, without the path.
    base: String,
    token: String,
    client: Client,
}

/// Starts `pipeline` (a file in `dir`) with `--dashboard=ADDR` and waits
/// for the URL it writes to the run directory.
fn serve(dir: &TestDir, pipeline: &str, name: &str, addr: &str) -> Served {
    let dashboard = format!("--dashboard={addr}");
    let log = dir.join(&format!("{name}.log"));
    let driver = ChildGuard::spawn_logged(&mut dir.driver(&["run", pipeline, &dashboard]), &log);
    let run_dir = dir.join(&format!("daisy_run/{name}"));
    let url_file = run_dir.join("dashboard.url");
    wait_until("the dashboard's URL is written", || url_file.exists());
    let url = std::fs::read_to_string(&url_file).unwrap();
    let (base, token) = url.trim().split_once("/?token=").expect("URL with a token");
    assert!(
        std::fs::read_to_string(&log).unwrap().contains(url.trim()),
        "the URL is printed"
    );
    let client = Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    Served {
        driver,
        run_dir,
        base: base.to_string(),
        token: token.to_string(),
        client,
    }
}

impl Served {
    /// `route` with the token in the query, as the page asks.
    fn get(&self, route: &str) -> Response {
        let url = format!("{}{route}?token={}", self.base, self.token);
        self.client.get(url).send().unwrap()
    }

    fn status(&self) -> Value {
        let response = self.get("/api/status");
        assert_eq!(response.status(), StatusCode::OK);
        let content_type = response.headers()["content-type"].to_str().unwrap();
        assert_eq!(content_type, "application/json");
        response.json().unwrap()
    }

    /// The event stream, read a `snapshot` at a time.
    fn stream(&self) -> Snapshots {
        let response = self.get("/api/stream");
        assert_eq!(response.status(), StatusCode::OK);
        Snapshots(BufReader::new(response))
    }
}

struct Snapshots(BufReader<Response>);

impl Snapshots {
    /// The next `snapshot` event's data; `None` once the stream ended.
    fn next(&mut self) -> Option<Value> {
        let mut event = None;
        let mut line = String::new();
        loop {
            line.clear();
            if self.0.read_line(&mut line).unwrap() == 0 {
                return None;
            }
            match line.trim_end() {
                "event: snapshot" => event = Some(()),
                data if data.starts_with("data: ") && event.is_some() => {
                    return Some(serde_json::from_str(&data["data: ".len()..]).unwrap())
                }
                _ => {}
            }
        }
    }
}

/// A pipeline of 6 blocks whose block 2 waits for the file `go`.
fn gated(dir: &TestDir, name: &str) -> String {
    let gated = "if [ {block_id} = 2 ]; then while [ ! -e go ]; do sleep 0.05; done; fi";
    let file = format!("{name}.toml");
    let tasks = task("t", 6, gated, "max_workers = 2");
    dir.write(&file, &format!("name = \"{name}\"\n{tasks}"));
    file
}

#[test]
fn the_page_and_its_json_follow_the_run_to_its_final_state() {
    let dir = TestDir::new();
    let pipeline = gated(&dir, "watched");
    let served = serve(&dir, &pipeline, "watched", "127.0.0.1:0");
    wait_until("the JSON shows blocks done while the run goes", || {
        let status = served.status();
        status["running"] == true && status["tasks"][0]["done"] == 5
    });
    // The JSON is `status --json`'s.
    let status = served.status();
    for key in [
        "run_dir", "pipeline", "state", "tasks", "last_run", "live", "warnings",
    ] {
        assert!(status.get(key).is_some(), "{key} in {status:#}");
    }
    let workers = status["last_run"]["workers"].as_array().unwrap();
    assert!(workers.iter().any(|w| w["end"] == "running"), "{workers:?}");
    assert!(status["live"]["blocks_per_s"].is_number(), "{status:#}");

    let page = served.get("/");
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().unwrap().contains("dashboard.js"));
    let report = served.get("/report.html").text().unwrap();
    assert!(report.contains("daisy run report: watched"), "{report}");

    let mut stream = served.stream();
    let first = stream.next().expect("a snapshot");
    assert_eq!(first["over"], false);
    let live = first["live"].as_str().unwrap();
    assert!(
        live.contains(r#"id="run-state" class="state state-running""#),
        "{live}"
    );
    assert!(
        live.contains(r#"<span id="done">5</span> of <span id="total">6</span>"#),
        "{live}"
    );

    dir.write("go", "");
    let mut last = first;
    while let Some(snapshot) = stream.next() {
        last = snapshot;
    }
    assert_eq!(last["over"], true, "the stream ends with the final state");
    let live = last["live"].as_str().unwrap();
    assert!(live.contains("state-finished"), "{live}");
    assert!(
        live.contains(r#"<span id="done">6</span> of <span id="total">6</span>"#),
        "{live}"
    );
    assert!(last["report"].as_str().unwrap().contains("Done markers"));
    assert!(served.driver.wait_for_exit().success());
    assert!(
        !served.run_dir.join("dashboard.url").exists(),
        "a stale URL is gone"
    );
    let status = run_ok(&mut dir.driver(&["status", "daisy_run/watched", "--json"]));
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["state"], "finished");
}

#[test]
fn bound_beyond_loopback_nothing_of_the_run_is_shown_without_the_token() {
    let dir = TestDir::new();
    let pipeline = gated(&dir, "open");
    let served = serve(&dir, &pipeline, "open", "0.0.0.0:0");
    // Printed as the host others reach it by, as Jupyter does.
    let host = nix::unistd::gethostname().unwrap();
    let port = served.base.rsplit(':').next().unwrap().to_string();
    assert_eq!(
        served.base,
        format!("http://{}:{port}", host.to_string_lossy())
    );
    // Asked through the machine's first address (not loopback where it
    // has another).
    let ip = non_loopback_ipv4().unwrap_or(std::net::Ipv4Addr::LOCALHOST);
    let base = format!("http://{ip}:{port}");
    let wrong = "0".repeat(served.token.len());
    for route in RUN_ROUTES {
        let plain = served.client.get(format!("{base}{route}")).send().unwrap();
        assert_eq!(
            plain.status(),
            StatusCode::FORBIDDEN,
            "{route} without a token"
        );
        assert!(plain.text().unwrap().contains("needs its token"));
        let guessed = served.client.get(format!("{base}{route}?token={wrong}"));
        assert_eq!(
            guessed.send().unwrap().status(),
            StatusCode::FORBIDDEN,
            "{route}"
        );
        let bearer = (served.client.get(format!("{base}{route}")))
            .bearer_auth(&served.token)
            .send()
            .unwrap();
        assert_eq!(bearer.status(), StatusCode::OK, "{route} with the token");
    }
    // The script and style hold nothing of the run, and no token.
    let script = served
        .client
        .get(format!("{base}/dashboard.js"))
        .send()
        .unwrap();
    assert_eq!(script.status(), StatusCode::OK);
    assert!(!script.text().unwrap().contains(&served.token));
    dir.write("go", "");
    assert!(served.driver.wait_for_exit().success());
}

#[test]
fn no_route_changes_the_run() {
    let dir = TestDir::new();
    let pipeline = gated(&dir, "untouched");
    let served = serve(&dir, &pipeline, "untouched", "127.0.0.1:0");
    let methods = [Method::POST, Method::PUT, Method::DELETE, Method::PATCH];
    for route in RUN_ROUTES.iter().chain(&["/api/stop", "/dashboard.js"]) {
        for method in &methods {
            let url = format!("{}{route}?token={}", served.base, served.token);
            let response = served
                .client
                .request(method.clone(), url)
                .body("{}")
                .send()
                .unwrap();
            assert_eq!(
                response.status(),
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {route}"
            );
            assert_eq!(response.headers()["allow"], "GET, HEAD");
        }
    }
    assert_eq!(served.get("/api/stop").status(), StatusCode::NOT_FOUND);
    dir.write("go", "");
    assert!(served.driver.wait_for_exit().success());
    assert_completed_without_failures(&served.run_dir, "t", 6);
}

#[test]
fn a_dashboard_port_in_use_refuses_the_run_before_it_starts() {
    let dir = TestDir::new();
    let pipeline = gated(&dir, "busy");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("--dashboard={}", taken.local_addr().unwrap());
    let output = run_fails(&mut dir.driver(&["run", &pipeline, &addr]), 2);
    let refused = format!("--dashboard {}: listening", taken.local_addr().unwrap());
    assert!(output.contains(&refused), "{output}");
    assert!(!Path::new(&dir.join("daisy_run/busy/events.jsonl")).exists());
    let serial = run_fails(
        &mut dir.driver(&["run", &pipeline, "--dashboard", "--serial"]),
        2,
    );
    assert!(serial.contains("cannot be used with"), "{serial}");
}
