//! Workers on another host: the driver's launched workers run in a network
//! namespace of their own, joined to the driver's by a veth pair (the
//! driver's end 10.200.N.1/24, the workers' 10.200.N.2/24), so they reach
//! the driver only through that link, as a compute node reaches a login
//! node. The driver advertises every address it has; the first one (its
//! other interfaces, among them an address on a second veth made by the
//! test) is unreachable from the namespace, so the blocks only get done if
//! workers fall back along the advertised list.
//!
//! Needs root and iproute2 (`ci/test.sh` leaves it out without them). Every
//! namespace and link is named after the test process and removed when the
//! test ends, passed or not.

use crate::util::*;
use std::collections::BTreeSet;
use std::process::Command;

/// Runs `ip ARGS`, which must succeed.
fn ip(args: &[&str]) {
    run_ok(Command::new("ip").args(args));
}

/// A namespace and two veth pairs, removed on drop.
struct Network {
    namespace: String,
    /// The driver's end of the workers' link.
    link: String,
    /// A second link, whose address the driver advertises first.
    decoy: String,
    /// The driver's address on the workers' link.
    driver_ip: String,
}

impl Network {
    fn new() -> Self {
        let id = std::process::id();
        let subnet = id % 250 + 1;
        let network = Self {
            namespace: format!("daisy-netns-{id}"),
            link: format!("dzl{id}"),
            decoy: format!("dzd{id}"),
            driver_ip: format!("10.200.{subnet}.1"),
        };
        network.create(subnet);
        network
    }

    /// The decoy first: a newer interface comes later in the driver's list.
    fn create(&self, subnet: u32) {
        let (ns, link, decoy) = (&self.namespace, &self.link, &self.decoy);
        let (peer, decoy_peer) = (format!("{link}p"), format!("{decoy}p"));
        ip(&[
            "link",
            "add",
            decoy,
            "type",
            "veth",
            "peer",
            "name",
            &decoy_peer,
        ]);
        ip(&[
            "addr",
            "add",
            &format!("10.201.{subnet}.1/24"),
            "dev",
            decoy,
        ]);
        ip(&["link", "set", decoy, "up"]);
        ip(&["netns", "add", ns]);
        ip(&["link", "add", link, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", ns]);
        ip(&[
            "addr",
            "add",
            &format!("{}/24", self.driver_ip),
            "dev",
            link,
        ]);
        ip(&["link", "set", link, "up"]);
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", ns, "ip"];
            all.extend_from_slice(args);
            ip(&all);
        };
        inside(&[
            "addr",
            "add",
            &format!("10.200.{subnet}.2/24"),
            "dev",
            &peer,
        ]);
        inside(&["link", "set", &peer, "up"]);
        inside(&["link", "set", "lo", "up"]);
    }

    /// The network namespace of processes in the workers' namespace.
    fn namespace_id(&self) -> String {
        let mut readlink = Command::new("ip");
        readlink.args([
            "netns",
            "exec",
            &self.namespace,
            "readlink",
            "/proc/self/ns/net",
        ]);
        run_ok(&mut readlink).trim().to_string()
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        // Deleting one end of a veth pair deletes both.
        let _ = Command::new("ip")
            .args(["link", "del", &self.decoy])
            .output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.link])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.namespace])
            .output();
    }
}

/// Fails the test unless it can make namespaces: root and iproute2.
fn needs_root_and_iproute2(test: &str) {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n");
    let ip = Command::new("ip").args(["netns", "list"]).output();
    if !root || !ip.is_ok_and(|o| o.status.success()) {
        missing(
            test,
            "needs root and iproute2 (`ip netns`)",
            "run as root with iproute2 installed",
        );
    }
}

#[test]
fn workers_in_another_network_namespace_reach_the_driver_past_an_unreachable_first_address() {
    needs_root_and_iproute2("netns");
    let network = Network::new();
    let dir = TestDir::new();
    // The driver launches its workers through this, into the namespace.
    let wrapper = format!(
        "#!/bin/sh\nexec ip netns exec {} {} \"$@\"\n",
        network.namespace,
        worker_program().display()
    );
    let wrapper = dir.write("worker-in-netns", &wrapper);
    run_ok(Command::new("chmod").arg("+x").arg(&wrapper));
    let command = "readlink /proc/self/ns/net >> ns.txt";
    let pipeline = format!(
        "name = \"far\"\n{}",
        task("t", 12, command, "max_workers = 2")
    );
    dir.write("far.toml", &pipeline);
    // Its workers are local processes, but elsewhere as far as the
    // network goes: the driver must listen beyond loopback.
    let mut driver = dir.driver(&["run", "far.toml", "--listen", "0.0.0.0:0"]);
    driver.env("DAISY_WORKER_BIN", &wrapper);
    run_ok(&mut driver);

    let run_dir = dir.join("daisy_run/far");
    let context: serde_json::Value =
        serde_json::from_str(&dir.read("daisy_run/far/context.json")).unwrap();
    let addresses: Vec<&str> = context["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    let reachable = format!("{}:", network.driver_ip);
    assert!(
        !addresses[0].starts_with(&reachable)
            && addresses.iter().any(|a| a.starts_with(&reachable)),
        "the first advertised address is not on the workers' link, a later one is: {addresses:?}"
    );
    let namespaces: BTreeSet<String> = dir.read("ns.txt").lines().map(String::from).collect();
    assert_eq!(
        namespaces,
        BTreeSet::from([network.namespace_id()]),
        "every block ran in the workers' namespace"
    );
    assert_each_block_done_once(&run_dir, "t", 12);
    assert_completed_without_failures(&run_dir, "t", 12);
}
