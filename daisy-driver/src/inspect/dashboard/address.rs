//! Where the dashboard listens (`--dashboard[=ADDR]`), and the URL that
//! opens it.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::str::FromStr;

/// The port tried when none is given; if it is taken (another run's
/// dashboard), any free port is used instead, and the printed URL says
/// which.
pub const DEFAULT_PORT: u16 = 8790;

/// `--dashboard[=ADDR]`: `HOST:PORT`, `HOST` or `PORT`; the host defaults
/// to 127.0.0.1 and the port to [`DEFAULT_PORT`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DashboardAddr {
    pub ip: IpAddr,
    /// `None`: [`DEFAULT_PORT`], else a free one.
    pub port: Option<u16>,
}

impl Default for DashboardAddr {
    fn default() -> Self {
        Self {
            ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port: None,
        }
    }
}

impl FromStr for DashboardAddr {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(Self {
                ip: addr.ip(),
                port: Some(addr.port()),
            });
        }
        if let Ok(ip) = text.trim_start_matches('[').trim_end_matches(']').parse() {
            return Ok(Self { ip, port: None });
        }
        if let Ok(port) = text.trim_start_matches(':').parse() {
            return Ok(Self {
                port: Some(port),
                ..Self::default()
            });
        }
        Err(format!(
            "{text:?} is not an address: give HOST:PORT (127.0.0.1:8790, 0.0.0.0:0 for any free \
             port), an IP address, or a port"
        ))
    }
}

impl fmt::Display for DashboardAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let port = self.port.unwrap_or(DEFAULT_PORT);
        write!(f, "{}", SocketAddr::new(self.ip, port))
    }
}

impl DashboardAddr {
    /// Binds the listener: the port asked for, or the default one, else
    /// (the default being taken) any free port.
    pub fn bind(&self) -> std::io::Result<TcpListener> {
        match self.port {
            Some(port) => TcpListener::bind((self.ip, port)),
            None => TcpListener::bind((self.ip, DEFAULT_PORT))
                .or_else(|_| TcpListener::bind((self.ip, 0))),
        }
    }
}

/// The URL that opens the dashboard bound at `bound`: a host name when
/// bound to every interface (the address others reach it by), as Jupyter
/// prints it.
pub fn url(bound: SocketAddr, token: &str) -> String {
    let host = match bound.ip().is_unspecified() {
        true => nix::unistd::gethostname()
            .ok()
            .and_then(|name| name.into_string().ok())
            .filter(|name| !name.is_empty())
            .map(|name| format!("{name}:{}", bound.port()))
            .unwrap_or_else(|| bound.to_string()),
        false => bound.to_string(),
    };
    format!("http://{host}/?token={token}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_host_and_port_or_either() {
        let parsed = |text: &str| text.parse::<DashboardAddr>().unwrap().to_string();
        assert_eq!(parsed("0.0.0.0:9000"), "0.0.0.0:9000");
        assert_eq!(parsed("10.1.2.3"), format!("10.1.2.3:{DEFAULT_PORT}"));
        assert_eq!(parsed("9000"), "127.0.0.1:9000");
        assert_eq!(parsed(":9000"), "127.0.0.1:9000");
        assert_eq!(parsed("[::1]:9000"), "[::1]:9000");
        assert_eq!(parsed("::1"), format!("[::1]:{DEFAULT_PORT}"));
        let error = "localhost:x".parse::<DashboardAddr>().unwrap_err();
        assert!(
            error.contains("\"localhost:x\" is not an address"),
            "{error}"
        );
    }

    #[test]
    fn the_url_carries_the_token_and_the_reachable_host() {
        let bound: SocketAddr = "127.0.0.1:8790".parse().unwrap();
        assert_eq!(url(bound, "abc"), "http://127.0.0.1:8790/?token=abc");
        let everywhere: SocketAddr = "0.0.0.0:8790".parse().unwrap();
        let host = nix::unistd::gethostname().unwrap();
        let host = host.to_string_lossy();
        assert_eq!(
            url(everywhere, "abc"),
            format!("http://{host}:8790/?token=abc")
        );
    }

    #[test]
    fn a_taken_default_port_falls_back_to_a_free_one() {
        let _taken = TcpListener::bind(("127.0.0.1", DEFAULT_PORT));
        let listener = DashboardAddr::default().bind().unwrap();
        assert!(listener.local_addr().unwrap().port() != 0);
        let asked = DashboardAddr {
            port: Some(listener.local_addr().unwrap().port()),
            ..DashboardAddr::default()
        };
        assert!(
            asked.bind().is_err(),
            "a port asked for is that port or none"
        );
    }
}
