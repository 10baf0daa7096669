//! Done blocks summed up for `events.jsonl`: one `blocks_done` record per
//! worker and task for the results of about a second, instead of a
//! `block_done` line per block, so the event log of a run of 10⁸ blocks
//! stays a few MB. The done markers hold which blocks are done; the
//! records hold what the report draws (when, on which worker, how long
//! the blocks ran).

use crate::run_dir::events::run_times::RunTimes;
use crate::run_dir::events::Event;
use std::collections::BTreeMap;

/// How long the results of one worker are summed up before they are
/// written as one record.
pub const WINDOW_SECONDS: f64 = 1.0;

/// The blocks of one worker and task since its last record.
#[derive(Clone, Debug, PartialEq)]
struct Tally {
    count: u64,
    /// Unix seconds when the first and the last block ended.
    first: f64,
    last: f64,
    /// The earliest measured start (end minus run time).
    start: Option<f64>,
    run_times: RunTimes,
}

/// Done blocks not yet written, by (task index, worker id).
#[derive(Debug, Default)]
pub struct DoneTally {
    open: BTreeMap<(usize, Option<u64>), Tally>,
}

/// A record ready to be written: its line's time and its event.
pub struct Record<'a> {
    pub time: f64,
    pub event: Event<'a>,
}

impl DoneTally {
    /// Counts a block of task `task` that `worker_id` finished at `end`
    /// (Unix seconds) after running `seconds`, as it measured them.
    pub fn add(&mut self, task: usize, worker_id: Option<u64>, end: f64, seconds: Option<f64>) {
        let tally = self.open.entry((task, worker_id)).or_insert(Tally {
            count: 0,
            first: end,
            last: end,
            start: None,
            run_times: RunTimes::default(),
        });
        tally.count += 1;
        tally.last = tally.last.max(end);
        if let Some(seconds) = seconds.filter(|s| s.is_finite() && *s >= 0.0) {
            let start = end - seconds;
            tally.start = Some(tally.start.map_or(start, |s| s.min(start)));
            tally.run_times.add(seconds);
        }
    }

    /// Takes the records whose first block ended at least
    /// [`WINDOW_SECONDS`] before `now`, or all of them if `all`.
    pub fn take<'t>(&mut self, now: f64, all: bool, task_ids: &'t [String]) -> Vec<Record<'t>> {
        let due = |tally: &Tally| all || now - tally.first >= WINDOW_SECONDS;
        let keys: Vec<_> = (self.open.iter())
            .filter(|(_, tally)| due(tally))
            .map(|(key, _)| *key)
            .collect();
        keys.into_iter()
            .filter_map(|key| Some((key, self.open.remove(&key)?)))
            .map(|((task, worker_id), tally)| record(&task_ids[task], worker_id, tally))
            .collect()
    }
}

fn record(task: &str, worker_id: Option<u64>, tally: Tally) -> Record<'_> {
    let event = Event::BlocksDone {
        task: task.into(),
        worker_id,
        count: tally.count,
        first: tally.first,
        start: tally.start,
        run_times: (!tally.run_times.is_empty()).then_some(tally.run_times),
    };
    Record {
        time: tally.last,
        event,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> Vec<String> {
        vec!["a".to_string(), "b".to_string()]
    }

    #[test]
    fn blocks_of_one_worker_and_task_make_one_record() {
        let mut tally = DoneTally::default();
        tally.add(0, Some(1), 100.0, Some(0.5));
        tally.add(0, Some(1), 100.5, Some(2.0));
        tally.add(0, Some(1), 100.25, None);
        let ids = ids();
        let records = tally.take(0.0, true, &ids);
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].time, 100.5, "when the last block ended");
        let mut run_times = RunTimes::default();
        run_times.add(0.5);
        run_times.add(2.0);
        assert_eq!(
            records[0].event,
            Event::BlocksDone {
                task: "a".into(),
                worker_id: Some(1),
                count: 3,
                first: 100.0,
                start: Some(98.5),
                run_times: Some(run_times),
            }
        );
        assert!(tally.take(0.0, true, &ids).is_empty(), "taken once");
    }

    #[test]
    fn each_worker_and_task_has_its_own_record() {
        let mut tally = DoneTally::default();
        tally.add(0, Some(1), 100.0, None);
        tally.add(0, Some(2), 100.0, None);
        tally.add(1, Some(1), 100.0, None);
        tally.add(1, None, 100.0, None);
        let ids = ids();
        let keys: Vec<(String, Option<u64>, u64)> = (tally.take(0.0, true, &ids).into_iter())
            .map(|r| match r.event {
                Event::BlocksDone {
                    task,
                    worker_id,
                    count,
                    start: None,
                    run_times: None,
                    ..
                } => (task.to_string(), worker_id, count),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            keys,
            [
                ("a".to_string(), Some(1), 1),
                ("a".to_string(), Some(2), 1),
                ("b".to_string(), None, 1),
                ("b".to_string(), Some(1), 1)
            ]
        );
    }

    #[test]
    fn a_record_is_due_a_window_after_its_first_block() {
        let mut tally = DoneTally::default();
        tally.add(0, Some(1), 100.0, None);
        tally.add(0, Some(2), 100.6, None);
        let ids = ids();
        assert!(tally.take(100.9, false, &ids).is_empty());
        let due = tally.take(101.0, false, &ids);
        assert!(
            matches!(
                due[..],
                [Record {
                    event: Event::BlocksDone {
                        worker_id: Some(1),
                        ..
                    },
                    ..
                }]
            ),
            "only the first worker's"
        );
        tally.add(0, Some(1), 101.5, None);
        assert_eq!(tally.take(101.7, false, &ids).len(), 1, "worker 2's");
        assert_eq!(
            tally.take(101.7, true, &ids).len(),
            1,
            "all: worker 1's new one"
        );
    }
}
