//! One worker's SLURM job, as the sbatch and slurmrestd backends both
//! track it: element `index` of array job `array` (`24_3`). Also what
//! both read the same way from a listing of [`Record`]s, and how both
//! name jobs to cancel.

use std::collections::{BTreeMap, BTreeSet};

use super::squeue::{self, Record};
use crate::arrays;
use crate::queue::QueueJob;
use crate::{JobId, WorkerRequest};

/// Element `index` of array job `array`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element {
    pub(crate) array: String,
    pub(crate) index: u32,
    /// The element's own job id, once squeue showed it running: the only
    /// id the jobcomp file (`sacct -c`) knows it by. slurmrestd's backend
    /// never needs it.
    pub(crate) raw: Option<String>,
    /// Set when the job runs several workers, each its own job step.
    pub(crate) steps: Option<Steps>,
}

/// A job of several workers, as one of them sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Steps {
    /// The task its workers serve.
    pub(crate) task: String,
    /// This worker, whose step is named `daisy-w<worker>`.
    pub(crate) worker: u64,
    /// How many workers the job has room for.
    pub(crate) places: usize,
}

impl Element {
    pub(crate) fn new(array: &str, index: u32) -> Self {
        Self {
            array: array.to_owned(),
            index,
            raw: None,
            steps: None,
        }
    }

    /// The jobs of `group`'s workers in array `array` (in order): one
    /// element per job of `workers_per_job`; `raw`, the element's own id
    /// when it is known at once.
    pub(crate) fn of_group(array: &str, group: &[WorkerRequest], raw: Option<&str>) -> Vec<Self> {
        let per_job = arrays::per_job(group);
        let element = |(place, request): (usize, &WorkerRequest)| Element {
            raw: raw.map(str::to_owned),
            steps: (per_job > 1).then(|| Steps {
                task: request.task_id.clone(),
                worker: request.worker_id,
                places: per_job,
            }),
            ..Element::new(array, (place / per_job) as u32)
        };
        group.iter().enumerate().map(element).collect()
    }

    pub(crate) fn key(&self) -> (&str, u32) {
        (&self.array, self.index)
    }

    /// Whether `other` is (a worker of) the same job.
    pub(crate) fn same_job(&self, other: &Element) -> bool {
        self.key() == other.key()
    }
}

/// `24_3`, both ways.
impl QueueJob for Element {
    fn job_id(&self) -> JobId {
        JobId(format!("{}_{}", self.array, self.index))
    }

    fn from_job_id(id: &JobId) -> Option<Self> {
        match squeue::parse_job_id(&id.0)? {
            (array, indices) if indices.len() == 1 => Some(Self::new(&array, indices[0])),
            _ => None,
        }
    }
}

/// Each element a listing covers, with its record: (array, index) → record.
pub(crate) fn listed(records: &[Record]) -> BTreeMap<(&str, u32), &Record> {
    let mut listed = BTreeMap::new();
    for record in records {
        for index in &record.indices {
            listed.insert((record.job.as_str(), *index), record);
        }
    }
    listed
}

/// Those of `wanted` the listing shows queued or running.
pub(crate) fn live(records: &[Record], wanted: &[Element]) -> Vec<Element> {
    let listed = listed(records);
    let active = |element: &&Element| {
        let record = listed.get(&element.key());
        record.is_some_and(|record| squeue::job_end(&record.state, None).is_none())
    };
    wanted.iter().filter(active).cloned().collect()
}

/// The ids to cancel `cancelled` by: an array by its id when none of its
/// elements is `staying`, else its cancelled elements one by one (`24_3`).
pub(crate) fn cancel_ids(cancelled: &[Element], staying: &[&Element]) -> Vec<String> {
    let staying: BTreeSet<&str> = staying.iter().map(|e| e.array.as_str()).collect();
    let ids: BTreeSet<String> = cancelled
        .iter()
        .map(|element| match staying.contains(element.array.as_str()) {
            true => element.job_id().0,
            false => element.array.clone(),
        })
        .collect();
    ids.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_read_back_as_elements() {
        let element = Element::new("24", 3);
        assert_eq!(Element::from_job_id(&element.job_id()), Some(element));
        for other in ["24", "24_[1-2]", "24_3.batch", "x_1"] {
            assert_eq!(Element::from_job_id(&JobId(other.into())), None, "{other}");
        }
    }

    #[test]
    fn arrays_are_cancelled_whole_unless_an_element_stays() {
        let cancelled = [Element::new("24", 0), Element::new("24", 1)];
        let cancelled = [&cancelled[..], &[Element::new("30", 2)]].concat();
        let stays = Element::new("30", 0);
        assert_eq!(cancel_ids(&cancelled, &[&stays]), ["24", "30_2"]);
    }

    #[test]
    fn only_listed_active_elements_are_live() {
        let listing =
            squeue::parse_squeue("24_0|25|RUNNING\n24_[1-2]|24|PENDING\n31_0|32|COMPLETED\n");
        let wanted = ["24_0", "24_2", "24_5", "31_0"]
            .map(|id| Element::from_job_id(&JobId(id.into())).unwrap());
        let live: Vec<JobId> = live(&listing, &wanted)
            .iter()
            .map(Element::job_id)
            .collect();
        assert_eq!(live, [JobId("24_0".into()), JobId("24_2".into())]);
    }
}
