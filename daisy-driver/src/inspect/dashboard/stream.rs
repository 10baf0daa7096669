//! `/api/stream`: server-sent events, one `snapshot` event per drawing,
//! the latest first, and a comment line now and then so that proxies and
//! SSH tunnels keep an idle stream open. The stream ends after the final
//! state. An open stream is what keeps drawing going ([`Snapshots`]).

use super::snapshots::Snapshots;
use hyper::body::{Body, Bytes, Frame};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;

/// Silence longer than this gets a comment line.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// How long the browser waits before it connects again after a break.
const RETRY: &[u8] = b"retry: 2000\n\n";

/// The body of one page's stream.
pub struct EventStream {
    events: mpsc::Receiver<Bytes>,
    _watching: Watching,
}

/// Counts a page as watching while its stream is open.
struct Watching(Snapshots);

impl Drop for Watching {
    fn drop(&mut self) {
        self.0.watching(false);
    }
}

impl EventStream {
    /// Opens a stream of the drawings of `snapshots`; must be called on
    /// the runtime (it spawns the task that feeds the stream).
    pub fn open(snapshots: &Snapshots) -> Self {
        let (send, events) = mpsc::channel(2);
        snapshots.watching(true);
        tokio::spawn(feed(snapshots.subscribe(), send));
        Self {
            events,
            _watching: Watching(snapshots.clone()),
        }
    }
}

/// Sends each new drawing until the final one, the page leaves, or
/// drawing stops.
async fn feed(
    mut latest: tokio::sync::watch::Receiver<Option<std::sync::Arc<super::Snapshot>>>,
    send: mpsc::Sender<Bytes>,
) {
    if send.send(Bytes::from_static(RETRY)).await.is_err() {
        return;
    }
    loop {
        let snapshot = latest.borrow_and_update().clone();
        if let Some(snapshot) = snapshot {
            if send.send(snapshot.event.clone()).await.is_err() || snapshot.over {
                return;
            }
        }
        loop {
            match tokio::time::timeout(KEEP_ALIVE, latest.changed()).await {
                Ok(Ok(())) => break,
                Ok(Err(_)) => return,
                Err(_) => {
                    let comment = Bytes::from_static(b": still here\n\n");
                    if send.send(comment).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

impl Body for EventStream {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.events
            .poll_recv(cx)
            .map(|event| event.map(|bytes| Ok(Frame::data(bytes))))
    }
}
