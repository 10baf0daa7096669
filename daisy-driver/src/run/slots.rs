//! Worker accounting by connection, and the budget shares workers hold.
//!
//! A worker slot is `Submitted → Connected → Gone(clean | lost | failed
//! start)`. A submit command returning says nothing about a worker (an
//! sbatch job may queue for hours), so a slot is alive while its job is
//! queued or its worker is connected, and only the connection says that a
//! worker really works. Workers started by hand get a slot when they
//! connect and never count against the budget.
//!
//! A launched slot owns its task's share of the [`Budget`]: it takes it
//! when it is created (or when its requeued job comes back) and gives it
//! back when it ends, once, so the two can never drift apart.
//!
//! Unclean exits (a failed start, a lost connection) count per task; a task
//! may restart workers while it has had at most `max_worker_restarts` of
//! them, and is abandoned once it has had more and no worker is left.

use crate::pipeline::budget::Share;
use crate::run::budget::Budget;
use daisy_core::TaskIdx;
use std::collections::BTreeMap;
use std::time::Instant;

/// A worker's id in this run: its slot's, sent in its Welcome and
/// `DAISY_CONTEXT`, named in events and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SlotId(pub u64);

impl std::fmt::Display for SlotId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

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
    /// The worker's end of the connection broke while it ran blocks (its
    /// process died: a crash, the OOM killer): the death is blamed on
    /// those blocks, which fail, and does not count against the task's
    /// `max_worker_restarts`.
    DiedInBlocks(String),
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
            Gone::Lost(why) | Gone::DiedInBlocks(why) | Gone::FailedStart(why) => Some(why),
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
    pub task: TaskIdx,
    /// Started by us (holds a budget share) rather than by hand.
    pub launched: bool,
    /// The budget's ids this worker holds (none if started by hand), kept
    /// after it ends to say what it had.
    pub share: Share,
    pub job: Option<String>,
    pub state: SlotState,
    pub connected: Option<Instant>,
}

/// All slots of a run, the budget their shares come from, and per task
/// the unclean exits so far.
#[derive(Debug)]
pub struct Slots {
    slots: BTreeMap<SlotId, Slot>,
    next_id: u64,
    budget: Budget,
    /// Per task, the share of the budget each of its launched workers holds.
    requires: Vec<BTreeMap<String, u64>>,
    unclean_exits: Vec<u32>,
    /// Per task, why its last unclean exit happened.
    last_unclean: Vec<Option<String>>,
    /// Per task, the slots queued or connected.
    live: Vec<u32>,
}

/// A worker that said Hello, as its slot knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connected {
    pub id: SlotId,
    /// Started by us rather than by hand.
    pub launched: bool,
    /// A launched worker back after its job was requeued.
    pub requeued: bool,
}

/// A requeued worker came back, but its share went to another worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareGone;

impl Slots {
    /// Slots for tasks whose launched workers each hold `requires[task]`
    /// of `budget`.
    pub fn new(budget: Budget, requires: Vec<BTreeMap<String, u64>>) -> Self {
        let tasks = requires.len();
        Self {
            slots: BTreeMap::new(),
            next_id: 1,
            budget,
            requires,
            unclean_exits: vec![0; tasks],
            last_unclean: vec![None; tasks],
            live: vec![0; tasks],
        }
    }

    fn next_id(&mut self) -> SlotId {
        self.next_id += 1;
        SlotId(self.next_id - 1)
    }

    /// A worker of `task` is about to be launched, if the budget has its
    /// share: from now on it holds its slot and share, before the
    /// cluster's scheduler has even answered.
    pub fn launch(&mut self, task: TaskIdx) -> Option<SlotId> {
        let share = self.budget.try_allocate(&self.requires[task.index()])?;
        let id = self.next_id();
        self.insert(id, task, share, true);
        Some(id)
    }

    /// The cluster's scheduler accepted a launched worker's job.
    pub fn submitted(&mut self, id: SlotId, job: String) {
        if let Some(slot) = self.slots.get_mut(&id) {
            slot.job = Some(job);
        }
    }

    fn insert(&mut self, id: SlotId, task: TaskIdx, share: Share, launched: bool) {
        let slot = Slot {
            task,
            launched,
            share,
            job: None,
            state: SlotState::Submitted,
            connected: None,
        };
        self.slots.insert(id, slot);
        self.live[task.index()] += 1;
    }

    /// The slot of a launched worker that left cleanly and now says Hello
    /// again: its job was requeued (preempted, or `scontrol requeue`) and
    /// runs anew.
    fn requeued(&self, claimed: Option<SlotId>, task: TaskIdx) -> Option<SlotId> {
        let id = claimed?;
        self.slots
            .get(&id)
            .is_some_and(|s| {
                s.task == task && s.launched && s.state == SlotState::Gone(Gone::Clean)
            })
            .then_some(id)
    }

    /// A worker of `task` said Hello. A launched worker claims its own
    /// slot, also when its job comes back after a requeue (taking its
    /// budget share again, if it is still there); anyone else (started by
    /// hand, or claiming a slot that is not its to take) gets a new one.
    pub fn connect(
        &mut self,
        claimed: Option<SlotId>,
        task: TaskIdx,
        now: Instant,
    ) -> Result<Connected, ShareGone> {
        let requeued = self.requeued(claimed, task);
        let share_again = match requeued {
            Some(_) => Some(
                self.budget
                    .try_allocate(&self.requires[task.index()])
                    .ok_or(ShareGone)?,
            ),
            None => None,
        };
        let own = claimed.filter(|id| {
            self.slots
                .get(id)
                .is_some_and(|s| s.task == task && s.state == SlotState::Submitted)
        });
        let id = own.or(requeued).unwrap_or_else(|| {
            let id = self.next_id();
            self.insert(id, task, Share::new(), false);
            id
        });
        let slot = self.slots.get_mut(&id).expect("slot exists");
        if let Some(share) = share_again {
            slot.share = share;
            self.live[task.index()] += 1;
        }
        slot.state = SlotState::Connected;
        slot.connected = Some(now);
        Ok(Connected {
            id,
            launched: slot.launched,
            requeued: requeued.is_some(),
        })
    }

    /// A slot ended: a launched one gives its budget share back. Returns
    /// the slot the first time only.
    pub fn end(&mut self, id: SlotId, how: Gone) -> Option<&Slot> {
        let slot = self.slots.get_mut(&id)?;
        if matches!(slot.state, SlotState::Gone(_)) {
            return None;
        }
        let task = slot.task.index();
        self.live[task] -= 1;
        if how.is_unclean() && !matches!(how, Gone::DiedInBlocks(_)) {
            self.unclean_exits[task] += 1;
            self.last_unclean[task] = how.why().map(str::to_string);
        }
        slot.state = SlotState::Gone(how);
        self.budget.release(&slot.share);
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
        self.live[task.index()]
    }

    pub fn unclean_exits(&self, task: TaskIdx) -> u32 {
        self.unclean_exits[task.index()]
    }

    /// Why the last unclean exit of `task` happened, if it had one.
    pub fn last_unclean_exit(&self, task: TaskIdx) -> Option<&str> {
        self.last_unclean[task.index()].as_deref()
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

    /// The launched workers of `task` whose jobs are submitted (or wait
    /// to be) and never connected.
    pub fn queued(&self, task: TaskIdx) -> Vec<SlotId> {
        (self.slots.iter())
            .filter(|(_, slot)| slot.task == task && slot.launched)
            .filter(|(_, slot)| slot.state == SlotState::Submitted && slot.connected.is_none())
            .map(|(id, _)| *id)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: TaskIdx = TaskIdx(0);

    /// Slots of one task whose workers each need one of `gpus` GPUs.
    fn slots(gpus: u64) -> Slots {
        let gpu: BTreeMap<String, u64> = [("gpu".to_string(), 1)].into();
        let ids = (0..gpus).map(|gpu| gpu.to_string()).collect();
        let budget = Budget::new([("gpu".to_string(), ids)].into());
        Slots::new(budget, vec![gpu])
    }

    fn gpus_used(slots: &Slots) -> u64 {
        slots.budget.used().get("gpu").copied().unwrap_or(0)
    }

    #[test]
    fn a_launched_worker_goes_submitted_connected_gone() {
        let now = Instant::now();
        let mut slots = slots(1);
        let id = slots.launch(T).unwrap();
        assert_eq!(slots.live(T), 1, "a job being submitted holds its slot");
        slots.submitted(id, "123".into());
        assert_eq!(slots.get(id).unwrap().job.as_deref(), Some("123"));
        let connected = slots.connect(Some(id), T, now).unwrap();
        assert_eq!((connected.id, connected.launched), (id, true));
        assert_eq!(slots.get(id).unwrap().state, SlotState::Connected);
        assert!(slots.end(id, Gone::Clean).is_some());
        assert!(
            slots.end(id, Gone::Lost("again".into())).is_none(),
            "ends once"
        );
        assert_eq!((slots.live(T), slots.unclean_exits(T)), (0, 0));
    }

    #[test]
    fn a_slot_holds_its_share_from_launch_to_its_one_end() {
        let now = Instant::now();
        let mut slots = slots(2);
        let (a, b) = (slots.launch(T).unwrap(), slots.launch(T).unwrap());
        assert_eq!(slots.launch(T), None, "both GPUs are held");
        assert_eq!(gpus_used(&slots), 2);
        slots.end(a, Gone::Lost("eof".into()));
        slots.end(a, Gone::Clean);
        slots.job_ended(a, "exit 1".into());
        assert_eq!(gpus_used(&slots), 1, "returned once, however it ends");
        slots.job_ended(b, "cancelled".into());
        assert_eq!(gpus_used(&slots), 0);
        let by_hand = slots.connect(None, T, now).unwrap();
        assert!(!by_hand.launched);
        slots.end(by_hand.id, Gone::Clean);
        assert_eq!(gpus_used(&slots), 0, "workers started by hand hold none");
    }

    #[test]
    fn failed_starts_and_lost_workers_count_as_unclean_exits() {
        let now = Instant::now();
        let mut slots = slots(3);
        let queued = slots.launch(T).unwrap();
        assert!(slots.job_ended(queued, "exit 1".into()).is_some());
        let connected = slots.launch(T).unwrap();
        slots.connect(Some(connected), T, now).unwrap();
        assert!(
            slots.job_ended(connected, "exit 0".into()).is_none(),
            "the connection decides"
        );
        slots.end(connected, Gone::Lost("eof".into()));
        let refused = slots.launch(T).unwrap();
        slots.end(refused, Gone::FailedStart("invalid partition".into()));
        assert_eq!(slots.unclean_exits(T), 3);
        assert_eq!(slots.last_unclean_exit(T), Some("invalid partition"));
    }

    #[test]
    fn a_requeued_worker_takes_its_clean_slot_and_share_again_but_not_a_lost_one() {
        let now = Instant::now();
        let mut slots = slots(2);
        let (first, second) = (slots.launch(T).unwrap(), slots.launch(T).unwrap());
        for id in [first, second] {
            slots.connect(Some(id), T, now).unwrap();
        }
        slots.end(first, Gone::Clean);
        slots.end(second, Gone::Lost("silent".into()));
        let back = slots.connect(Some(first), T, now).unwrap();
        assert_eq!((back.id, back.requeued), (first, true));
        assert_eq!(slots.get(first).unwrap().state, SlotState::Connected);
        assert_eq!((slots.live(T), gpus_used(&slots)), (1, 1));
        let stranger = slots.connect(Some(second), T, now).unwrap();
        assert_ne!(stranger.id, second, "a lost slot stays lost");
        assert!(!stranger.requeued);
    }

    #[test]
    fn a_requeued_worker_whose_share_went_elsewhere_is_refused() {
        let now = Instant::now();
        let mut slots = slots(1);
        let first = slots.launch(T).unwrap();
        slots.connect(Some(first), T, now).unwrap();
        slots.end(first, Gone::Clean);
        let successor = slots.launch(T).unwrap();
        assert_eq!(slots.connect(Some(first), T, now), Err(ShareGone));
        assert_eq!(gpus_used(&slots), 1, "the successor keeps its share");
        assert_eq!(
            slots.get(first).unwrap().state,
            SlotState::Gone(Gone::Clean)
        );
        assert!(slots.get(successor).is_some());
    }

    #[test]
    fn workers_started_by_hand_get_new_slots() {
        let now = Instant::now();
        let mut slots = slots(0);
        let a = slots.connect(None, T, now).unwrap().id;
        let b = slots.connect(Some(SlotId(999)), T, now).unwrap().id;
        assert_ne!(a, b);
        assert!(!slots.get(a).unwrap().launched);
        assert_eq!(slots.live(T), 2);
    }
}
