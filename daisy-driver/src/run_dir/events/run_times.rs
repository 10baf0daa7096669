//! Block run times summed up without keeping one number per block: a
//! histogram on a log scale, as `blocks_done` records carry it in
//! `events.jsonl` (see [`crate::run_dir::events`]) and as the report merges them.
//!
//! Bucket `b` holds the run times in `[2^(b/16), 2^((b+1)/16))` seconds,
//! so a bucket's middle is within 2.2% of each time in it at any scale,
//! from microseconds to days, and a worker's blocks of one second, which
//! take similar times, fall into a few buckets.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Buckets per doubling of the run time.
const PER_OCTAVE: f64 = 16.0;
/// Times below 2^-40 s (about 1 ps), zero included, share this bucket.
const LOWEST: i32 = -40 * PER_OCTAVE as i32;
/// Times above 2^40 s (35,000 years), and non-finite ones, share this.
const HIGHEST: i32 = 40 * PER_OCTAVE as i32;

/// Run times: how many fell into each bucket, and the longest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunTimes {
    /// `[bucket, count]` pairs, by bucket.
    #[serde(with = "pairs")]
    pub buckets: BTreeMap<i32, u64>,
    pub longest: f64,
}

impl RunTimes {
    pub fn add(&mut self, seconds: f64) {
        self.add_many(bucket_of(seconds), 1);
        if seconds.is_finite() {
            self.longest = self.longest.max(seconds);
        }
    }

    pub fn merge(&mut self, other: &RunTimes) {
        for (&bucket, &count) in &other.buckets {
            self.add_many(bucket, count);
        }
        self.longest = self.longest.max(other.longest);
    }

    fn add_many(&mut self, bucket: i32, count: u64) {
        *self.buckets.entry(bucket).or_default() += count;
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }

    /// Each bucket's middle run time (never above the longest) and count.
    pub fn middles(&self) -> impl Iterator<Item = (f64, u64)> + '_ {
        (self.buckets.iter()).map(|(&bucket, &count)| {
            let middle = 2f64.powf((bucket as f64 + 0.5) / PER_OCTAVE);
            let middle = if bucket == LOWEST { 0.0 } else { middle };
            (middle.min(self.longest), count)
        })
    }
}

fn bucket_of(seconds: f64) -> i32 {
    if seconds.is_nan() {
        return HIGHEST;
    }
    let bucket = (seconds.log2() * PER_OCTAVE).floor();
    bucket.clamp(LOWEST as f64, HIGHEST as f64) as i32
}

/// A map written as a list of pairs: JSON objects cannot have number keys.
mod pairs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::collections::BTreeMap;

    pub fn serialize<S: Serializer>(map: &BTreeMap<i32, u64>, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(map.iter())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<i32, u64>, D::Error> {
        let pairs = Vec::<(i32, u64)>::deserialize(d)?;
        Ok(pairs.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_middle_is_within_a_few_percent_of_its_times() {
        for seconds in [1e-6, 0.0005, 0.013, 0.5, 1.0, 2.0, 7.3, 3600.0, 86400.0] {
            let mut times = RunTimes::default();
            times.add(seconds);
            times.longest = f64::MAX;
            let (middle, count) = times.middles().next().unwrap();
            assert_eq!(count, 1);
            assert!(
                (middle / seconds - 1.0).abs() < 0.022,
                "{seconds}: {middle}"
            );
        }
    }

    #[test]
    fn zero_and_odd_times_are_counted_without_panicking() {
        let mut times = RunTimes::default();
        for seconds in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e300] {
            times.add(seconds);
        }
        assert_eq!(times.buckets.values().sum::<u64>(), 5);
        assert_eq!(times.longest, 1e300);
        assert_eq!(times.middles().next().unwrap().0, 0.0);
    }

    #[test]
    fn merged_times_add_up_and_keep_the_longest() {
        let (mut a, mut b) = (RunTimes::default(), RunTimes::default());
        a.add(1.0);
        a.add(1.01);
        b.add(1.0);
        b.add(4.0);
        a.merge(&b);
        let counts: Vec<u64> = a.middles().map(|(_, n)| n).collect();
        assert_eq!(counts, [3, 1]);
        assert_eq!(a.longest, 4.0);
    }

    #[test]
    fn they_are_written_as_a_list_of_pairs() {
        let mut times = RunTimes::default();
        times.add(1.0);
        times.add(1.0);
        times.add(2.0);
        let json = serde_json::to_string(&times).unwrap();
        assert_eq!(json, r#"{"buckets":[[0,2],[16,1]],"longest":2.0}"#);
        assert_eq!(serde_json::from_str::<RunTimes>(&json).unwrap(), times);
    }
}
