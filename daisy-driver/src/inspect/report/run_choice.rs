//! Which run of a run directory the report draws. Each `run` appends to
//! `events.jsonl`; a re-run that found every block done draws an empty
//! page (no worker, no block), so the report draws the last run that ran
//! a block, and says so. `--run N` picks one.

use super::ReportError;
use crate::run_dir::events::history::{HistoryEvent, RunFold, RunHistory};
use crate::run_dir::events::Event;
use std::cell::Cell;
use std::path::Path;
use std::rc::Rc;

/// The run drawn, from 1, among `runs`, and why that one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunChoice {
    pub number: usize,
    pub runs: usize,
    pub why: Why,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// `--run N`.
    Asked,
    /// The last run, which ran blocks (or no run did).
    Last,
    /// The last run ran no block: this is the last one that did.
    LastRanNothing,
}

/// Whether a run ran a block (one done or failed).
struct RanBlocks(Rc<Cell<bool>>);

impl RunFold for RanBlocks {
    fn on_event(&mut self, event: &HistoryEvent) {
        if let Event::BlockDone { .. } | Event::BlocksDone { .. } | Event::BlockFailed { .. } =
            event.kind
        {
            self.0.set(true);
        }
    }
}

/// The run of `events` to draw: `asked` if given (it must exist), else
/// the last one that ran a block, else the last.
pub fn choose(events: &Path, asked: Option<usize>) -> Result<RunChoice, ReportError> {
    let ran: Rc<std::cell::RefCell<Vec<Rc<Cell<bool>>>>> = Rc::default();
    let history = RunHistory::read(events, || {
        let flag = Rc::new(Cell::new(false));
        ran.borrow_mut().push(Rc::clone(&flag));
        RanBlocks(flag)
    })
    .map_err(ReportError::Read)?;
    let runs = history.runs;
    let ran: Vec<bool> = ran.borrow().iter().map(|flag| flag.get()).collect();
    pick(&ran, runs, asked)
}

/// [`choose`] given which runs ran blocks.
fn pick(ran: &[bool], runs: usize, asked: Option<usize>) -> Result<RunChoice, ReportError> {
    if let Some(number) = asked {
        if number == 0 || number > runs {
            return Err(ReportError::NoSuchRun {
                asked: number,
                runs,
            });
        }
        let why = Why::Asked;
        return Ok(RunChoice { number, runs, why });
    }
    let last_that_ran = ran.iter().rposition(|&ran| ran).map(|i| i + 1);
    Ok(match last_that_ran {
        Some(number) if number < runs => RunChoice {
            number,
            runs,
            why: Why::LastRanNothing,
        },
        _ => RunChoice {
            number: runs,
            runs,
            why: Why::Last,
        },
    })
}

impl RunChoice {
    /// What the report says about the run it draws, if there is more
    /// than one.
    pub fn fact(&self) -> Option<String> {
        let (number, runs) = (self.number, self.runs);
        match self.why {
            Why::Last if runs > 1 => Some(format!(
                "the last of {runs} runs in this run directory (done markers include the \
                 earlier ones; --run N draws another)"
            )),
            Why::Last => None,
            Why::LastRanNothing => Some(format!(
                "run {number} of {runs}, the last that ran a block: run {runs} ran none \
                 (every block was done before it); --run {runs} draws it"
            )),
            Why::Asked => Some(format!(
                "run {number} of {runs}, as asked (--run {number}); block states are the \
                 done markers' now"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_run_that_ran_a_block_is_drawn_unless_one_is_asked_for() {
        let last = pick(&[true, true], 2, None).unwrap();
        assert_eq!((last.number, last.why), (2, Why::Last));
        let rerun = pick(&[true, false, false], 3, None).unwrap();
        assert_eq!((rerun.number, rerun.why), (1, Why::LastRanNothing));
        assert!(rerun.fact().unwrap().contains("--run 3 draws it"));
        let none_ran = pick(&[false, false], 2, None).unwrap();
        assert_eq!(none_ran.number, 2);
        let asked = pick(&[true, false], 2, Some(2)).unwrap();
        assert_eq!((asked.number, asked.why), (2, Why::Asked));
        assert!(matches!(
            pick(&[true], 1, Some(3)),
            Err(ReportError::NoSuchRun { asked: 3, runs: 1 })
        ));
        assert_eq!(pick(&[true], 1, None).unwrap().fact(), None);
    }
}
