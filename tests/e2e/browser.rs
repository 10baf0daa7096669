//! Headless Chromium for the browser tests: finding it, keeping its
//! helper processes from outliving a test, where screenshots go, and
//! [`Browser`], which drives it over the Chrome DevTools Protocol (CDP).
//!
//! CDP runs over `--remote-debugging-pipe`: Chromium reads commands from
//! fd 3 and writes responses and events to fd 4, each a JSON object ended
//! by a NUL byte, so no websocket is needed. A reader thread turns fd 4
//! into a channel, so that every wait has a deadline and a stuck Chromium
//! fails the test saying so instead of hanging it.
//!
//! These tests need Chromium (`ci/test.sh` leaves them out without it).

use crate::util::*;
use serde_json::{json, Value};
use std::io::{BufRead as _, BufReader, PipeReader, PipeWriter, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// How long one CDP command may take before Chromium counts as stuck.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`Page::wait_for`] waits, as [`wait_until`] does.
const WAIT_FOR_TIMEOUT: Duration = Duration::from_secs(60);

/// Chromium for the browser tests: `DAISY_CHROMIUM`, else `chromium` on
/// PATH; the test fails without it.
pub fn chromium(test: &str) -> PathBuf {
    let found = std::env::var_os("DAISY_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| which::which("chromium").ok());
    found.unwrap_or_else(|| {
        missing(
            test,
            "Chromium not found",
            "apt-get install chromium, or set DAISY_CHROMIUM",
        )
    })
}

/// Chromium in its own process group, which is killed when this drops:
/// Chromium's helper processes must not outlive the test.
pub struct ChromiumGroup(pub Child);

impl ChromiumGroup {
    /// Spawns `command` as the leader of a new process group.
    pub fn spawn(command: &mut Command) -> ChromiumGroup {
        command.process_group(0);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting chromium: {command:?}: {e}"));
        ChromiumGroup(child)
    }
}

impl Drop for ChromiumGroup {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = self.0.wait();
    }
}

/// `target/test-artifacts/`, where screenshots are kept for people.
pub fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory")
        .join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Width and height of a PNG file, checking its signature.
pub fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).unwrap();
    assert!(bytes.len() > 24, "{path:?} is {} bytes", bytes.len());
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{path:?} is not a PNG");
    let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
    (word(16), word(20))
}

/// Checks that `path` is a PNG of `size` with something drawn on it,
/// and says where it is, for people.
pub fn assert_picture(path: &Path, size: (u32, u32), of: &str) {
    assert_eq!(png_size(path), size);
    let bytes = std::fs::metadata(path).unwrap().len();
    assert!(
        bytes > 20_000,
        "a blank page compresses to less: {bytes} bytes"
    );
    eprintln!("screenshot of {of}: {}", path.display());
}

/// The file:// URL of an existing file.
pub fn file_url(path: &Path) -> String {
    format!("file://{}", path.canonicalize().unwrap().display())
}

/// What the reader thread passes on: a message, or the bytes that were
/// not one.
type Message = Result<Value, String>;

/// Headless Chromium driven over CDP; killed (whole process group) on drop.
pub struct Browser {
    // Dropped first: Chromium dies before its profile is removed.
    chromium: ChromiumGroup,
    commands: PipeWriter,
    messages: Receiver<Message>,
    /// Events not yet asked for, of every session.
    events: Vec<Value>,
    last_id: u64,
    width: u32,
    height: u32,
    /// Holds the profile (`profile/`) and Chromium's stderr (`stderr`).
    home: tempfile::TempDir,
}

impl Browser {
    /// Starts Chromium (found as `chromium(test)` finds it), window size w×h.
    pub fn start(test: &str, width: u32, height: u32) -> Browser {
        let chromium = chromium(test);
        let home = tempfile::tempdir().expect("creating Chromium's home");
        let stderr = std::fs::File::create(home.path().join("stderr")).unwrap();
        let (commands_read, commands) = std::io::pipe().expect("making the command pipe");
        let (responses, responses_write) = std::io::pipe().expect("making the response pipe");
        let mut command = Command::new(&chromium);
        command
            .args(daisy_driver::inspect::report::headless_args(
                &home.path().join("profile"),
            ))
            .args([
                "--remote-debugging-pipe".into(),
                format!("--window-size={width},{height}"),
                "about:blank".into(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        let (chromium_reads, chromium_writes) =
            (commands_read.as_raw_fd(), responses_write.as_raw_fd());
        // SAFETY: the closure runs between fork and exec, and calls only
        // fcntl and dup2, which are async-signal-safe; it allocates nothing.
        unsafe {
            command.pre_exec(move || {
                // Both are moved above 4 first, so that neither dup2 below
                // closes the other's source. dup2 onto a different fd leaves
                // the copy without CLOEXEC: fds 3 and 4 survive exec.
                let read = os_result(nix::libc::fcntl(
                    chromium_reads,
                    nix::libc::F_DUPFD_CLOEXEC,
                    5,
                ))?;
                let write = os_result(nix::libc::fcntl(
                    chromium_writes,
                    nix::libc::F_DUPFD_CLOEXEC,
                    5,
                ))?;
                os_result(nix::libc::dup2(read, 3))?;
                os_result(nix::libc::dup2(write, 4))?;
                Ok(())
            });
        }
        let group = ChromiumGroup::spawn(&mut command);
        // Chromium's ends are closed here, so that its exit ends our reads.
        drop((commands_read, responses_write));
        let (sender, messages) = mpsc::channel();
        std::thread::spawn(move || read_messages(responses, sender));
        let mut browser = Browser {
            chromium: group,
            commands,
            messages,
            events: Vec::new(),
            last_id: 0,
            width,
            height,
            home,
        };
        browser.call(None, "Browser.getVersion", json!({}));
        browser
    }

    /// Opens `url` in a new tab (Target.createTarget + Target.attachToTarget flatten:true),
    /// with Runtime, Log and Page domains enabled so console output and errors are collected.
    pub fn open(&mut self, url: &str) -> Page<'_> {
        // The tab starts blank and navigates once the domains are on, so
        // that nothing the page logs while loading is missed.
        let blank = json!({"url": "about:blank"});
        let target = self.call(None, "Target.createTarget", blank);
        let attached = self.call(
            None,
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        let session = attached["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("Target.attachToTarget gave no sessionId: {attached}"))
            .to_string();
        let mut page = Page {
            browser: self,
            session,
        };
        for domain in ["Runtime", "Log", "Page"] {
            page.call(&format!("{domain}.enable"), json!({}));
        }
        page.call("Page.setLifecycleEventsEnabled", json!({"enabled": true}));
        // A new tab's viewport is the window less room for browser UI
        // (87 px high in Chromium 148): the page gets the whole window.
        let (width, height) = (page.browser.width, page.browser.height);
        page.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        let navigated = page.call("Page.navigate", json!({"url": url}));
        if let Some(error) = navigated["errorText"].as_str() {
            panic!("opening {url}: {error}");
        }
        let loader = navigated["loaderId"].clone();
        let session = page.session.clone();
        page.browser
            .wait_for_event(&format!("{url} to load"), |event| {
                event["method"] == "Page.lifecycleEvent"
                    && event["sessionId"] == session
                    && event["params"]["name"] == "load"
                    && event["params"]["loaderId"] == loader
            });
        page
    }

    /// Sends `method` (to the page of `session`, or to the browser) and
    /// returns its result; events that come meanwhile are kept.
    fn call(&mut self, session: Option<&str>, method: &str, params: Value) -> Value {
        self.last_id += 1;
        let id = self.last_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            message["sessionId"] = session.into();
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(0);
        if let Err(e) = self.commands.write_all(&bytes) {
            panic!("sending {method} to Chromium: {e}{}", self.diagnosis());
        }
        let response = self.receive(method, |message| message["id"] == id);
        if let Some(error) = response.get("error") {
            panic!("{method} failed: {error}");
        }
        response["result"].clone()
    }

    /// Waits for an event that `matches`, among those kept or to come.
    fn wait_for_event(&mut self, what: &str, matches: impl Fn(&Value) -> bool) {
        if !self.events.iter().any(&matches) {
            self.receive(what, matches);
        }
    }

    /// Reads messages until one `matches` and returns it; events that do
    /// not are kept. Panics, saying why, after [`COMMAND_TIMEOUT`] or if
    /// Chromium goes away.
    fn receive(&mut self, what: &str, matches: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message = match self.messages.recv_timeout(left) {
                Ok(Ok(message)) => message,
                Ok(Err(bytes)) => panic!("Chromium sent something that is not JSON: {bytes}"),
                Err(RecvTimeoutError::Timeout) => panic!(
                    "Chromium is stuck: {what} took over {COMMAND_TIMEOUT:?}{}",
                    self.diagnosis()
                ),
                Err(RecvTimeoutError::Disconnected) => panic!(
                    "Chromium closed its pipe while waiting for {what}{}",
                    self.diagnosis()
                ),
            };
            if matches(&message) {
                return message;
            }
            if message.get("method").is_some() {
                self.events.push(message);
            }
        }
    }

    /// Moves the events already read into `events`.
    fn take_pending_events(&mut self) {
        while let Ok(message) = self.messages.try_recv() {
            let message = message.unwrap_or_else(|bytes| {
                panic!("Chromium sent something that is not JSON: {bytes}")
            });
            if message.get("method").is_some() {
                self.events.push(message);
            }
        }
    }

    /// Whether Chromium is still running, and the end of its stderr.
    fn diagnosis(&mut self) -> String {
        let state = match self.chromium.0.try_wait() {
            Ok(Some(status)) => format!("Chromium exited: {status}"),
            Ok(None) => "Chromium is still running".to_string(),
            Err(e) => format!("Chromium's state is unknown: {e}"),
        };
        let stderr = std::fs::read_to_string(self.home.path().join("stderr")).unwrap_or_default();
        let lines: Vec<&str> = stderr.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n");
        format!("\n{state}; the end of its stderr:\n{tail}")
    }
}

/// -1 with errno as an error, in `pre_exec`.
fn os_result(returned: i32) -> std::io::Result<i32> {
    if returned == -1 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(returned)
    }
}

/// Splits Chromium's output on NULs into JSON messages, until it closes
/// its end or nobody listens.
fn read_messages(responses: PipeReader, sender: Sender<Message>) {
    let mut responses = BufReader::new(responses);
    let mut bytes = Vec::new();
    loop {
        bytes.clear();
        match responses.read_until(0, &mut bytes) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if bytes.last() == Some(&0) {
            bytes.pop();
        }
        let message = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&bytes)));
        if sender.send(message).is_err() {
            return;
        }
    }
}

/// A tab of a [`Browser`], with what its page logged since it opened.
pub struct Page<'a> {
    browser: &'a mut Browser,
    session: String,
}

impl Page<'_> {
    /// Runtime.evaluate with returnByValue (and awaitPromise); panics with the exception text if it throws.
    ///
    /// `undefined`, and values JSON cannot hold (NaN, Infinity), come back
    /// as null.
    pub fn eval(&mut self, expression: &str) -> Value {
        let evaluated = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(exception) = evaluated.get("exceptionDetails") {
            panic!("`{expression}` threw: {}", exception_text(exception));
        }
        evaluated["result"]["value"].clone()
    }

    /// Evaluates `expression` every ~100 ms until its value is truthy (not null/false/0/""), returning it;
    /// panics after 60 s naming `what` and the last value (like util::wait_until's style).
    pub fn wait_for(&mut self, what: &str, expression: &str) -> Value {
        let deadline = Instant::now() + WAIT_FOR_TIMEOUT;
        loop {
            let value = self.eval(expression);
            if truthy(&value) {
                return value;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting {WAIT_FOR_TIMEOUT:?} until {what}: `{expression}` is still {value}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Console messages of level error/assert (Runtime.consoleAPICalled), uncaught exceptions
    /// (Runtime.exceptionThrown) and Log.entryAdded entries of level "error" (e.g. failed network loads), as text,
    /// collected since the page opened (drain pending events from the pipe first).
    pub fn errors(&mut self) -> Vec<String> {
        // A round trip through the page: what it reported before answering
        // has then been read.
        self.call("Runtime.evaluate", json!({"expression": "0"}));
        self.browser.take_pending_events();
        self.browser
            .events
            .iter()
            .filter(|event| event["sessionId"] == self.session.as_str())
            .filter_map(error_text)
            .collect()
    }

    /// Page.captureScreenshot (PNG) written to `path`.
    pub fn screenshot(&mut self, path: &Path) {
        use base64::Engine as _;
        let captured = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let encoded = captured["data"]
            .as_str()
            .unwrap_or_else(|| panic!("Page.captureScreenshot gave no data: {captured}"));
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap_or_else(|e| panic!("Page.captureScreenshot gave bad base64: {e}"));
        std::fs::write(path, png).unwrap_or_else(|e| panic!("writing {path:?}: {e}"));
    }

    fn call(&mut self, method: &str, params: Value) -> Value {
        self.browser.call(Some(&self.session), method, params)
    }
}

/// JavaScript's truthiness, for the values JSON can hold.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(value) => *value,
        Value::Number(number) => number.as_f64() != Some(0.0),
        Value::String(text) => !text.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// The error an event reports, if it reports one.
fn error_text(event: &Value) -> Option<String> {
    let params = &event["params"];
    match event["method"].as_str()? {
        "Runtime.consoleAPICalled" if matches!(params["type"].as_str()?, "error" | "assert") => {
            let args: Vec<String> = params["args"]
                .as_array()?
                .iter()
                .map(remote_object_text)
                .collect();
            Some(format!(
                "console.{}: {}",
                params["type"].as_str()?,
                args.join(" ")
            ))
        }
        "Runtime.exceptionThrown" => Some(exception_text(&params["exceptionDetails"])),
        "Log.entryAdded" if params["entry"]["level"] == "error" => {
            let entry = &params["entry"];
            Some(format!(
                "{}: {} ({})",
                entry["source"].as_str().unwrap_or("log"),
                entry["text"].as_str().unwrap_or_default(),
                entry["url"].as_str().unwrap_or_default()
            ))
        }
        _ => None,
    }
}

/// A console argument as the console shows it.
fn remote_object_text(object: &Value) -> String {
    match &object["value"] {
        Value::String(text) => text.clone(),
        Value::Null => ["description", "unserializableValue", "type"]
            .iter()
            .find_map(|key| object[key].as_str())
            .unwrap_or("?")
            .to_string(),
        value => value.to_string(),
    }
}

/// Runtime.ExceptionDetails as text: "Uncaught", what was thrown, and
/// where, unless the thrown Error's stack already says.
fn exception_text(details: &Value) -> String {
    let uncaught = details["text"].as_str().unwrap_or("Uncaught");
    let thrown = &details["exception"];
    let text = if thrown.is_object() {
        format!("{uncaught} {}", remote_object_text(thrown))
    } else {
        uncaught.to_string()
    };
    match (details["url"].as_str(), details["lineNumber"].as_u64()) {
        (Some(url), Some(line)) if !text.contains(url) => format!("{text} ({url}:{})", line + 1),
        _ => text,
    }
}

/// `html` as a page in `dir`, by its file:// URL.
fn html_page(dir: &TestDir, name: &str, html: &str) -> String {
    file_url(&dir.write(name, html))
}

#[test]
fn wait_for_sees_a_counter_rise_and_eval_returns_json() {
    let test = "wait_for_sees_a_counter_rise_and_eval_returns_json";
    let mut browser = Browser::start(test, 400, 300);
    let dir = TestDir::new();
    let counting = html_page(
        &dir,
        "counting.html",
        "<script>let counter = 0; setInterval(() => counter += 1, 20);</script>",
    );
    let mut page = browser.open(&counting);
    let counter = page.wait_for("the counter reaches 5", "counter >= 5 && counter");
    assert!(counter.as_u64().is_some_and(|n| n >= 5), "{counter}");
    assert_eq!(
        page.eval("({text: 'a', list: [1, 2.5, null], yes: true})"),
        json!({"text": "a", "list": [1, 2.5, null], "yes": true})
    );
    assert_eq!(page.eval("undefined"), Value::Null);
    assert_eq!(
        page.eval("new Promise(done => setTimeout(() => done('later'), 50))"),
        json!("later")
    );
}

#[test]
#[should_panic(expected = "threw: Uncaught Error: no such thing")]
fn eval_panics_with_what_the_expression_threw() {
    let mut browser = Browser::start("eval_panics_with_what_the_expression_threw", 400, 300);
    let mut page = browser.open("about:blank");
    page.eval("throw new Error('no such thing')");
}

#[test]
fn errors_has_console_errors_and_uncaught_exceptions_and_a_clean_page_none() {
    let test = "errors_has_console_errors_and_uncaught_exceptions_and_a_clean_page_none";
    let mut browser = Browser::start(test, 400, 300);
    let dir = TestDir::new();
    let broken = html_page(
        &dir,
        "broken.html",
        "<script>console.log('fine'); console.error('boom', 42); null.x;</script>",
    );
    let errors = browser.open(&broken).errors();
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(errors[0].contains("boom 42"), "{errors:#?}");
    assert!(errors[1].starts_with("Uncaught TypeError"), "{errors:#?}");

    let clean = html_page(&dir, "clean.html", "<script>console.log('fine');</script>");
    assert_eq!(browser.open(&clean).errors(), Vec::<String>::new());
}

#[test]
fn errors_has_a_failed_load() {
    let mut browser = Browser::start("errors_has_a_failed_load", 400, 300);
    let dir = TestDir::new();
    let missing_image = html_page(&dir, "image.html", "<img src='missing.png'>");
    let errors = browser.open(&missing_image).errors();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].contains("ERR_FILE_NOT_FOUND"), "{errors:#?}");
}

#[test]
fn a_screenshot_is_a_png_of_the_window_size() {
    let mut browser = Browser::start("a_screenshot_is_a_png_of_the_window_size", 640, 480);
    let dir = TestDir::new();
    let red = html_page(&dir, "red.html", "<body style='background: red'>");
    let screenshot = artifacts().join("browser-screenshot.png");
    let _ = std::fs::remove_file(&screenshot);
    browser.open(&red).screenshot(&screenshot);
    assert_eq!(png_size(&screenshot), (640, 480));
}
