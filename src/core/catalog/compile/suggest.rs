//! "Did you mean": the known key closest to a misspelt one.

use super::super::guess::{MAX_EDITS, edits_within};

/// The known key closest to `name` (at most [`MAX_EDITS`] edits, swaps of
/// neighbours and ASCII case ignored; the first in `known` on a tie), for a
/// "did you mean" hint. The same banded distance the decision path uses for
/// unknown codes: a catalog full of misspelt keys (a fuzzer's input, a bad
/// reload) is refused at the cost of the parse, not of a full table per key.
pub(super) fn closest<'k>(name: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .filter_map(|k| edits_within(name.as_bytes(), k.as_bytes(), MAX_EDITS).map(|d| (d, *k)))
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::closest;

    const KNOWN: &[&str] = &["max_attempts", "max_delay_ms", "name", "verdict"];

    #[test]
    fn a_key_within_two_edits_is_named() {
        assert_eq!(closest("max_attemps", KNOWN), Some("max_attempts"));
        assert_eq!(
            closest("max_attmepts", KNOWN),
            Some("max_attempts"),
            "a swap is one edit"
        );
        assert_eq!(closest("MAX_ATTEMPTS", KNOWN), Some("max_attempts"), "case only");
        assert_eq!(closest("verdcit", KNOWN), Some("verdict"));
    }

    #[test]
    fn far_long_and_non_ascii_keys_get_none() {
        assert_eq!(closest("retry_budget", KNOWN), None);
        assert_eq!(closest(&"m".repeat(100_000), KNOWN), None);
        assert_eq!(closest("nämé", KNOWN), None);
        assert_eq!(closest("", KNOWN), None);
        assert_eq!(closest("nam", &[]), None);
    }

    #[test]
    fn the_closest_wins_and_the_first_on_a_tie() {
        assert_eq!(closest("verdic", &["verd", "verdict"]), Some("verdict"));
        assert_eq!(closest("nam", &["name", "nab"]), Some("name"));
        assert_eq!(closest("nam", &["nab", "name"]), Some("nab"));
    }
}
