//! The wire protocol: everything that crosses a process boundary.
//!
//! This is a contract with code in other languages (a worker written in
//! Python or Go, a worker command reading JSON lines), so field names are
//! fixed and documented in docs/protocol.md; unknown fields are ignored
//! when reading, so fields can be added without breaking old peers.
//!
//! - [`user_code`]: a block and a result as user code sees them (JSON).
//! - [`messages`]: what driver and workers say to each other.
//! - [`frame`]: how a message travels (4-byte length + MessagePack), and
//!   the [`Transport`] both ends read and write frames with.
//! - [`hello`]: the handshake check (protocol version, token).
//! - [`limits`]: what a peer can make the other side hold or log.
//! - [`explain`]: why a frame is not a message, in the protocol's words.
//! - [`tagged`]: decoding a map tagged with `type` in one pass.
//! - [`outgoing`]: writing a message, `blocks` without serde.
//! - `incoming`: reading `blocks` without serde, as drivers write it.
//! - `worker_outgoing`: writing a worker's messages per block without
//!   serde.

pub mod explain;
pub mod frame;
pub mod hello;
mod incoming;
pub mod limits;
pub mod messages;
pub mod outgoing;
pub mod tagged;
pub mod user_code;
mod worker_outgoing;

pub use frame::{FrameError, Transport};
pub use limits::{MAX_HELLO_BYTES, MAX_NAME_BYTES, MAX_TEXT_BYTES};
pub use messages::{
    CodeKind, FromDriver, FunctionCode, FunctionSource, Hello, Message, Role, TaskCode, ToDriver,
    Welcome,
};
pub use outgoing::Outgoing;
pub use user_code::{BlockCost, BlockResult, WireBlock, WireRoi};

/// The protocol version this build speaks; a Hello with another version is
/// rejected, naming both.
pub const PROTOCOL_VERSION: u32 = 1;

/// Frames longer than this are refused as soon as their length is read;
/// shorter ones are read into a buffer that grows as their bytes arrive.
pub const MAX_FRAME_BYTES: u32 = 16 * 1024 * 1024;
