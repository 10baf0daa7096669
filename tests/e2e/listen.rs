//! Where the driver listens (issue 38): on loopback only when every worker
//! of the run starts on this machine, so nothing elsewhere can even knock
//! on its port; on every interface when workers may come from elsewhere
//! (started by hand, or cluster jobs).

use crate::util::*;
use daisy_core::context::WorkerContext;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::Path;

/// This machine's first IPv4 address that is not loopback: where a
/// worker on another node would reach the driver.
fn machine_address(test: &str) -> IpAddr {
    non_loopback_ipv4().map(IpAddr::V4).unwrap_or_else(|| {
        missing(
            test,
            "this machine has no IPv4 address besides loopback",
            "run it on a machine with a network interface",
        )
    })
}

/// The driver of `pipeline` (named "p") started in `dir`, its output in
/// `driver.log`, once it has said where it serves; and its context.
fn serve(dir: &TestDir, pipeline: &str) -> (ChildGuard, WorkerContext) {
    dir.write("p.toml", &format!("name = \"p\"\n{pipeline}"));
    let mut command = dir.driver(&["run", "p.toml"]);
    command.env_remove("DAISY_LISTEN");
    let driver = ChildGuard::spawn_logged(&mut command, &dir.join("driver.log"));
    wait_until("the driver says where it serves", || {
        dir.read("driver.log").contains("serving")
    });
    let context = WorkerContext::from_json(&dir.read("daisy_run/p/context.json")).unwrap();
    (driver, context)
}

fn port(context: &WorkerContext) -> u16 {
    let first: SocketAddr = context.addresses[0].parse().unwrap();
    first.port()
}

/// A block command that waits until `gate` exists, holding the run open.
fn wait_for(gate: &Path) -> String {
    format!("while [ ! -e {} ]; do sleep 0.05; done", gate.display())
}

#[test]
fn a_run_whose_workers_all_start_here_accepts_no_connection_on_another_address() {
    let ip = machine_address("listen");
    let dir = TestDir::new();
    let gate = dir.join("gate");
    let (driver, context) = serve(&dir, &task("t", 2, &wait_for(&gate), "max_workers = 1"));
    let port = port(&context);
    let log = dir.read("driver.log");
    assert_eq!(
        context.addresses,
        [format!("127.0.0.1:{port}")],
        "only loopback is advertised\n{log}"
    );
    assert!(
        log.contains("(loopback only: "),
        "the driver says so\n{log}"
    );
    let elsewhere = TcpStream::connect(SocketAddr::new(ip, port));
    assert!(
        elsewhere.is_err(),
        "{ip}:{port} accepted a connection\n{log}"
    );
    assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());
    dir.write("gate", "");
    assert!(
        driver.wait_for_exit().success(),
        "{}",
        dir.read("driver.log")
    );
}

#[test]
fn a_run_taking_hand_started_workers_serves_one_on_another_address() {
    let ip = machine_address("listen");
    let dir = TestDir::new();
    let (driver, context) = serve(&dir, &task("t", 3, "true", "max_workers = 0"));
    let port = port(&context);
    let reachable = SocketAddr::new(ip, port).to_string();
    let log = dir.read("driver.log");
    assert!(
        context.addresses.contains(&reachable) && !log.contains("loopback only"),
        "{reachable} is advertised: {:?}\n{log}",
        context.addresses
    );
    // A worker told only that address, as one on another node would use.
    let from_afar = WorkerContext {
        addresses: vec![reachable],
        ..context
    };
    let context_file = dir.write("afar-context.json", &from_afar.to_json());
    let args = [
        "--context-file",
        context_file.to_str().unwrap(),
        "--task",
        "t",
    ];
    run_ok(&mut dir.worker(&args));
    assert!(
        driver.wait_for_exit().success(),
        "{}",
        dir.read("driver.log")
    );
    assert_completed_without_failures(&dir.join("daisy_run/p"), "t", 3);
}
