//! Why a payload is not a message, in the protocol's words.
//!
//! The decoder's own errors speak of its internals ("IO error while
//! reading marker", "expected internally tagged enum ToDriver"); a peer
//! written from docs/protocol.md needs to hear what in its frame is wrong:
//! not a map, no or an unknown `type`, which field of which message.

use crate::protocol::messages::Message;
use rmp_serde::decode::Error;
use serde::Deserialize;

/// How much of a peer's unknown `type` a reason quotes.
const QUOTED_BYTES: usize = 64;

/// Frames up to this size are decoded again, by serde's own decoder of
/// tagged maps, to word a mistyped field as it does (`invalid type:
/// string "x", expected u32`) rather than as the one-pass decoder does
/// (`unexpected MessagePack value (FixStr(1))`). That decoder copies every
/// value first (see [`super::tagged`]), which costs little at this size.
const WORDED_BYTES: usize = 64 * 1024;

/// Explains why `payload` did not decode as a `T` (`error` says why, in
/// the decoder's words).
pub fn explain<T: Message>(payload: &[u8], error: &Error) -> String {
    if let Some(reason) = not_a_map(payload) {
        return reason;
    }
    let kind = match message_type(payload) {
        Ok(Some(kind)) => kind,
        Ok(None) => return "the message has no `type` field".to_string(),
        Err(error) => return describe(&error),
    };
    if !T::TYPES.contains(&kind.as_str()) {
        let mut quoted = kind;
        super::limits::cut(&mut quoted, QUOTED_BYTES);
        return format!(
            "unknown message type {quoted:?} (expected one of {})",
            T::TYPES.join(", ")
        );
    }
    let worded = (payload.len() <= WORDED_BYTES)
        .then(|| rmp_serde::from_slice::<T>(payload).err())
        .flatten();
    format!("{} in {kind}", describe(worded.as_ref().unwrap_or(error)))
}

/// Only the `type` of a message map, whatever else it holds.
#[derive(Deserialize)]
struct Tag {
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

/// The `type` of the message map `payload`, if it has one: a scan that
/// keeps nothing else.
pub fn message_type(payload: &[u8]) -> Result<Option<String>, Error> {
    rmp_serde::from_slice::<Tag>(payload).map(|tag| tag.kind)
}

/// Why `payload` is not a MessagePack map, if it is not: a map begins
/// with a fixmap (0x80..=0x8f), map16 (0xde) or map32 (0xdf) marker.
pub fn not_a_map(payload: &[u8]) -> Option<String> {
    match payload.first() {
        None => Some("the frame is empty, not a MessagePack map".to_string()),
        Some(0x80..=0x8f | 0xde | 0xdf) => None,
        Some(first) => Some(format!(
            "the frame is not a MessagePack map (its first byte is 0x{first:02x})"
        )),
    }
}

/// One decoder error, as the protocol's reader should hear it.
fn describe(error: &Error) -> String {
    match error {
        Error::InvalidMarkerRead(_) | Error::InvalidDataRead(_) => {
            "the frame ends in the middle of a MessagePack value".to_string()
        }
        Error::TypeMismatch(marker) => format!("unexpected MessagePack value ({marker:?})"),
        Error::OutOfRange => "a number is out of range for its field".to_string(),
        Error::LengthMismatch(_) => "an array has the wrong length".to_string(),
        Error::Utf8Error(_) => "a string is not valid UTF-8".to_string(),
        Error::DepthLimitExceeded => "values are nested too deeply".to_string(),
        Error::Uncategorized(text) | Error::Syntax(text) => reword(text),
    }
}

/// serde says "missing field `max`" and "invalid type: unit value,
/// expected u32"; the protocol says which field is missing, and names
/// values as MessagePack has them.
fn reword(text: &str) -> String {
    if let Some(field) = text.strip_prefix("missing field ") {
        return format!("field {field} missing");
    }
    let Some((found, expected)) = text
        .strip_prefix("invalid type: ")
        .and_then(|rest| rest.split_once(", expected "))
    else {
        return text.to_string();
    };
    let found = value_words(found);
    match expected {
        "field identifier" => {
            format!("a map key is {found}, where a field name (a string) belongs")
        }
        expected => format!("found {found} where {} belongs", expected_words(expected)),
    }
}

/// A value as serde names it ("unit value", "integer `3`"), in the
/// protocol's words ("nil", "the integer 3").
fn value_words(found: &str) -> String {
    let bare = found.replace('`', "");
    match bare.as_str() {
        "unit value" => "nil".into(),
        "sequence" => "an array".into(),
        "map" => "a map".into(),
        "byte array" => "binary data".into(),
        _ => match bare.split_once(' ') {
            Some(("floating", rest)) => format!("the number {}", rest.trim_start_matches("point ")),
            Some((kind, value)) => format!("the {kind} {value}"),
            None => bare,
        },
    }
}

/// What a field takes, as serde names it ("u32", "a sequence").
fn expected_words(expected: &str) -> String {
    match expected {
        "u8" | "u16" | "u32" | "u64" => "an unsigned integer".into(),
        "i8" | "i16" | "i32" | "i64" => "an integer".into(),
        "f32" | "f64" => "a number".into(),
        "a boolean" | "bool" => "true or false".into(),
        "a sequence" => "an array".into(),
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use crate::protocol::frame::decode;
    use crate::protocol::{FromDriver, ToDriver};
    use serde_json::json;

    fn reason(value: serde_json::Value) -> String {
        let payload = rmp_serde::to_vec_named(&value).unwrap();
        reason_of_bytes(&payload)
    }

    fn reason_of_bytes(payload: &[u8]) -> String {
        decode::<ToDriver>(payload).unwrap_err().to_string()
    }

    #[test]
    fn a_frame_that_is_not_a_map_is_called_so() {
        assert_eq!(
            reason(json!([1, 2])),
            "the frame is not a MessagePack map (its first byte is 0x92)"
        );
        assert_eq!(
            reason_of_bytes(&[0xc1, 0xc1]),
            "the frame is not a MessagePack map (its first byte is 0xc1)"
        );
        assert_eq!(
            reason_of_bytes(&[]),
            "the frame is empty, not a MessagePack map"
        );
    }

    #[test]
    fn a_missing_or_unknown_type_is_named_with_the_known_ones() {
        assert_eq!(reason(json!({"max": 1})), "the message has no `type` field");
        assert_eq!(
            reason(json!({"type": "x"})),
            "unknown message type \"x\" (expected one of hello, acquire_blocks, \
             release_blocks, heartbeat, draining, cannot_serve, return_blocks, get_snapshot)"
        );
        let payload = rmp_serde::to_vec_named(&json!({"type": "welcome"})).unwrap();
        let from_driver = decode::<FromDriver>(&payload).unwrap_err().to_string();
        assert!(
            from_driver.contains("field `worker_id` missing in welcome"),
            "{from_driver}"
        );
    }

    #[test]
    fn refusals_name_values_as_messagepack_has_them_not_as_the_decoder_does() {
        assert_eq!(
            reason_of_bytes(&[0x81, 0xc0, 0x01]),
            "a map key is nil, where a field name (a string) belongs"
        );
        assert_eq!(
            reason(json!({"type": 1})),
            "found the integer 1 where a string belongs"
        );
        let hello = json!({"type": "hello", "protocol": 1, "token": null, "role": "worker"});
        assert_eq!(reason(hello), "found nil where a string belongs in hello");
        let release = json!({"type": "release_blocks", "results": 5});
        assert_eq!(
            reason(release),
            "found the integer 5 where an array belongs in release_blocks"
        );
    }

    #[test]
    fn a_field_error_names_the_field_and_the_message() {
        assert_eq!(
            reason(json!({"type": "acquire_blocks"})),
            "field `max` missing in acquire_blocks"
        );
        assert_eq!(
            reason(json!({"type": "acquire_blocks", "max": "x"})),
            "found the string \"x\" where an unsigned integer belongs in acquire_blocks"
        );
        assert_eq!(
            reason(json!({"type": "hello", "protocol": 1, "token": "t", "role": "boss"})),
            "unknown variant `boss`, expected `worker` or `observer` in hello"
        );
    }

    #[test]
    fn a_map_cut_short_says_so() {
        // A map of two entries whose second never comes.
        let mut payload = rmp_serde::to_vec_named(&json!({"type": "heartbeat"})).unwrap();
        payload[0] = 0x82;
        assert_eq!(
            reason_of_bytes(&payload),
            "the frame ends in the middle of a MessagePack value"
        );
    }
}
