//! An environment for tests of code that reads variables through a
//! lookup function, so no test changes the process's own.

/// A lookup of `pairs` only.
pub fn env_of(pairs: &'static [(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    move |asked: &str| {
        let found = pairs.iter().find(|(name, _)| *name == asked);
        found.map(|(_, value)| value.to_string())
    }
}
