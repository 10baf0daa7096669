//! Counts in the words people read: "1 block", "2 blocks", "0 blocks".

/// `n` and `noun`, plural unless `n` is 1 (the nouns counted here all
/// take an "s").
pub fn counted(n: impl Into<u64>, noun: &str) -> String {
    match n.into() {
        1 => format!("1 {noun}"),
        n => format!("{n} {noun}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::counted;

    #[test]
    fn one_is_singular_and_every_other_count_plural() {
        assert_eq!(counted(1u64, "block"), "1 block");
        assert_eq!(counted(0u64, "block"), "0 blocks");
        assert_eq!(counted(54u32, "done marker"), "54 done markers");
    }
}
