//! A TCP proxy between workers and the driver that can cut the network
//! the way a failed switch does: once [`Proxy::cut`], no byte passes in
//! either direction, yet no socket is closed (no FIN, no RST), so only
//! the silence tells either side that its peer is gone. [`Proxy::close`]
//! (or dropping the proxy) then closes every socket.
//!
//! Plain threads: one accepting, two per connection pumping bytes, each
//! polling the shared state between reads.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// How often the threads look at the shared state while idle.
const POLL: Duration = Duration::from_millis(20);

/// What the proxy's threads share.
#[derive(Default)]
struct State {
    /// No byte is forwarded any more; the sockets stay open.
    cut: AtomicBool,
    /// Every socket is shut down and every thread ends.
    closed: AtomicBool,
    /// Connections accepted so far.
    accepted: AtomicUsize,
    /// Both ends of every connection, to shut them down on close.
    sockets: Mutex<Vec<TcpStream>>,
}

/// A proxy listening on a free loopback port, forwarding to `target`.
pub struct Proxy {
    address: String,
    state: Arc<State>,
}

impl Proxy {
    pub fn start(target: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the proxy");
        listener.set_nonblocking(true).unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let state = Arc::new(State::default());
        let target = target.to_string();
        let accepting = Arc::clone(&state);
        thread::spawn(move || accept_loop(&listener, &target, &accepting));
        Self { address, state }
    }

    /// Where workers connect instead of the driver.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// How many connections were accepted.
    pub fn accepted(&self) -> usize {
        self.state.accepted.load(Ordering::SeqCst)
    }

    /// From now on nothing passes, and nothing is closed.
    pub fn cut(&self) {
        self.state.cut.store(true, Ordering::SeqCst);
    }

    /// Closes every socket and ends the proxy's threads.
    pub fn close(&self) {
        self.state.closed.store(true, Ordering::SeqCst);
        for socket in self.state.sockets.lock().unwrap().iter() {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.close();
    }
}

fn accept_loop(listener: &TcpListener, target: &str, state: &Arc<State>) {
    while !state.closed.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                if let Err(e) = forward(client, target, state) {
                    eprintln!("proxy: cannot forward a connection to {target}: {e}");
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(POLL),
            Err(e) => panic!("proxy: accept failed: {e}"),
        }
    }
}

/// Connects to `target` and pumps bytes both ways on two threads.
fn forward(client: TcpStream, target: &str, state: &Arc<State>) -> std::io::Result<()> {
    client.set_nonblocking(false)?;
    let upstream = TcpStream::connect(target)?;
    for socket in [&client, &upstream] {
        socket.set_nodelay(true)?;
        socket.set_read_timeout(Some(POLL))?;
    }
    state
        .sockets
        .lock()
        .unwrap()
        .extend([client.try_clone()?, upstream.try_clone()?]);
    state.accepted.fetch_add(1, Ordering::SeqCst);
    for (from, to) in [
        (client.try_clone()?, upstream.try_clone()?),
        (upstream, client),
    ] {
        let state = Arc::clone(state);
        thread::spawn(move || pump(from, to, &state));
    }
    Ok(())
}

/// Copies `from` to `to` until either closes or the proxy does. Once cut
/// it stops reading, and drops what it read just before.
fn pump(mut from: TcpStream, mut to: TcpStream, state: &State) {
    let mut buffer = [0u8; 16 * 1024];
    while !state.closed.load(Ordering::SeqCst) {
        if state.cut.load(Ordering::SeqCst) {
            thread::sleep(POLL);
            continue;
        }
        let n = match from.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => break,
        };
        if state.cut.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&buffer[..n]).is_err() {
            break;
        }
    }
    // A close seen before the cut is passed on, as a network would.
    if !state.cut.load(Ordering::SeqCst) {
        let _ = to.shutdown(Shutdown::Write);
    }
}
