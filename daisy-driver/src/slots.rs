//! Worker accounting by connection.
//!
//! A worker slot is `Submitted → Connected → Gone(clean | lost | failed
//! start)`. A submit command returning says nothing about a worker (an
//! sbatch job may queue for hours), so a slot is alive while its job is
//! queued or its worker is connected, and only the connection says that a
//! worker really works. Workers started by hand get a slot when they
//! connect and never count against the budget.
//!
//! Unclean exits (a failed start, a lost connection) count per task; a task
//! may restart workers while it has had at most `max_worker_restarts` of
//! them, and is abandoned once it has had more and no worker is left.

use daisy_core::TaskIdx;
use std::collections::BTreeMap;
use std::time::Instant;

pub type SlotId = u64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotState {
    Submitted,
    Connected,
    Gone(Gone),
}

/// How a slot ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gone {
    /// The worker disconnected after being told to stop, or drained.
    Clean,
    /// The connection broke or went silent.
    Lost(String),
    /// The job ended without its worker ever connecting.
    FailedStart(String),
}

impl Gone {
    pub fn is_unclean(&self) -> bool {
        !matches!(self, Gone::Clean)
    }

    /// Why an unclean end happened.
    pub fn why(&self) -> Option<&str> {
        match self {
            Gone::Clean => None,
            Gone::Lost(why) | Gone::FailedStart(why) => Some(why),
        }
    }
}

/// Workers by kind: started by the driver's launcher, or by hand.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerCount {
    pub launched: u32,
    pub by_hand: u32,
}

impl std::fmt::Display for WorkerCount {
    /// `3`, or `3+2 by hand` when some were started by hand.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.by_hand {
            0 => write!(f, "{}", self.launched),
            n => write!(f, "{}+{n} by hand", self.launched),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Slot {
    pub id: SlotId,
    pub task: TaskIdx,
    /// Started by us (holds a budget share) rather than by hand.
    pub launched: bool,
    pub job: Option<String>,
    pub state: SlotState,
    pub submitted: Instant,
    pub connected: Option<Instant>,
}

/// All slots of a run, and per task the unclean exits so far.
#[derive(Debug)]
pub struct Slots {
    slots: BTreeMap<SlotId, Slot>,
    next_id: SlotId,
    unclean_exits: Vec<u32>,
    /// Per task, why its last unclean exit happened.
    last_unclean: Vec<Option<String>>,
    started: Vec<u32>,
}

impl Slots {
    pub fn new(num_tasks: usize) -> Self {
        Self {
            slots: BTreeMap::new(),
            next_id: 1,
            unclean_exits: vec![0; num_tasks],
            last_unclean: vec![None; num_tasks],
            started: vec![0; num_tasks],
        }
    }

    /// Reserves the id of a worker about to be launched.
    pub fn next_id(&mut self) -> SlotId {
        self.next_id += 1;
        self.next_id - 1
    }

    /// A launched worker is being submitted: from now on it holds its
    /// slot, before the scheduler has even answered.
    pub fn submitting(&mut self, id: SlotId, task: TaskIdx) {
        self.started[task.index()] += 1;
        self.insert(id, task, true, None, SlotState::Submitted);
    }

    /// The scheduler accepted a launched worker's job.
    pub fn submitted(&mut self, id: SlotId, job: String) {
        if let Some(slot) = self.slots.get_mut(&id) {
            slot.job = Some(job);
        }
    }

    fn insert(
        &mut self,
        id: SlotId,
        task: TaskIdx,
        launched: bool,
        job: Option<String>,
        state: SlotState,
    ) {
        let slot = Slot {
            id,
            task,
            launched,
            job,
            state,
            submitted: Instant::now(),
            connected: None,
        };
        self.slots.insert(id, slot);
    }

    /// The slot of a launched worker that left cleanly and now says Hello
    /// again: its job was requeued (preempted, or `scontrol requeue`) and
    /// runs anew.
    pub fn requeued(&self, claimed: Option<SlotId>, task: TaskIdx) -> Option<SlotId> {
        let id = claimed?;
        self.slots
            .get(&id)
            .is_some_and(|s| {
                s.task == task && s.launched && s.state == SlotState::Gone(Gone::Clean)
            })
            .then_some(id)
    }

    /// A worker of `task` said Hello. A launched worker claims its own
    /// slot, also when its job comes back after a requeue (the caller
    /// takes its budget share again, see [`Self::requeued`]); anyone else
    /// (started by hand, or claiming a slot that is not its to take) gets
    /// a new one.
    pub fn connect(&mut self, claimed: Option<SlotId>, task: TaskIdx) -> SlotId {
        let requeued = self.requeued(claimed, task);
        let own = claimed.filter(|id| {
            self.slots
                .get(id)
                .is_some_and(|s| s.task == task && s.state == SlotState::Submitted)
        });
        let own = own.or(requeued);
        let id = own.unwrap_or_else(|| {
            let id = self.next_id();
            self.insert(id, task, false, None, SlotState::Submitted);
            id
        });
        let slot = self.slots.get_mut(&id).expect("slot exists");
        slot.state = SlotState::Connected;
        slot.connected = Some(Instant::now());
        id
    }

    /// A slot ended; returns it (so its budget share can be released) the
    /// first time only.
    pub fn end(&mut self, id: SlotId, how: Gone) -> Option<&Slot> {
        let slot = self.slots.get_mut(&id)?;
        if matches!(slot.state, SlotState::Gone(_)) {
            return None;
        }
        if how.is_unclean() {
            self.unclean_exits[slot.task.index()] += 1;
            self.last_unclean[slot.task.index()] = how.why().map(str::to_string);
        }
        slot.state = SlotState::Gone(how);
        Some(slot)
    }

    /// The launcher saw a job end: if its worker never connected, that is a
    /// failed start.
    pub fn job_ended(&mut self, id: SlotId, how: String) -> Option<&Slot> {
        let never_connected = self.slots.get(&id)?.state == SlotState::Submitted;
        if never_connected {
            return self.end(id, Gone::FailedStart(how));
        }
        None
    }

    pub fn get(&self, id: SlotId) -> Option<&Slot> {
        self.slots.get(&id)
    }

    /// Slots of `task` that are queued or connected.
    pub fn live(&self, task: TaskIdx) -> u32 {
        self.slots
            .values()
            .filter(|s| s.task == task && !matches!(s.state, SlotState::Gone(_)))
            .count() as u32
    }

    /// Launched slots still alive (their jobs must be cancelled at exit).
    pub fn live_launched(&self) -> Vec<SlotId> {
        self.slots
            .values()
            .filter(|s| s.launched && !matches!(s.state, SlotState::Gone(_)))
            .map(|s| s.id)
            .collect()
    }

    pub fn unclean_exits(&self, task: TaskIdx) -> u32 {
        self.unclean_exits[task.index()]
    }

    /// Why the last unclean exit of `task` happened, if it had one.
    pub fn last_unclean_exit(&self, task: TaskIdx) -> Option<&str> {
        self.last_unclean[task.index()].as_deref()
    }

    pub fn started(&self, task: TaskIdx) -> u32 {
        self.started[task.index()]
    }

    /// Workers of `task` that connected at some point, by kind.
    pub fn connected(&self, task: TaskIdx) -> WorkerCount {
        let mut count = WorkerCount::default();
        for slot in self.slots.values() {
            match (slot.task == task && slot.connected.is_some(), slot.launched) {
                (false, _) => {}
                (true, true) => count.launched += 1,
                (true, false) => count.by_hand += 1,
            }
        }
        count
    }

    pub fn all(&self) -> impl Iterator<Item = &Slot> {
        self.slots.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: TaskIdx = TaskIdx(0);

    #[test]
    fn a_launched_worker_goes_submitted_connected_gone() {
        let mut slots = Slots::new(1);
        let id = slots.next_id();
        slots.submitting(id, T);
        assert_eq!(slots.live(T), 1, "a job being submitted holds its slot");
        slots.submitted(id, "123".into());
        assert_eq!(slots.get(id).unwrap().job.as_deref(), Some("123"));
        assert_eq!(slots.connect(Some(id), T), id);
        assert_eq!(slots.get(id).unwrap().state, SlotState::Connected);
        assert!(slots.end(id, Gone::Clean).is_some());
        assert!(
            slots.end(id, Gone::Lost("again".into())).is_none(),
            "ends once"
        );
        assert_eq!((slots.live(T), slots.unclean_exits(T)), (0, 0));
    }

    #[test]
    fn failed_starts_and_lost_workers_count_as_unclean_exits() {
        let mut slots = Slots::new(1);
        let queued = slots.next_id();
        slots.submitting(queued, T);
        assert!(slots.job_ended(queued, "exit 1".into()).is_some());
        let connected = slots.next_id();
        slots.submitting(connected, T);
        slots.connect(Some(connected), T);
        assert!(
            slots.job_ended(connected, "exit 0".into()).is_none(),
            "the connection decides"
        );
        slots.end(connected, Gone::Lost("eof".into()));
        let refused = slots.next_id();
        slots.submitting(refused, T);
        slots.end(refused, Gone::FailedStart("invalid partition".into()));
        assert_eq!(slots.unclean_exits(T), 3);
        assert_eq!(slots.started(T), 3);
    }

    #[test]
    fn a_requeued_worker_takes_its_clean_slot_again_but_not_a_lost_one() {
        let mut slots = Slots::new(1);
        let (first, second) = (slots.next_id(), slots.next_id());
        for id in [first, second] {
            slots.submitting(id, T);
            slots.connect(Some(id), T);
        }
        slots.end(first, Gone::Clean);
        slots.end(second, Gone::Lost("silent".into()));
        assert_eq!(slots.requeued(Some(first), T), Some(first));
        assert_eq!(slots.requeued(Some(second), T), None);
        assert_eq!(slots.connect(Some(first), T), first);
        assert_eq!(slots.get(first).unwrap().state, SlotState::Connected);
        assert_eq!(slots.live(T), 1);
        assert_ne!(
            slots.connect(Some(second), T),
            second,
            "a lost slot stays lost"
        );
        assert_eq!(slots.started(T), 2, "a requeue is no new start");
    }

    #[test]
    fn workers_started_by_hand_get_new_slots() {
        let mut slots = Slots::new(1);
        let a = slots.connect(None, T);
        let b = slots.connect(Some(999), T);
        assert_ne!(a, b);
        assert!(!slots.get(a).unwrap().launched);
        assert_eq!(slots.live(T), 2);
        assert!(slots.live_launched().is_empty());
    }
}
