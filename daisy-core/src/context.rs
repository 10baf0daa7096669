//! `DAISY_CONTEXT`: how a worker finds its driver.
//!
//! One JSON object, passed in the environment variable `DAISY_CONTEXT`
//! (launched workers) or read from `<run-dir>/context.json` (hand-started
//! workers). It holds the run token, so it never appears on a command
//! line and the file is written with mode 0600.

use serde::{Deserialize, Serialize};

/// The environment variable holding the context.
pub const CONTEXT_ENV: &str = "DAISY_CONTEXT";

/// Everything a worker needs to connect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerContext {
    /// Every `host:port` the driver listens on, tried in order.
    pub addresses: Vec<String>,
    /// The task to serve (absent in `context.json`, where the worker
    /// names its task itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// The slot a launched worker was started for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<u64>,
    pub token: String,
    pub protocol: u32,
}

impl WorkerContext {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a context always serialises")
    }

    pub fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("invalid daisy context: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_context_round_trips_through_json() {
        let context = WorkerContext {
            addresses: vec!["10.0.0.1:4000".into(), "127.0.0.1:4000".into()],
            task_id: Some("predict".into()),
            worker_id: Some(3),
            token: "abc".into(),
            protocol: 1,
        };
        assert_eq!(WorkerContext::from_json(&context.to_json()), Ok(context));
        assert!(WorkerContext::from_json("{}")
            .unwrap_err()
            .contains("invalid daisy context"));
    }
}
