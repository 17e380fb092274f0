//! "Did you mean": the catalog spelling closest to an unknown code, so a
//! typo in a caller's mapping (`BITRIX_TIMOUT`) is named instead of
//! silently getting the unknown-code answer. Pure and allocation-free: it
//! runs on the decision path of every unknown code.

use super::Catalog;

/// Most edits between an unknown code and the spelling it is taken for.
pub const MAX_EDITS: usize = 2;
/// Longest code compared (the wire's limit on a code); longer ones get no guess.
const MAX_LEN: usize = crate::core::limits::MAX_CODE;

impl Catalog {
    /// The spelling (code or alias) within [`MAX_EDITS`] edits of `code`
    /// (insertions, deletions, substitutions, swaps of two neighbours; ASCII
    /// case ignored), the closest first and file order on a tie. A code of
    /// digits only (`503`, `14`) never gets a guess: a number one digit off
    /// is another status, not a typo. Nor does a code so short that two
    /// edits would make it anything: every edit must be matched by three of
    /// its characters.
    pub fn guess(&self, code: &str) -> Option<&str> {
        let code = code.as_bytes();
        if code.is_empty() || code.len() > MAX_LEN || code.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let mut best: Option<(usize, &str)> = None;
        for spelling in self
            .codes
            .iter()
            .flat_map(|e| std::iter::once(&e.code).chain(e.aliases.iter()))
        {
            let limit = best.map_or(MAX_EDITS, |(d, _)| d - 1);
            let Some(d) = edits_within(code, spelling.as_bytes(), limit) else {
                continue;
            };
            if d > 0 && 3 * d <= code.len() {
                best = Some((d, spelling));
                if d == 1 {
                    break; // nothing closer but the exact spelling, handled by the case-mismatch warning
                }
            }
        }
        best.map(|(_, s)| s)
    }
}

/// The optimal-string-alignment distance of `a` and `b` (ASCII case
/// ignored) if it is at most `limit`, else `None`; three rows on the stack.
fn edits_within(a: &[u8], b: &[u8], limit: usize) -> Option<usize> {
    if b.len() > MAX_LEN || a.len().abs_diff(b.len()) > limit {
        return None;
    }
    let (n, m) = (a.len(), b.len());
    let mut before = [0usize; MAX_LEN + 1];
    let mut prev = [0usize; MAX_LEN + 1];
    let mut cur = [0usize; MAX_LEN + 1];
    for (j, slot) in prev.iter_mut().enumerate().take(m + 1) {
        *slot = j;
    }
    for i in 1..=n {
        cur[0] = i;
        let mut row_min = cur[0];
        for j in 1..=m {
            let same = a[i - 1].eq_ignore_ascii_case(&b[j - 1]);
            let mut d = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + usize::from(!same));
            if i > 1 && j > 1 && a[i - 1].eq_ignore_ascii_case(&b[j - 2]) && a[i - 2].eq_ignore_ascii_case(&b[j - 1]) {
                d = d.min(before[j - 2] + 1);
            }
            cur[j] = d;
            row_min = row_min.min(d);
        }
        if row_min > limit {
            return None;
        }
        before[..=m].copy_from_slice(&prev[..=m]);
        prev[..=m].copy_from_slice(&cur[..=m]);
    }
    (prev[m] <= limit).then_some(prev[m])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Policy;

    fn guess<'p>(policy: &'p Policy, catalog: &str, code: &str) -> Option<&'p str> {
        policy.catalog(catalog).expect("catalog").guess(code)
    }

    #[test]
    fn distances() {
        assert_eq!(edits_within(b"BITRIX_TIMOUT", b"BITRIX_TIMEOUT", 2), Some(1));
        assert_eq!(
            edits_within(b"QUEUE_OVERFLWO", b"QUEUE_OVERFLOW", 2),
            Some(1),
            "a swap is one edit"
        );
        assert_eq!(edits_within(b"bitrix_timeout", b"BITRIX_TIMEOUT", 2), Some(0));
        assert_eq!(edits_within(b"BITRX_TIMOUT", b"BITRIX_TIMEOUT", 2), Some(2));
        assert_eq!(edits_within(b"BTRX_TMOUT", b"BITRIX_TIMEOUT", 2), None);
        assert_eq!(edits_within(b"", b"AB", 2), Some(2));
        assert_eq!(edits_within(b"ABC", b"XYZ", 2), None);
    }

    #[test]
    fn a_typo_within_two_edits_is_named() {
        let p = Policy::embedded().expect("embedded");
        assert_eq!(guess(&p, "vibecode", "BITRIX_TIMOUT"), Some("BITRIX_TIMEOUT"));
        assert_eq!(guess(&p, "vibecode", "QUEUE_OVERFLWO"), Some("QUEUE_OVERFLOW"));
        assert_eq!(guess(&p, "vibecode", "bitrix_timout"), Some("BITRIX_TIMEOUT"));
        assert_eq!(guess(&p, "grpc", "UNAVAILABEL"), Some("UNAVAILABLE"));
        assert_eq!(guess(&p, "frontspin", "RATE_LIMTED"), Some("RATE_LIMITED"));
    }

    #[test]
    fn numbers_far_codes_and_short_codes_get_no_guess() {
        let p = Policy::embedded().expect("embedded");
        for (catalog, code) in [
            ("http", "503"),
            ("http", "502"),
            ("http", "599"),
            ("grpc", "15"),
            ("grpc", "99"),
            ("vibecode", "SOMETHING_ELSE_ENTIRELY"),
            ("vibecode", "NOT_A_VIBECODE_CODE"),
            ("grpc", "NO"),
            ("vibecode", ""),
        ] {
            assert_eq!(guess(&p, catalog, code), None, "{catalog}/{code}");
        }
        let long = "B".repeat(MAX_LEN + 1);
        assert_eq!(guess(&p, "vibecode", &long), None);
    }
}
