//! events.jsonl written and read back: every kind of event as the bytes
//! earlier versions wrote, buffered lines, cut-short last lines, and the
//! block_done fast path byte for byte against serde.

use super::file::BlockDoneHead;
use super::*;

const TIME: f64 = 1764403200.5;

/// Every kind, with optional fields both set and left out, and the
/// line each is written as (the bytes earlier versions wrote).
fn every_kind() -> Vec<(Event<'static>, &'static str)> {
    let counters = TaskCounters {
        total: 2,
        completed: 1,
        failed: 1,
        ..TaskCounters::default()
    };
    vec![
        (
            Event::RunStarted {
                pipeline: "p".into(),
                mode: "serial".into(),
                retry_failed: true,
            },
            r#"{"time":1764403200.5,"event":"run_started","pipeline":"p","mode":"serial","retry_failed":true}"#,
        ),
        (
            Event::RunStarted {
                pipeline: "p".into(),
                mode: "distributed".into(),
                retry_failed: false,
            },
            r#"{"time":1764403200.5,"event":"run_started","pipeline":"p","mode":"distributed"}"#,
        ),
        (
            Event::BlockDone {
                task: "t".into(),
                block_id: 3,
                worker_id: Some(2),
                seconds: Some(0.25),
            },
            r#"{"time":1764403200.5,"event":"block_done","task":"t","block_id":3,"worker_id":2,"seconds":0.25}"#,
        ),
        (
            Event::BlockDone {
                task: "t".into(),
                block_id: 3,
                worker_id: None,
                seconds: None,
            },
            r#"{"time":1764403200.5,"event":"block_done","task":"t","block_id":3}"#,
        ),
        (
            Event::BlocksDone {
                task: "t".into(),
                worker_id: Some(2),
                count: 3,
                first: 1764403200.25,
                start: Some(1764403199.75),
                run_times: Some(RunTimes {
                    buckets: [(-16, 2), (0, 1)].into(),
                    longest: 1.0,
                }),
            },
            r#"{"time":1764403200.5,"event":"blocks_done","task":"t","worker_id":2,"count":3,"first":1764403200.25,"start":1764403199.75,"run_times":{"buckets":[[-16,2],[0,1]],"longest":1.0}}"#,
        ),
        (
            Event::BlocksDone {
                task: "t".into(),
                worker_id: None,
                count: 1,
                first: 1764403200.5,
                start: None,
                run_times: None,
            },
            r#"{"time":1764403200.5,"event":"blocks_done","task":"t","count":1,"first":1764403200.5}"#,
        ),
        (
            Event::BlockFailed {
                task: "t".into(),
                block_id: 4,
                worker_id: Some(1),
                error: "exit \"1\"\n\\".into(),
                for_good: true,
                seconds: Some(1.0),
            },
            r#"{"time":1764403200.5,"event":"block_failed","task":"t","block_id":4,"worker_id":1,"error":"exit \"1\"\n\\","for_good":true,"seconds":1.0}"#,
        ),
        (
            Event::BlockFailed {
                task: "t".into(),
                block_id: 4,
                worker_id: None,
                error: "e".into(),
                for_good: false,
                seconds: None,
            },
            r#"{"time":1764403200.5,"event":"block_failed","task":"t","block_id":4,"error":"e","for_good":false}"#,
        ),
        (
            Event::BlocksReturned {
                task: "t".into(),
                worker_id: 1,
                block_ids: vec![5, 6].into(),
                why: "walltime".into(),
            },
            r#"{"time":1764403200.5,"event":"blocks_returned","task":"t","worker_id":1,"block_ids":[5,6],"why":"walltime"}"#,
        ),
        (
            Event::TaskDone {
                task: "t".into(),
                counters,
            },
            r#"{"time":1764403200.5,"event":"task_done","task":"t","counters":{"total":2,"ready":0,"processing":0,"completed":1,"skipped":0,"failed":1,"orphaned":0,"left":0}}"#,
        ),
        (
            Event::TaskAbandoned {
                task: "t".into(),
                unclean_exits: 3,
                why: "3 unclean worker exits".into(),
            },
            r#"{"time":1764403200.5,"event":"task_abandoned","task":"t","unclean_exits":3,"why":"3 unclean worker exits"}"#,
        ),
        (
            Event::WorkerSubmitted {
                task: "t".into(),
                worker_id: 1,
                job: "42".into(),
                resources: Cow::default(),
            },
            r#"{"time":1764403200.5,"event":"worker_submitted","task":"t","worker_id":1,"job":"42"}"#,
        ),
        (
            Event::WorkerSubmitted {
                task: "t".into(),
                worker_id: 2,
                job: "43".into(),
                resources: Cow::Owned([("gpu".to_string(), vec!["1".to_string()])].into()),
            },
            r#"{"time":1764403200.5,"event":"worker_submitted","task":"t","worker_id":2,"job":"43","resources":{"gpu":["1"]}}"#,
        ),
        (
            Event::WorkerStartFailed {
                task: "t".into(),
                worker_id: 1,
                error: "no".into(),
            },
            r#"{"time":1764403200.5,"event":"worker_start_failed","task":"t","worker_id":1,"error":"no"}"#,
        ),
        (
            Event::WorkerSubmitWaiting {
                task: "t".into(),
                worker_id: 3,
                limit: "max_jobs".into(),
                message: "2 jobs queued".into(),
            },
            r#"{"time":1764403200.5,"event":"worker_submit_waiting","task":"t","worker_id":3,"limit":"max_jobs","message":"2 jobs queued"}"#,
        ),
        (
            Event::WorkerConnected {
                task: "t".into(),
                worker_id: 1,
                host: "h".into(),
                pid: 7,
                by_hand: false,
                requeued: true,
                job: Some("27.1".into()),
            },
            r#"{"time":1764403200.5,"event":"worker_connected","task":"t","worker_id":1,"host":"h","pid":7,"by_hand":false,"requeued":true,"job":"27.1"}"#,
        ),
        (
            Event::WorkerConnected {
                task: "t".into(),
                worker_id: 1,
                host: "h".into(),
                pid: 7,
                by_hand: true,
                requeued: false,
                job: None,
            },
            r#"{"time":1764403200.5,"event":"worker_connected","task":"t","worker_id":1,"host":"h","pid":7,"by_hand":true}"#,
        ),
        (
            Event::WorkerReleased {
                task: "t".into(),
                worker_id: 1,
                why: "idle".into(),
            },
            r#"{"time":1764403200.5,"event":"worker_released","task":"t","worker_id":1,"why":"idle"}"#,
        ),
        (
            Event::WorkerDraining {
                task: "t".into(),
                worker_id: 1,
                why: "SIGTERM".into(),
            },
            r#"{"time":1764403200.5,"event":"worker_draining","task":"t","worker_id":1,"why":"SIGTERM"}"#,
        ),
        (
            Event::WorkerGone {
                task: "t".into(),
                worker_id: 1,
                clean: false,
                why: "eof".into(),
            },
            r#"{"time":1764403200.5,"event":"worker_gone","task":"t","worker_id":1,"clean":false,"why":"eof"}"#,
        ),
        (
            Event::ConnectionRefused {
                peer: "1.2.3.4:5".into(),
                reason: "wrong token".into(),
            },
            r#"{"time":1764403200.5,"event":"connection_refused","peer":"1.2.3.4:5","reason":"wrong token"}"#,
        ),
        (
            Event::ConnectionsRefused {
                count: 3,
                seconds: 10.0,
            },
            r#"{"time":1764403200.5,"event":"connections_refused","count":3,"seconds":10.0}"#,
        ),
        (
            Event::RequestRefused {
                task: "t".into(),
                worker_id: 1,
                reason: "not held".into(),
            },
            r#"{"time":1764403200.5,"event":"request_refused","task":"t","worker_id":1,"reason":"not held"}"#,
        ),
        (
            Event::RunFinished {
                completed: false,
                seconds: 1.5,
            },
            r#"{"time":1764403200.5,"event":"run_finished","completed":false,"seconds":1.5}"#,
        ),
        (
            Event::EarlierJobsCancelled {
                launcher: "sbatch".into(),
                jobs: vec!["24_0".to_string()].into(),
            },
            r#"{"time":1764403200.5,"event":"earlier_jobs_cancelled","launcher":"sbatch","jobs":["24_0"]}"#,
        ),
    ]
}

fn encoded(event: &Event) -> String {
    let mut line = Vec::new();
    EventLine {
        time: TIME,
        kind: event,
    }
    .encode(&mut line, &mut BlockDoneHead::default())
    .unwrap();
    String::from_utf8(line).unwrap()
}

#[test]
fn every_kind_is_written_as_earlier_versions_wrote_it() {
    for (event, line) in every_kind() {
        assert_eq!(encoded(&event), format!("{line}\n"));
    }
}

#[test]
fn a_block_done_line_is_what_serde_writes_whatever_its_values() {
    let tasks = ["t", "a \"quoted\"\n\\ task", "tâche ✓", ""];
    let times = [TIME, 0.0, -1.5, 1e21, 1.0e-7, f64::NAN, f64::INFINITY];
    let seconds = [None, Some(0.1), Some(f64::NAN), Some(-0.0), Some(3e300)];
    let by_task = (tasks.iter()).flat_map(|task| times.iter().map(move |&time| (task, time)));
    let by_time = (times.iter()).flat_map(|&time| tasks.iter().map(move |task| (task, time)));
    // One head for all lines, as a log keeps it: a line's own time and
    // task must replace the last line's, whichever of them changed.
    let lines = by_task.chain(by_time);
    let mut head = BlockDoneHead::default();
    for (task, time) in lines {
        for (&seconds, worker_id) in seconds
            .iter()
            .zip([None, Some(0), Some(u64::MAX)].iter().cycle())
        {
            let event = Event::BlockDone {
                task: (*task).into(),
                block_id: u64::MAX - 7,
                worker_id: *worker_id,
                seconds,
            };
            let line = EventLine { time, kind: &event };
            let mut fast = Vec::new();
            line.encode(&mut fast, &mut head).unwrap();
            let serde = serde_json::to_string(&line).unwrap() + "\n";
            assert_eq!(String::from_utf8(fast).unwrap(), serde);
        }
    }
}

#[test]
fn every_kind_reads_back_as_it_was_written() {
    for (event, _) in every_kind() {
        let read: EventLine<Event> = serde_json::from_str(&encoded(&event)).unwrap();
        assert_eq!(
            read,
            EventLine {
                time: TIME,
                kind: event
            }
        );
    }
}

#[test]
fn lines_without_the_fields_added_later_read_with_their_defaults() {
    let line = r#"{"time": 2.0, "event": "worker_connected", "task": "t", "worker_id": 1, "host": "h", "pid": 7, "by_hand": false}"#;
    let read: EventLine<Event> = serde_json::from_str(line).unwrap();
    assert!(
        matches!(
            read.kind,
            Event::WorkerConnected {
                requeued: false,
                ..
            }
        ),
        "{read:?}"
    );
}

#[test]
fn an_unknown_kind_reads_as_unknown_and_is_never_written() {
    let line = r#"{"time": 3.0, "event": "shiny_new_event", "x": 1}"#;
    let read: EventLine<Event> = serde_json::from_str(line).unwrap();
    assert_eq!(read.kind, Event::Unknown);
    assert!(serde_json::to_string(&Event::Unknown).is_err());
}

#[test]
fn events_are_appended_as_tagged_json_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    for _ in 0..2 {
        let mut log = EventLog::open(&path).unwrap();
        log.record(&Event::BlockFailed {
            task: "predict".into(),
            block_id: 7,
            worker_id: Some(2),
            error: "exit status 1".into(),
            for_good: false,
            seconds: Some(0.5),
        })
        .unwrap();
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["event"], "block_failed");
    assert_eq!(lines[1]["task"], "predict");
    assert_eq!(lines[1]["block_id"], 7);
    assert!(lines[1]["time"].as_f64().unwrap() > 1.0e9);
}

#[test]
fn buffered_events_are_written_in_order_by_the_next_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let mut log = EventLog::open(&path).unwrap();
    let done = |block_id| Event::BlockDone {
        task: "predict".into(),
        block_id,
        worker_id: None,
        seconds: None,
    };
    log.record_buffered(&done(1)).unwrap();
    log.record_buffered(&done(2)).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    log.record(&Event::RunFinished {
        completed: true,
        seconds: 1.0,
    })
    .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let events: Vec<String> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event"].to_string())
        .collect();
    assert_eq!(
        events,
        ["\"block_done\"", "\"block_done\"", "\"run_finished\""]
    );
}

#[test]
fn buffered_events_are_written_when_the_log_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let mut log = EventLog::open(&path).unwrap();
    log.record_buffered(&Event::BlockDone {
        task: "predict".into(),
        block_id: 3,
        worker_id: Some(1),
        seconds: None,
    })
    .unwrap();
    drop(log);
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
}
