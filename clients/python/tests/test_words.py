"""The enums' words are retryd's words: read from the server's own definitions
(src/core, the `words!` macro), so a word changed there fails here."""

import re
import unittest
from pathlib import Path

import retryd
from retryd.words import Word

ROOT = Path(__file__).resolve().parents[3]


def rust_words(enum: str) -> dict:
    for path in (ROOT / "src" / "core").rglob("*.rs"):
        m = re.search(r"crate::words!\(" + enum + r" \{(.*?)\}\);", path.read_text(), re.S)
        if m:
            return dict(re.findall(r"(\w+) => \"(\w+)\"", m.group(1)))
    raise AssertionError(f"no words! for {enum}")


class Words(unittest.TestCase):
    def test_same_words_as_the_server(self) -> None:
        for py, rust in [(retryd.Verdict, "Verdict"), (retryd.Strategy, "Strategy"),
                         (retryd.SideEffectState, "SideEffectState"), (retryd.HoldScope, "HoldScope"),
                         (retryd.HoldKind, "HoldKind")]:
            self.assertEqual(sorted(m.value for m in py), sorted(rust_words(rust).values()), py.__name__)

    def test_str_is_the_word_and_the_old_spelling_still_compares(self) -> None:
        v = retryd.Verdict.RETRY_WITH_LIMIT
        self.assertEqual(str(v), "retry_with_limit")
        self.assertEqual(f"{v}", "retry_with_limit")
        self.assertEqual(v, "retry_with_limit")
        self.assertEqual(v, "RETRY_WITH_LIMIT")  # deprecated spelling
        self.assertNotEqual(v, "do_not_retry")
        self.assertNotEqual(v, retryd.Strategy.RETRY_AFTER)
        self.assertEqual({v: 1}["retry_with_limit"], 1)
        self.assertIs(retryd.Verdict("do_not_retry"), retryd.Verdict.DO_NOT_RETRY)
        self.assertIsNone(retryd.Verdict.of_proto("VERDICT_UNSPECIFIED", "VERDICT_"))
        self.assertTrue(issubclass(retryd.Verdict, Word) and isinstance(v, str))

    def test_refusals_carry_their_reason(self) -> None:
        self.assertIs(retryd.Held("x", None).reason, retryd.RefusedReason.HELD)
        self.assertIs(retryd.DeadlineExceeded("x").reason, retryd.RefusedReason.DEADLINE_EXCEEDED)
        self.assertIs(retryd.RetrydUnavailable("x").reason, retryd.RefusedReason.FALLBACK)
        self.assertIs(retryd.DoNotRetry("x").reason, retryd.RefusedReason.VERDICT)
        self.assertEqual(str(retryd.RefusedReason.DEADLINE_EXCEEDED), "deadline_exceeded")


if __name__ == "__main__":
    unittest.main()
