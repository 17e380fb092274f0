//! "Did you mean": the catalog spelling closest to an unknown code, so a
//! typo in a caller's mapping (`BITRIX_TIMOUT`) is named instead of
//! silently getting the unknown-code answer. Pure and allocation-free: it
//! runs on the decision path of every unknown code.

use super::{Catalog, CodeEntry};

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
        let letters = letters_of(code);
        for (spelling, &theirs) in spellings(&self.codes).zip(self.spelling_letters.iter()) {
            let limit = best.map_or(MAX_EDITS, |(d, _)| d - 1);
            if letters_apart(letters, theirs) > limit {
                continue;
            }
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

/// Every code and alias of `codes`, each code before its aliases.
fn spellings(codes: &[CodeEntry]) -> impl Iterator<Item = &str> {
    codes
        .iter()
        .flat_map(|e| std::iter::once(&*e.code).chain(e.aliases.iter().map(|a| &**a)))
}

/// [`letters_of`] each of [`spellings`], in its order: kept with the
/// catalog, so a guess reads them instead of scanning every spelling.
pub(super) fn spelling_letters(codes: &[CodeEntry]) -> Box<[u64]> {
    spellings(codes).map(|s| letters_of(s.as_bytes())).collect()
}

/// The characters `s` uses, as bits (ASCII case ignored; characters
/// sharing their low six bits share a bit, which only weakens the bound).
fn letters_of(s: &[u8]) -> u64 {
    s.iter().fold(0, |m, b| m | 1 << (b.to_ascii_uppercase() & 63))
}

/// A lower bound on the edits between two strings using `a` and `b`: each
/// character one uses and the other lacks takes an edit of its own (a
/// deletion or substitution on one side, an insertion or substitution on
/// the other; a swap adds or removes none). Most spellings are rejected by
/// it at a few instructions, before the distance is computed: an unknown
/// code is compared with every spelling of its catalog.
fn letters_apart(a: u64, b: u64) -> usize {
    (a & !b).count_ones().max((b & !a).count_ones()) as usize
}

/// The optimal-string-alignment distance of `a` and `b` (ASCII case
/// ignored) if it is at most `limit`, else `None`; three rows on the stack.
/// Also the compiler's "did you mean" for unknown catalog keys.
///
/// Only the band of cells within `limit` of the diagonal is computed (a
/// cell off it is over `limit` whatever the strings), in bytes, the rows
/// rotated rather than copied: the full table in `usize`s, zeroed and
/// copied row by row, was 7 % of a ClassifyBatch of the load mix, where
/// one failure in fourteen has an unknown code (callgrind).
pub(in crate::core::catalog) fn edits_within(a: &[u8], b: &[u8], limit: usize) -> Option<usize> {
    if b.len() > MAX_LEN || a.len().abs_diff(b.len()) > limit || limit >= usize::from(u8::MAX) {
        return None;
    }
    let (n, m) = (a.len(), b.len());
    // Any cell over `limit` is as good as `over`: it cannot lead back under.
    let over = limit as u8 + 1;
    let cap = |d: usize| d.min(usize::from(over)) as u8;
    let (mut r0, mut r1, mut r2) = ([over; MAX_LEN + 2], [over; MAX_LEN + 2], [over; MAX_LEN + 2]);
    let (mut before, mut prev, mut cur) = (&mut r0, &mut r1, &mut r2);
    for (j, slot) in prev.iter_mut().enumerate().take(m.min(limit) + 1) {
        *slot = j as u8;
    }
    for i in 1..=n {
        let (lo, hi) = (i.saturating_sub(limit).max(1), (i + limit).min(m));
        // The cells either side of the band, read by this row and the next.
        cur[lo - 1] = if lo == 1 { cap(i) } else { over };
        cur[hi + 1] = over;
        let mut row_min = cur[lo - 1];
        for j in lo..=hi {
            let same = a[i - 1].eq_ignore_ascii_case(&b[j - 1]);
            let mut d = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + u8::from(!same));
            if i > 1 && j > 1 && a[i - 1].eq_ignore_ascii_case(&b[j - 2]) && a[i - 2].eq_ignore_ascii_case(&b[j - 1]) {
                d = d.min(before[j - 2] + 1);
            }
            let d = d.min(over);
            cur[j] = d;
            row_min = row_min.min(d);
        }
        if usize::from(row_min) > limit {
            return None;
        }
        (before, prev, cur) = (prev, cur, before);
    }
    let d = usize::from(prev[m]);
    (d <= limit).then_some(d)
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

    /// The whole table, as the distance was computed before the band.
    fn full_table(a: &[u8], b: &[u8]) -> usize {
        let (n, m) = (a.len(), b.len());
        let mut t = vec![vec![0usize; m + 1]; n + 1];
        for (i, row) in t.iter_mut().enumerate() {
            row[0] = i;
        }
        for (j, cell) in t[0].iter_mut().enumerate() {
            *cell = j;
        }
        for i in 1..=n {
            for j in 1..=m {
                let same = a[i - 1].eq_ignore_ascii_case(&b[j - 1]);
                let mut d = (t[i - 1][j] + 1)
                    .min(t[i][j - 1] + 1)
                    .min(t[i - 1][j - 1] + usize::from(!same));
                if i > 1
                    && j > 1
                    && a[i - 1].eq_ignore_ascii_case(&b[j - 2])
                    && a[i - 2].eq_ignore_ascii_case(&b[j - 1])
                {
                    d = d.min(t[i - 2][j - 2] + 1);
                }
                t[i][j] = d;
            }
        }
        t[n][m]
    }

    proptest::proptest! {
        /// The letters' bound never exceeds the distance, so no guess is
        /// lost to it.
        #[test]
        fn the_letters_bound_is_a_lower_bound(
            a in "[A-Da-d0_]{0,10}",
            b in "[A-Da-d0_]{0,10}",
        ) {
            let d = full_table(a.as_bytes(), b.as_bytes());
            proptest::prop_assert!(letters_apart(letters_of(a.as_bytes()), letters_of(b.as_bytes())) <= d);
        }

        /// The band gives the whole table's distance whenever it is within the limit.
        #[test]
        fn the_band_agrees_with_the_whole_table(
            a in "[ABab_]{0,12}",
            b in "[ABab_]{0,12}",
            limit in 0usize..4,
        ) {
            let full = full_table(a.as_bytes(), b.as_bytes());
            proptest::prop_assert_eq!(
                edits_within(a.as_bytes(), b.as_bytes(), limit),
                (full <= limit).then_some(full)
            );
        }
    }

    /// Every spelling of every embedded catalog, one character off, is
    /// still guessed (as itself or an equally close spelling): the letters
    /// kept per spelling line up with the spellings, and skip none that
    /// the distance would have named.
    #[test]
    fn every_spelling_one_edit_off_is_guessed() {
        let p = Policy::embedded().expect("embedded");
        let mut checked = 0;
        for catalog in p.catalogs() {
            assert_eq!(spellings(&catalog.codes).count(), catalog.spelling_letters.len());
            for spelling in spellings(&catalog.codes).filter(|s| s.len() >= 6) {
                let mut typo = spelling.as_bytes().to_vec();
                typo[spelling.len() / 2] = b'#';
                let typo = String::from_utf8(typo).expect("ascii");
                let guessed = catalog.guess(&typo).unwrap_or_else(|| panic!("no guess for {typo}"));
                assert_eq!(
                    edits_within(typo.as_bytes(), guessed.as_bytes(), 1),
                    Some(1),
                    "{typo} -> {guessed}"
                );
                checked += 1;
            }
        }
        assert!(checked > 40, "only {checked} spellings");
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
