//! How workers find and join this run: the addresses the driver listens
//! on, the run's secret token, and `<run-dir>/context.json` (mode 0600)
//! for workers started by hand.

use crate::pipeline::{LauncherKind, Pipeline, UserCommand};
use anyhow::Context as _;
use daisy_core::context::WorkerContext;
use daisy_core::protocol::CodeKind;
use daisy_core::protocol::PROTOCOL_VERSION;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// What a program that starts the driver in its own process may set up
/// before the run (`daisy_rs.run_blockwise`, which gives daisy 1.x's
/// `init_callback_fn` the driver's address and token before the driver
/// starts, as daisy 1.x binds its server before it calls them): the
/// listener to serve on instead of binding `--listen`, and the token.
#[derive(Debug, Default)]
pub struct Reserved {
    pub listener: Option<std::net::TcpListener>,
    pub token: Option<RunToken>,
}

impl Reserved {
    /// Binds `address` and draws a token: their addresses as workers are
    /// told them (see [`advertised_addresses`]) and the token.
    pub fn bind(address: SocketAddr) -> anyhow::Result<Self> {
        let listener = std::net::TcpListener::bind(address)
            .with_context(|| format!("listening on {address}"))?;
        let token = Some(RunToken(new_token()?));
        Ok(Self {
            listener: Some(listener),
            token,
        })
    }

    /// Where workers reach the listener, in the order they try.
    pub fn addresses(&self) -> anyhow::Result<Vec<String>> {
        let listener = self.listener.as_ref().context("the listener was taken")?;
        Ok(advertised_addresses(listener.local_addr()?))
    }
}

/// Where the driver listens when `--listen` does not say: loopback only
/// when every worker of the run is started on this machine by the local
/// launcher (nothing elsewhere needs to reach the port, so nothing
/// elsewhere can knock on it); every interface when a task's workers are
/// cluster jobs or started by hand (`max_workers = 0`), which may run on
/// any node, or when a task's code is a `worker_function`: daisy 1.x's
/// spawn function, which may submit jobs whose `daisy.Client()` connects
/// from a compute node (volara's SlurmWorker does).
pub fn default_listen_address(pipeline: &Pipeline) -> SocketAddr {
    let all_local = pipeline.tasks.iter().all(|task| {
        let spawns = matches!(
            task.command,
            UserCommand::Function {
                kind: CodeKind::WorkerFunction,
                ..
            }
        );
        task.launcher.kind == LauncherKind::Local && task.max_workers > 0 && !spawns
    });
    let ip = match all_local {
        true => Ipv4Addr::LOCALHOST,
        false => Ipv4Addr::UNSPECIFIED,
    };
    SocketAddr::new(IpAddr::V4(ip), 0)
}

/// A run token: never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct RunToken(String);

impl RunToken {
    pub fn secret(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for RunToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunToken(<redacted>)")
    }
}

/// A fresh random token (32 bytes from the kernel, hex encoded).
pub fn new_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .context("reading /dev/urandom for the run token")?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The addresses to advertise for a listener bound to `bound`: every IPv4
/// address of this machine (others first, loopback last) when bound to
/// all interfaces, else just the bound one.
pub fn advertised_addresses(bound: SocketAddr) -> Vec<String> {
    if !bound.ip().is_unspecified() {
        return vec![bound.to_string()];
    }
    let mut ips = interface_ipv4_addresses();
    ips.sort_by_key(|ip| ip.is_loopback());
    if ips.is_empty() {
        ips.push(Ipv4Addr::LOCALHOST);
    }
    ips.iter()
        .map(|ip| SocketAddr::new(IpAddr::V4(*ip), bound.port()).to_string())
        .collect()
}

fn interface_ipv4_addresses() -> Vec<Ipv4Addr> {
    let Ok(interfaces) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut ips: Vec<Ipv4Addr> = interfaces
        .filter_map(|i| i.address?.as_sockaddr_in().map(|a| a.ip()))
        .collect();
    ips.dedup();
    ips
}

/// The context of this run (no task: a worker names its own).
pub fn run_context(addresses: Vec<String>, token: &str) -> WorkerContext {
    WorkerContext {
        addresses,
        task_id: None,
        worker_id: None,
        token: token.to_string(),
        protocol: PROTOCOL_VERSION,
    }
}

/// Writes `context.json` readable by its owner only (it holds the token),
/// atomically: a worker started by hand never reads half a file.
pub fn write_context_file(path: &Path, context: &WorkerContext) -> anyhow::Result<()> {
    write_secret(path, &context.to_json())
}

/// Writes `text` to `path` readable by its owner alone (it holds a
/// token), whole or not at all: through a partial file renamed into place.
pub fn write_secret(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(".partial");
    let partial = std::path::PathBuf::from(partial);
    let _ = std::fs::remove_file(&partial);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .with_context(|| format!("creating {}", partial.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", partial.display()))?;
    std::fs::rename(&partial, path)
        .with_context(|| format!("renaming {} into place", partial.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn tokens_are_long_and_different() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }

    #[test]
    fn a_reservation_holds_its_listener_and_a_token_debug_never_shows() {
        let reserved = Reserved::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = reserved
            .listener
            .as_ref()
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        assert_eq!(reserved.addresses().unwrap(), [format!("127.0.0.1:{port}")]);
        let token = reserved.token.as_ref().unwrap().secret().to_string();
        assert_eq!(token.len(), 64);
        assert!(!format!("{reserved:?}").contains(&token));
    }

    #[test]
    fn all_interfaces_advertise_loopback_last() {
        let addresses = advertised_addresses("0.0.0.0:4000".parse().unwrap());
        assert_eq!(addresses.last().unwrap(), "127.0.0.1:4000");
        assert!(addresses.iter().all(|a| a.ends_with(":4000")));
        let one = advertised_addresses("127.0.0.1:5000".parse().unwrap());
        assert_eq!(one, vec!["127.0.0.1:5000".to_string()]);
    }

    #[test]
    fn the_context_file_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("context.json");
        let context = run_context(vec!["127.0.0.1:1".into()], "secret");
        write_context_file(&path, &context).unwrap();
        write_context_file(&path, &context).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let read = WorkerContext::from_json(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(read, context);
    }
}
