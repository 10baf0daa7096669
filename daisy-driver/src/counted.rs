//! Counts in the words people read: "1 block", "2 blocks", "0 blocks".

/// `n` and `noun`, plural unless `n` is 1 (the nouns counted here take
/// an "s", or "es" after an "s": "2 processes").
pub fn counted(n: impl Into<u64>, noun: &str) -> String {
    match (n.into(), noun.ends_with('s')) {
        (1, _) => format!("1 {noun}"),
        (n, true) => format!("{n} {noun}es"),
        (n, false) => format!("{n} {noun}s"),
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
        assert_eq!(counted(1u64, "local process"), "1 local process");
        assert_eq!(counted(2u64, "local process"), "2 local processes");
    }
}
