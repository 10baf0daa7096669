//! The run directory's safety (issue 11): one driver at a time, a refused
//! run changes nothing, lost done-marker metadata is never read as "no
//! progress".

use crate::util::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

/// A pipeline "line" of `blocks` one-voxel blocks, each running `command`.
fn line_pipeline(blocks: u32, command: &str) -> String {
    format!("name = \"line\"\n{}", task("line", blocks, command, ""))
}

#[test]
fn done_bytes_without_zarr_json_are_an_error_in_plan_run_and_status() {
    let dir = TestDir::new();
    dir.write("line.toml", &line_pipeline(5, "true"));
    run_ok(&mut dir.driver(&["run", "--serial", "line.toml"]));
    let marker = dir.join("daisy_run/line/done/line");
    std::fs::remove_file(marker.join("zarr.json")).unwrap();
    let hint = "rm -rf daisy_run/line/done/line";
    let plan = run_fails(&mut dir.driver(&["plan", "line.toml"]), 2);
    assert!(
        plan.contains("no zarr.json") && plan.contains(hint),
        "{plan}"
    );
    let status = run_fails(&mut dir.driver(&["status", "daisy_run/line"]), 2);
    assert!(status.contains("no zarr.json"), "{status}");
    for mode in [&["run", "line.toml"][..], &["run", "--serial", "line.toml"]] {
        let run = run_fails(&mut dir.driver(mode), 2);
        assert!(run.contains("no zarr.json") && run.contains(hint), "{run}");
    }
    let chunk = std::fs::read(marker.join("done/c/0")).unwrap();
    assert_eq!(chunk, vec![1; 5], "the done bytes are kept");
}

/// Each block appends its id to ran.txt once the file `go` exists.
const WAIT_FOR_GO: &str = "while [ ! -e go ]; do sleep 0.05; done; echo $DAISY_BLOCK_ID >> ran.txt";

/// The block ids in ran.txt, with how often each ran.
fn runs_per_block(dir: &TestDir) -> BTreeMap<u64, usize> {
    let mut runs = BTreeMap::new();
    for id in dir
        .read("ran.txt")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
    {
        *runs.entry(id).or_default() += 1;
    }
    runs
}

/// Every file and directory below `dir`, with the contents of the files.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut entries = BTreeMap::new();
    let mut to_visit = vec![dir.to_path_buf()];
    while let Some(path) = to_visit.pop() {
        let contents = match path.is_dir() {
            true => {
                let children = std::fs::read_dir(&path).unwrap();
                to_visit.extend(children.map(|c| c.unwrap().path()));
                None
            }
            false => Some(std::fs::read(&path).unwrap()),
        };
        entries.insert(path.strip_prefix(dir).unwrap().to_path_buf(), contents);
    }
    entries
}

#[test]
fn a_second_driver_is_refused_naming_the_first_and_a_killed_one_does_not_block() {
    let dir = TestDir::new();
    dir.write("line.toml", &line_pipeline(4, WAIT_FOR_GO));
    let context = dir.join("daisy_run/line/context.json");
    let first = ChildGuard::spawn(&mut dir.driver(&["run", "line.toml"]));
    wait_until("the first driver serves", || context.exists());
    let served = std::fs::read(&context).unwrap();
    let refused = run_fails(&mut dir.driver(&["run", "line.toml"]), 2);
    let pid = first.0.id();
    assert!(
        refused.contains("in use by daisy-driver run")
            && refused.contains(&format!("pid {pid} on ")),
        "{refused}"
    );
    let reset = run_fails(&mut dir.driver(&["reset", "line.toml", "line", "--yes"]), 2);
    assert!(reset.contains(&format!("pid {pid} on ")), "{reset}");
    // Read-only commands work meanwhile.
    run_fails(&mut dir.driver(&["status", "daisy_run/line"]), 3);
    assert_eq!(
        std::fs::read(&context).unwrap(),
        served,
        "context.json is the first driver's"
    );
    dir.write("go", "");
    assert!(first.wait_for_exit().success());
    assert_eq!(runs_per_block(&dir), (0..4).map(|id| (id, 1)).collect());

    // A driver killed with SIGKILL leaves its lock file, not its lock.
    std::fs::remove_file(dir.join("go")).unwrap();
    dir.write("line.toml", &line_pipeline(6, WAIT_FOR_GO));
    run_ok(&mut dir.driver(&["reset", "line.toml", "line", "--yes"]));
    let killed = ChildGuard::spawn(&mut dir.driver(&["run", "line.toml"]));
    wait_until("the second driver serves", || {
        std::fs::read(&context).unwrap() != served
    });
    drop(killed);
    dir.write("go", "");
    run_ok(&mut dir.driver(&["run", "line.toml"]));
    assert_eq!(runs_per_block(&dir).len(), 6);
}

#[test]
fn of_two_drivers_started_together_one_runs_and_the_other_is_refused() {
    for round in 0..3 {
        let dir = TestDir::new();
        dir.write(
            "line.toml",
            &line_pipeline(20, "echo $DAISY_BLOCK_ID >> ran.txt"),
        );
        let outputs: Vec<_> = [
            dir.driver(&["run", "line.toml"]),
            dir.driver(&["run", "line.toml"]),
        ]
        .into_iter()
        .map(|mut command| {
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
            command.spawn().unwrap()
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect();
        let codes: Vec<Option<i32>> = outputs.iter().map(|o| o.status.code()).collect();
        let texts: Vec<String> = outputs
            .iter()
            .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
            .collect();
        let refused = codes.iter().position(|&c| c == Some(2));
        assert!(
            codes.contains(&Some(0)) && refused.is_some(),
            "round {round}: exit codes {codes:?}\n{texts:#?}"
        );
        let refusal = &texts[refused.unwrap()];
        assert!(refusal.contains("is in use by"), "round {round}: {refusal}");
        assert!(
            !refusal.contains("No such file"),
            "round {round}: {refusal}"
        );
        assert_eq!(runs_per_block(&dir), (0..20).map(|id| (id, 1)).collect());
    }
}

#[test]
fn a_refused_run_leaves_the_run_directory_as_it_was() {
    let dir = TestDir::new();
    dir.write("line.toml", &line_pipeline(5, "true"));
    run_ok(&mut dir.driver(&["run", "line.toml"]));
    let run_dir = dir.join("daisy_run/line");
    let before = snapshot(&run_dir);
    let port_user = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let in_use = port_user.local_addr().unwrap().to_string();
    let changed = line_pipeline(5, "true").replace("shape = [5]", "shape = [6]");
    dir.write("changed.toml", &changed);
    let refusals: [(&[&str], &str); 5] = [
        (&["run", "changed.toml"], "different task layout"),
        (
            &["run", "--serial", "changed.toml"],
            "different task layout",
        ),
        (&["run", "--listen", &in_use, "line.toml"], "listening on"),
        (&["run", "--reset", "nosuch", "line.toml"], "no such task"),
        (
            &["run", "--heartbeat-interval", "1ms", "line.toml"],
            "too short",
        ),
    ];
    for (args, why) in refusals {
        let out = run_fails(&mut dir.driver(args), 2);
        assert!(out.contains(why), "{args:?}: {out}");
        assert!(
            snapshot(&run_dir) == before,
            "{args:?} changed {}",
            run_dir.display()
        );
    }
    // Held by another process: the lock file is the only thing touched.
    let lock = std::fs::File::options()
        .write(true)
        .open(run_dir.join("driver.lock"))
        .unwrap();
    lock.try_lock().unwrap();
    let out = run_fails(&mut dir.driver(&["run", "line.toml"]), 2);
    assert!(out.contains("is in use by"), "{out}");
    assert!(
        snapshot(&run_dir) == before,
        "a locked run changed {}",
        run_dir.display()
    );
}
