//! The handshake check: protocol version and token, before anything else
//! is believed. The token is compared in constant time so that timing
//! does not leak how much of a guess was right.

use crate::protocol::limits::oversized_name;
use crate::protocol::messages::{Hello, Role};
use crate::protocol::PROTOCOL_VERSION;

/// Checks what every Hello must get right; what the driver knows (does the
/// task exist?) it checks itself. The error is the reason sent back.
pub fn check_hello(hello: &Hello, token: &str) -> Result<(), String> {
    if hello.protocol != PROTOCOL_VERSION {
        return Err(format!(
            "protocol version {} is not supported: this driver speaks version {PROTOCOL_VERSION}",
            hello.protocol
        ));
    }
    if let Some(reason) = oversized_name(hello) {
        return Err(reason);
    }
    if !tokens_equal(hello.token.as_bytes(), token.as_bytes()) {
        return Err("wrong token: this worker does not belong to this run".to_string());
    }
    if hello.role == Role::Worker && hello.task_id.is_none() {
        return Err("a worker must name its task (task_id)".to_string());
    }
    Ok(())
}

/// Equality whose running time depends only on the lengths.
pub fn tokens_equal(a: &[u8], b: &[u8]) -> bool {
    let mut difference = a.len() ^ b.len();
    for (i, x) in a.iter().enumerate() {
        difference |= usize::from(x ^ b.get(i).copied().unwrap_or(!x));
    }
    difference == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello(token: &str) -> Hello {
        Hello {
            protocol: PROTOCOL_VERSION,
            token: token.to_string(),
            role: Role::Worker,
            task_id: Some("t".into()),
            worker_id: None,
            job_id: None,
            host: "h".into(),
            pid: 1,
        }
    }

    #[test]
    fn the_right_hello_passes() {
        assert_eq!(check_hello(&hello("secret"), "secret"), Ok(()));
    }

    #[test]
    fn wrong_tokens_versions_and_missing_tasks_are_refused() {
        assert!(check_hello(&hello("secreT"), "secret")
            .unwrap_err()
            .contains("wrong token"));
        assert!(check_hello(&hello("secret-longer"), "secret").is_err());
        assert!(check_hello(&hello(""), "secret").is_err());
        let old = Hello {
            protocol: 0,
            ..hello("secret")
        };
        let reason = check_hello(&old, "secret").unwrap_err();
        assert!(
            reason.contains("version 0") && reason.contains("version 1"),
            "{reason}"
        );
        let no_task = Hello {
            task_id: None,
            ..hello("secret")
        };
        assert!(check_hello(&no_task, "secret")
            .unwrap_err()
            .contains("task_id"));
        let observer = Hello {
            role: Role::Observer,
            task_id: None,
            ..hello("secret")
        };
        assert_eq!(check_hello(&observer, "secret"), Ok(()));
    }

    #[test]
    fn token_comparison() {
        assert!(tokens_equal(b"abc", b"abc"));
        assert!(!tokens_equal(b"abc", b"abd"));
        assert!(!tokens_equal(b"abc", b"ab"));
        assert!(!tokens_equal(b"", b"a"));
        assert!(tokens_equal(b"", b""));
    }
}
