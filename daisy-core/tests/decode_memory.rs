//! How much memory decoding a frame takes, counted by a global allocator
//! (so this is a test binary of its own, with one test).
//!
//! serde decodes a map tagged with `type` by first copying every value
//! into a buffer of its own, about 32 bytes a value: a 1 MiB frame of
//! block ids took 48 MiB, a 16 MiB one most of a GiB. The frame is
//! decoded in one pass instead (daisy_core::protocol::tagged).

use daisy_core::protocol::frame::decode;
use daisy_core::protocol::ToDriver;

mod allocations;

/// The most bytes `decode` had allocated at once, and what it kept.
fn measure(payload: &[u8]) -> (usize, usize) {
    let (_decoded, allocated) =
        allocations::allocated_while(|| decode::<ToDriver>(payload).unwrap());
    (allocated.peak, allocated.kept)
}

#[test]
fn a_frame_of_small_values_is_decoded_without_a_copy_of_each_value() {
    // The type last, as any peer may put it: the decoder cannot know it
    // before it has read every block id.
    let ids = vec![1u64; 1 << 20];
    let message = serde_json::json!({"block_ids": ids, "reason": "r", "type": "return_blocks"});
    let payload = rmp_serde::to_vec_named(&message).unwrap();
    drop((ids, message));
    let (peak, kept) = measure(&payload);
    assert!(kept >= 8 << 20, "the block ids, 8 bytes each: {kept}");
    // What the growing Vec of ids needs (the old and the new buffer while
    // it grows); the copy took 4 times more.
    assert!(peak <= 2 * kept, "{peak} bytes at once to decode {kept}");
}
