//! A seeded xorshift generator for the property tests' interleavings:
//! proptest picks the seed (and shrinks it), this draws the many small
//! choices of one run from it.

pub struct Rng(pub u64);

impl Rng {
    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
