//! The kernel's per-process counters under `/proc/<pid>/`: `io` (bytes
//! read and written through system calls), `stat` (CPU time) and
//! `status` (the resident set's high-water mark), parsed from their
//! documented text formats (proc(5)).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;

/// Bytes a process passed to `read`-like and `write`-like system calls
/// (`rchar` and `wchar`): files, pipes and sockets alike, whether or not
/// they reached a disk (`read_bytes` stays 0 on tmpfs and many network
/// file systems). A process's counters include those of the children it
/// reaped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoCounters {
    pub read: u64,
    pub written: u64,
}

impl IoCounters {
    /// What was read and written since `earlier`.
    pub fn since(self, earlier: Self) -> Self {
        Self {
            read: self.read.saturating_sub(earlier.read),
            written: self.written.saturating_sub(earlier.written),
        }
    }
}

pub fn read_io(pid: i32) -> io::Result<IoCounters> {
    let text = fs::read_to_string(format!("/proc/{pid}/io"))?;
    parse_io(&text).ok_or_else(|| unreadable("io", &text))
}

fn parse_io(text: &str) -> Option<IoCounters> {
    Some(IoCounters {
        read: field(text, "rchar:")?,
        written: field(text, "wchar:")?,
    })
}

/// The counter files of one long-running process, kept open: each
/// reading is then one `pread` per file, not an open, a read and a close
/// (a worker command is read twice per block).
#[derive(Debug)]
pub struct ProcFiles {
    /// The worker's own process: its CPU time comes from `getrusage`,
    /// in µs rather than `stat`'s 10 ms ticks.
    own: bool,
    stat: File,
    io: File,
    status: File,
    /// `None` where the kernel or the permissions refuse it.
    clear_refs: Option<File>,
}

impl ProcFiles {
    pub fn open(pid: i32) -> io::Result<Self> {
        let open = |name: &str| File::open(format!("/proc/{pid}/{name}"));
        let clear_refs = OpenOptions::new()
            .write(true)
            .open(format!("/proc/{pid}/clear_refs"));
        Ok(Self {
            own: pid as u32 == std::process::id(),
            stat: open("stat")?,
            io: open("io")?,
            status: open("status")?,
            clear_refs: clear_refs.ok(),
        })
    }

    /// User plus system CPU seconds of the process and of the children it
    /// reaped (`utime + stime + cutime + cstime`).
    pub fn cpu_seconds(&self) -> io::Result<f64> {
        if self.own {
            return Ok(own_cpu_seconds());
        }
        let text = read_whole(&self.stat)?;
        let ticks = parse_cpu_ticks(&text).ok_or_else(|| unreadable("stat", &text))?;
        Ok(ticks as f64 / ticks_per_second())
    }

    pub fn io(&self) -> io::Result<IoCounters> {
        let text = read_whole(&self.io)?;
        parse_io(&text).ok_or_else(|| unreadable("io", &text))
    }

    /// The largest resident set the process has had (`VmHWM`), in bytes;
    /// since the last [`Self::reset_peak_rss`] if that worked.
    pub fn peak_rss(&self) -> io::Result<u64> {
        let text = read_whole(&self.status)?;
        let kib = field(&text, "VmHWM:").ok_or_else(|| unreadable("status", &text))?;
        Ok(kib * 1024)
    }

    /// Starts the process's high-water mark over from its current
    /// resident set (`clear_refs` value 5, Linux 4.0 and later).
    pub fn reset_peak_rss(&self) {
        if let Some(file) = &self.clear_refs {
            let _ = file.write_at(b"5", 0);
        }
    }
}

/// This process's user + system CPU seconds, its threads' and those of
/// the children it reaped, to the µs.
fn own_cpu_seconds() -> f64 {
    [libc::RUSAGE_SELF, libc::RUSAGE_CHILDREN]
        .into_iter()
        .map(|who| {
            // SAFETY: an all-zero rusage is a valid value of this plain C
            // struct, and getrusage only writes to it.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            match unsafe { libc::getrusage(who, &mut usage) } {
                0 => timeval_seconds(usage.ru_utime) + timeval_seconds(usage.ru_stime),
                _ => 0.0,
            }
        })
        .sum()
}

pub(super) fn timeval_seconds(time: libc::timeval) -> f64 {
    time.tv_sec as f64 + time.tv_usec as f64 / 1e6
}

/// A `/proc` file from its start, generated afresh by the kernel.
fn read_whole(file: &File) -> io::Result<String> {
    let mut buf = vec![0; 4096];
    let mut len = 0;
    loop {
        let n = file.read_at(&mut buf[len..], len as u64)?;
        len += n;
        if n == 0 || len < buf.len() {
            break;
        }
        buf.resize(buf.len() * 2, 0);
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(io::Error::other)
}

/// Fields 14 to 17 of `stat`, counted after the parenthesised command
/// name (which may hold spaces and parentheses itself).
fn parse_cpu_ticks(text: &str) -> Option<u64> {
    let after_name = text.rsplit_once(')')?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Field 3 (the state) is the first after the name: 14..=17 are 11..=14 here.
    let ticks = fields.get(11..15)?.iter().map(|f| f.parse::<u64>().ok());
    ticks.sum()
}

/// The process group of `pid` (field 5 of `stat`).
pub fn read_process_group(pid: i32) -> Option<i32> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = text.rsplit_once(')')?.1;
    after_name.split_whitespace().nth(2)?.parse().ok()
}

/// The number after `name` on the line that starts with it.
fn field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find_map(|line| line.strip_prefix(name))?;
    line.split_whitespace().next()?.parse().ok()
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a constant of the C library.
    match unsafe { libc::sysconf(libc::_SC_CLK_TCK) } {
        ticks if ticks > 0 => ticks as f64,
        _ => 100.0,
    }
}

fn unreadable(file: &str, text: &str) -> io::Error {
    let start: String = text.chars().take(80).collect();
    io::Error::other(format!("unexpected /proc/<pid>/{file}: {start:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_counters_are_read_from_rchar_and_wchar() {
        let text = "rchar: 3010956\nwchar: 3000000\nsyscr: 385\nsyscw: 732\n\
                    read_bytes: 0\nwrite_bytes: 3002368\ncancelled_write_bytes: 0\n";
        let expected = IoCounters {
            read: 3_010_956,
            written: 3_000_000,
        };
        assert_eq!(parse_io(text), Some(expected));
        assert_eq!(parse_io("rchar: 1\n"), None);
    }

    #[test]
    fn cpu_ticks_are_summed_after_a_name_with_spaces_and_parentheses() {
        let text = "18364 (a (b) c) Z 18320 18318 13682 0 -1 4227148 224 146 0 0 \
                    7 5 3 2 20 0 1 0 2100696 0 0";
        assert_eq!(parse_cpu_ticks(text), Some(17));
        assert_eq!(parse_cpu_ticks("1 (x) S 1 2"), None);
    }

    #[test]
    fn the_own_process_cpu_time_is_counted_finer_than_ticks() {
        let files = ProcFiles::open(std::process::id() as i32).unwrap();
        let before = files.cpu_seconds().unwrap();
        let mut spin = 0u64;
        while own_cpu_seconds() - before < 0.003 {
            spin = std::hint::black_box(spin.wrapping_add(1));
        }
        let spent = files.cpu_seconds().unwrap() - before;
        assert!(
            (0.003..0.009).contains(&spent),
            "{spent} s: not a 10 ms tick"
        );
    }

    #[test]
    fn this_process_has_counters() {
        let pid = std::process::id() as i32;
        assert!(read_io(pid).unwrap().read > 0);
        let files = ProcFiles::open(pid).unwrap();
        let before = files.io().unwrap();
        std::fs::read("/proc/self/status").unwrap();
        assert!(files.io().unwrap().read > before.read, "read afresh");
        assert!(files.cpu_seconds().unwrap() >= 0.0);
        assert!(files.peak_rss().unwrap() > 0);
        assert_eq!(
            read_process_group(pid),
            Some(nix::unistd::getpgrp().as_raw())
        );
    }
}
