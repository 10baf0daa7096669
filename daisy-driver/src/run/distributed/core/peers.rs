//! The welcomed connections: observers, which only ask for snapshots,
//! and workers of one task each, with the blocks they hold and what they
//! asked for.

use crate::run::distributed::connection::ConnId;
use crate::run::slots::SlotId;
use daisy_core::id_hash::IdMap;
use daisy_core::TaskIdx;
use std::collections::BTreeSet;
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
    pub held: IdMap<u64, Instant>,
    /// Set by `AcquireBlocks` until blocks (or Shutdown) are sent.
    pub wants: Option<u32>,
    /// Since when it has waited for blocks, if it does.
    pub idle_since: Option<Instant>,
    /// Why it drains, once it said so, and whether because its job's
    /// walltime runs out.
    pub draining: Option<(String, bool)>,
    /// It drains because its own code ended (`Draining::by_choice`).
    pub by_choice: bool,
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
            held: IdMap::default(),
            wants: None,
            idle_since: None,
            draining: None,
            by_choice: false,
            reported: false,
            cannot_serve: None,
        }
    }
}

/// Every welcomed peer, and the workers whose acquire waits for blocks.
#[derive(Debug)]
pub(super) struct Peers {
    peers: IdMap<ConnId, Peer>,
    /// Per task, the workers whose acquire waits (`wants` is set): after a
    /// release only the tasks that have something for them are looked at,
    /// so its cost does not grow with the number of waiting workers.
    parked: Vec<Parked>,
}

/// One task's waiting workers, by kind: when the task has nothing left
/// to hand out, launched ones are let go and those started by hand wait.
#[derive(Debug, Default)]
struct Parked {
    launched: BTreeSet<ConnId>,
    by_hand: BTreeSet<ConnId>,
}

impl Parked {
    fn of_kind(&mut self, launched: bool) -> &mut BTreeSet<ConnId> {
        match launched {
            true => &mut self.launched,
            false => &mut self.by_hand,
        }
    }
}

/// Which parked workers of a task to take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Take {
    Any,
    LaunchedOnly,
}

impl Peers {
    pub fn new(tasks: usize) -> Self {
        Self {
            peers: IdMap::default(),
            parked: (0..tasks).map(|_| Parked::default()).collect(),
        }
    }

    pub fn insert(&mut self, conn: ConnId, peer: Peer) {
        self.peers.insert(conn, peer);
    }

    pub fn remove(&mut self, conn: ConnId) -> Option<Peer> {
        self.unpark(conn);
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

    /// The worker on `conn` waits for blocks of its task.
    pub fn park(&mut self, conn: ConnId) {
        if let Some(w) = self.worker(conn) {
            let (task, launched) = (w.task, w.launched);
            self.parked[task.index()].of_kind(launched).insert(conn);
        }
    }

    pub fn unpark(&mut self, conn: ConnId) {
        if let Some(w) = self.worker(conn) {
            let (task, launched) = (w.task, w.launched);
            self.parked[task.index()].of_kind(launched).remove(&conn);
        }
    }

    /// Takes the longest-connected waiting worker of `task` of the kind
    /// asked for, launched ones first.
    pub fn take_parked(&mut self, task: TaskIdx, take: Take) -> Option<ConnId> {
        let parked = &mut self.parked[task.index()];
        let conn = parked.launched.pop_first();
        match take {
            Take::Any => conn.or_else(|| parked.by_hand.pop_first()),
            Take::LaunchedOnly => conn,
        }
    }

    pub fn is_parked(&self, conn: ConnId) -> bool {
        self.worker(conn).is_some_and(|w| {
            let parked = &self.parked[w.task.index()];
            parked.launched.contains(&conn) || parked.by_hand.contains(&conn)
        })
    }

    /// Whether workers of `task` of this kind wait.
    pub fn has_parked(&self, task: TaskIdx, take: Take) -> bool {
        let parked = &self.parked[task.index()];
        !parked.launched.is_empty() || (take == Take::Any && !parked.by_hand.is_empty())
    }

    /// Every waiting worker.
    pub fn parked(&self) -> impl Iterator<Item = ConnId> + '_ {
        (self.parked.iter()).flat_map(|p| p.launched.iter().chain(&p.by_hand).copied())
    }

    /// Forgets every pending acquire; returns every connection, to be
    /// told to stop.
    pub fn stop_all(&mut self) -> Vec<ConnId> {
        self.parked.iter_mut().for_each(|p| *p = Parked::default());
        for worker in self.workers_mut() {
            worker.wants = None;
        }
        self.peers.keys().copied().collect()
    }
}
