//! The welcomed connections: observers, which only ask for snapshots,
//! and workers of one task each, with the blocks they hold and what they
//! asked for.

use crate::connection::ConnId;
use crate::slots::SlotId;
use daisy_core::TaskIdx;
use std::collections::{BTreeSet, HashMap};
use std::time::Instant;

/// A welcomed peer.
#[derive(Debug)]
pub(super) enum Peer {
    Observer,
    Worker(Worker),
}

/// A connected worker as the core sees it.
#[derive(Debug)]
pub(super) struct Worker {
    pub task: TaskIdx,
    pub slot: SlotId,
    /// Started by the launcher (holds a budget share), not by hand.
    pub launched: bool,
    /// Spatial ids of the blocks it holds, and since when.
    pub held: HashMap<u64, Instant>,
    /// Set by `AcquireBlocks` until blocks (or Shutdown) are sent.
    pub wants: Option<u32>,
    /// Since when it has waited for blocks, if it does.
    pub idle_since: Option<Instant>,
    /// Why it drains, once it said so, and whether because its job's
    /// walltime runs out.
    pub draining: Option<(String, bool)>,
    /// It has reported a block's result.
    pub reported: bool,
    /// Why it cannot run its task's code, if it said so.
    pub cannot_serve: Option<String>,
}

impl Worker {
    pub fn new(task: TaskIdx, slot: SlotId, launched: bool) -> Self {
        Self {
            task,
            slot,
            launched,
            held: HashMap::new(),
            wants: None,
            idle_since: None,
            draining: None,
            reported: false,
            cannot_serve: None,
        }
    }
}

/// Every welcomed peer, and the workers whose acquire waits for blocks.
#[derive(Debug, Default)]
pub(super) struct Peers {
    peers: HashMap<ConnId, Peer>,
    /// Workers whose acquire waits (`wants` is set), so that serving them
    /// after a release costs nothing when there are none, however many
    /// workers are connected.
    parked: BTreeSet<ConnId>,
}

impl Peers {
    pub fn insert(&mut self, conn: ConnId, peer: Peer) {
        self.peers.insert(conn, peer);
    }

    pub fn remove(&mut self, conn: ConnId) -> Option<Peer> {
        self.parked.remove(&conn);
        self.peers.remove(&conn)
    }

    pub fn get(&self, conn: ConnId) -> Option<&Peer> {
        self.peers.get(&conn)
    }

    pub fn worker(&self, conn: ConnId) -> Option<&Worker> {
        match self.peers.get(&conn) {
            Some(Peer::Worker(worker)) => Some(worker),
            _ => None,
        }
    }

    pub fn worker_mut(&mut self, conn: ConnId) -> Option<&mut Worker> {
        match self.peers.get_mut(&conn) {
            Some(Peer::Worker(worker)) => Some(worker),
            _ => None,
        }
    }

    pub fn workers(&self) -> impl Iterator<Item = (ConnId, &Worker)> {
        self.peers.iter().filter_map(|(&conn, peer)| match peer {
            Peer::Worker(worker) => Some((conn, worker)),
            Peer::Observer => None,
        })
    }

    pub fn workers_mut(&mut self) -> impl Iterator<Item = &mut Worker> {
        self.peers.values_mut().filter_map(|peer| match peer {
            Peer::Worker(worker) => Some(worker),
            Peer::Observer => None,
        })
    }

    /// Workers of `task`.
    pub fn of_task(&self, task: TaskIdx) -> impl Iterator<Item = &Worker> {
        self.workers()
            .map(|(_, worker)| worker)
            .filter(move |w| w.task == task)
    }

    pub fn hold_blocks(&self) -> bool {
        self.workers().any(|(_, w)| !w.held.is_empty())
    }

    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    pub fn park(&mut self, conn: ConnId) {
        self.parked.insert(conn);
    }

    pub fn unpark(&mut self, conn: ConnId) {
        self.parked.remove(&conn);
    }

    /// Takes every parked worker (to be served, parking again if still
    /// waiting).
    pub fn take_parked(&mut self) -> BTreeSet<ConnId> {
        std::mem::take(&mut self.parked)
    }

    pub fn parked(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.parked.iter().copied()
    }

    /// Forgets every pending acquire; returns every connection, to be
    /// told to stop.
    pub fn stop_all(&mut self) -> Vec<ConnId> {
        self.parked.clear();
        for worker in self.workers_mut() {
            worker.wants = None;
        }
        self.peers.keys().copied().collect()
    }
}
