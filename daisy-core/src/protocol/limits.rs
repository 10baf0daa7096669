//! The bounds on what a peer can make the other side hold or write down.
//!
//! The driver listens on a port anyone on the network can reach, so
//! before the token is checked a peer gets only a small first frame; after
//! it, frames are bounded by [`MAX_FRAME_BYTES`](super::MAX_FRAME_BYTES)
//! and the texts a worker sends (reasons, block errors) are cut to
//! [`MAX_TEXT_BYTES`] before they reach a log, so that a failure is still
//! recorded, just shorter. Names in a Hello have a bound of their own:
//! they are refused rather than cut, since a cut name means another thing.

use crate::protocol::messages::{Hello, ToDriver};

/// The most bytes the first frame (the Hello) may have: what a peer can
/// make the driver read before it has shown the token.
pub const MAX_HELLO_BYTES: u32 = 4 * 1024;

/// The most bytes of each name in a Hello (`token`, `task_id`, `host`,
/// `job_id`).
pub const MAX_NAME_BYTES: usize = 1024;

/// The most bytes kept of a text a worker sends (a block's error, a
/// reason); the rest is cut, saying how much.
pub const MAX_TEXT_BYTES: usize = 8 * 1024;

/// The first name of `hello` over [`MAX_NAME_BYTES`], as a reason.
pub fn oversized_name(hello: &Hello) -> Option<String> {
    let names = [
        ("token", Some(&hello.token)),
        ("task_id", hello.task_id.as_ref()),
        ("host", Some(&hello.host)),
        ("job_id", hello.job_id.as_ref()),
    ];
    names.into_iter().find_map(|(field, value)| {
        let len = value.map_or(0, String::len);
        (len > MAX_NAME_BYTES).then(|| {
            format!("`{field}` of {len} bytes exceeds the limit of {MAX_NAME_BYTES} bytes")
        })
    })
}

/// `text` cut to at most `max` bytes (at a character boundary), saying
/// how many bytes were cut.
pub fn cut(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    text.truncate(end);
    text.push_str(&format!("… ({cut} more bytes cut)"));
    // A cut text may be kept (an event, a failure's reason): not with
    // the room of the megabytes it was cut from.
    text.shrink_to_fit();
}

impl ToDriver {
    /// The message with every text cut to [`MAX_TEXT_BYTES`].
    pub fn with_texts_cut(mut self) -> Self {
        match &mut self {
            ToDriver::ReleaseBlocks { results } => results
                .iter_mut()
                .filter_map(|r| r.error.as_mut())
                .for_each(|error| cut(error, MAX_TEXT_BYTES)),
            ToDriver::Draining { reason, .. }
            | ToDriver::CannotServe { reason }
            | ToDriver::ReturnBlocks { reason, .. } => cut(reason, MAX_TEXT_BYTES),
            ToDriver::Hello(_)
            | ToDriver::AcquireBlocks { .. }
            | ToDriver::Heartbeat
            | ToDriver::GetSnapshot => {}
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{BlockResult, Role, PROTOCOL_VERSION};

    #[test]
    fn long_texts_are_cut_at_a_character_boundary_saying_how_much() {
        let mut short = "fine".to_string();
        cut(&mut short, 4);
        assert_eq!(short, "fine");
        let mut long = "ééé".to_string(); // 6 bytes
        cut(&mut long, 3);
        assert_eq!(long, "é… (4 more bytes cut)");
    }

    #[test]
    fn a_long_block_error_is_cut_not_dropped() {
        let release = ToDriver::ReleaseBlocks {
            results: vec![BlockResult {
                block_id: 1,
                ok: false,
                skipped: false,
                error: Some("x".repeat(100_000)),
                seconds: None,
                cost: None,
            }],
        };
        let ToDriver::ReleaseBlocks { results } = release.with_texts_cut() else {
            unreachable!()
        };
        let error = results[0].error.as_deref().unwrap();
        assert!(error.len() < MAX_TEXT_BYTES + 64, "{}", error.len());
        let kept = results[0].error.as_ref().unwrap().capacity();
        assert!(kept < MAX_TEXT_BYTES + 64, "{kept} bytes kept");
        assert!(error.ends_with("(91808 more bytes cut)"), "{error:.40}");
        assert!(!results[0].ok);
    }

    #[test]
    fn oversized_names_in_a_hello_are_named() {
        let mut hello = Hello {
            protocol: PROTOCOL_VERSION,
            token: "t".into(),
            role: Role::Worker,
            task_id: Some("predict".into()),
            worker_id: None,
            job_id: None,
            host: "node1".into(),
            pid: 1,
        };
        assert_eq!(oversized_name(&hello), None);
        hello.host = "h".repeat(MAX_NAME_BYTES + 1);
        assert_eq!(
            oversized_name(&hello).unwrap(),
            "`host` of 1025 bytes exceeds the limit of 1024 bytes"
        );
    }
}
