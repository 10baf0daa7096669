//! Where the main loop stands on its way to stopping, in two parts that
//! change independently of each other: the worker's request for blocks
//! ([`Supply`], which the driver's answers move) and whether it still takes
//! blocks ([`Intake`], which a stop signal or the walltime moves). A worker
//! may be told `Shutdown` while draining, or begin draining with a request
//! still out, so neither part can be folded into the other.

use super::Stopped;
use daisy_core::protocol::ToDriver;

/// The worker's request for blocks, as the driver left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Supply {
    /// No `AcquireBlocks` is out: the worker asks once it is idle.
    NotAsked,
    /// An `AcquireBlocks` is not answered yet: blocks may still come, so
    /// the worker cannot stop.
    Asked,
    /// The driver has no more work for this worker: why. Nothing more is
    /// asked for.
    Shutdown { reason: String },
}

impl Supply {
    /// The driver sent blocks. A shutdown stands: blocks after it (none
    /// are sent) change nothing.
    pub(super) fn on_blocks(&mut self) {
        if *self == Self::Asked {
            *self = Self::NotAsked;
        }
    }
}

/// Whether the worker still takes blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Intake {
    /// It asks for blocks and starts them.
    Taking,
    /// It was asked to stop (why): no more blocks are asked for or
    /// started, the running batch finishes. `signalled`: a stop signal
    /// came (maybe after a walltime drain), so the stop future is spent,
    /// and a block a signal ended was cut short by it, not failed.
    Draining { reason: String, signalled: bool },
}

impl Intake {
    /// A stop signal came (why): drains, unless it does already (then the
    /// first reason stands). The `Draining` for the driver, if this began
    /// draining.
    pub(super) fn on_signal(&mut self, reason: String) -> Option<ToDriver> {
        match self {
            Self::Taking => Some(self.begin(reason, true, false)),
            Self::Draining { signalled, .. } => {
                *signalled = true;
                None
            }
        }
    }

    /// The job's walltime left is too short for another block (why):
    /// drains, unless it does already. The `Draining` for the driver, if
    /// this began draining.
    pub(super) fn on_out_of_time(&mut self, reason: String) -> Option<ToDriver> {
        match self {
            Self::Taking => Some(self.begin(reason, false, false)),
            Self::Draining { .. } => None,
        }
    }

    /// The task's code ended on its own (why: a worker function returned,
    /// the worker's decision to leave, as a daisy 1.x worker process that
    /// exits with status 0): drains, unless it does already. The
    /// `Draining` for the driver (`by_choice`), if this began draining.
    pub(super) fn on_code_ended(&mut self, reason: String) -> Option<ToDriver> {
        match self {
            Self::Taking => Some(self.begin(reason, false, true)),
            Self::Draining { .. } => None,
        }
    }

    /// Drains for `reason`: a stop signal (`signalled`), the code's own
    /// end (`by_choice`), else the walltime.
    fn begin(&mut self, reason: String, signalled: bool, by_choice: bool) -> ToDriver {
        tracing::info!("{reason}: taking no more blocks");
        let said = ToDriver::Draining {
            reason: reason.clone(),
            out_of_time: !signalled && !by_choice,
            by_choice,
        };
        *self = Self::Draining { reason, signalled };
        said
    }

    /// Why the worker drains, if it does.
    pub(super) fn draining(&self) -> Option<&str> {
        match self {
            Self::Taking => None,
            Self::Draining { reason, .. } => Some(reason),
        }
    }

    pub(super) fn signalled(&self) -> bool {
        matches!(
            self,
            Self::Draining {
                signalled: true,
                ..
            }
        )
    }
}

/// Why a worker with nothing received left to run stops, if it does: once
/// draining or told to leave, and owed no blocks. A drain is named over a
/// shutdown.
pub(super) fn stopped_when_idle(intake: &Intake, supply: &Supply) -> Option<Stopped> {
    match (intake, supply) {
        (_, Supply::Asked) => None,
        (Intake::Draining { reason, .. }, _) => Some(Stopped::Drained {
            reason: reason.clone(),
        }),
        (Intake::Taking, Supply::Shutdown { reason }) => Some(Stopped::Shutdown {
            reason: reason.clone(),
        }),
        (Intake::Taking, Supply::NotAsked) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draining(reason: &str, signalled: bool) -> Intake {
        let reason = reason.to_string();
        Intake::Draining { reason, signalled }
    }

    fn said(reason: &str, out_of_time: bool) -> Option<ToDriver> {
        let reason = reason.to_string();
        Some(ToDriver::Draining {
            reason,
            out_of_time,
            by_choice: false,
        })
    }

    fn shutdown(reason: &str) -> Supply {
        let reason = reason.to_string();
        Supply::Shutdown { reason }
    }

    #[test]
    fn a_signal_begins_draining_once() {
        let mut intake = Intake::Taking;
        assert_eq!(intake.on_signal("SIGTERM".into()), said("SIGTERM", false));
        assert_eq!(intake, draining("SIGTERM", true));
        assert_eq!(intake.on_signal("SIGINT".into()), None);
        assert_eq!(intake.on_out_of_time("late".into()), None);
        assert_eq!(intake, draining("SIGTERM", true));
    }

    #[test]
    fn a_signal_after_the_walltime_keeps_its_reason_and_is_remembered() {
        let mut intake = Intake::Taking;
        assert_eq!(intake.on_out_of_time("late".into()), said("late", true));
        assert!(!intake.signalled());
        assert_eq!(intake.on_signal("SIGTERM".into()), None);
        assert_eq!(intake, draining("late", true));
        assert!(intake.signalled());
        assert_eq!(intake.draining(), Some("late"));
    }

    #[test]
    fn the_codes_own_end_drains_by_choice_and_a_signal_after_it_is_remembered() {
        let mut intake = Intake::Taking;
        let by_choice = Some(ToDriver::Draining {
            reason: "returned".into(),
            out_of_time: false,
            by_choice: true,
        });
        assert_eq!(intake.on_code_ended("returned".into()), by_choice);
        assert_eq!(intake.on_code_ended("again".into()), None);
        assert_eq!(intake.on_signal("SIGTERM".into()), None);
        assert_eq!(intake, draining("returned", true));
    }

    #[test]
    fn blocks_answer_a_request_but_not_a_shutdown() {
        let mut supply = Supply::Asked;
        supply.on_blocks();
        assert_eq!(supply, Supply::NotAsked);
        supply.on_blocks();
        assert_eq!(supply, Supply::NotAsked);
        let mut supply = shutdown("done");
        supply.on_blocks();
        assert_eq!(supply, shutdown("done"));
    }

    #[test]
    fn an_idle_worker_stops_once_draining_or_shut_down_and_owed_nothing() {
        let stopped = |intake, supply| stopped_when_idle(&intake, &supply);
        assert_eq!(stopped(Intake::Taking, Supply::NotAsked), None);
        assert_eq!(stopped(Intake::Taking, Supply::Asked), None);
        assert_eq!(stopped(draining("SIGTERM", true), Supply::Asked), None);
        let drained = Some(Stopped::Drained {
            reason: "SIGTERM".into(),
        });
        assert_eq!(
            stopped(draining("SIGTERM", true), Supply::NotAsked),
            drained
        );
        assert_eq!(
            stopped(draining("SIGTERM", true), shutdown("done")),
            drained
        );
        let shut = Some(Stopped::Shutdown {
            reason: "done".into(),
        });
        assert_eq!(stopped(Intake::Taking, shutdown("done")), shut);
    }
}
