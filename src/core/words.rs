//! The one vocabulary: every domain enum's word is defined once, here by
//! [`words!`](crate::words) at the enum, and the same word is what the CLI
//! prints, the HTTP door reads and writes, metrics label, spans carry, logs
//! and the decision log record. (The proto's enum names stay on the gRPC
//! wire; the doors map them.)

/// Defines the words of a fieldless enum once: `WORDS`, `as_str`,
/// `from_word`, `Display`, and serde (serialized as the word, read from it;
/// an unknown word is serde's usual "unknown variant … expected one of …").
#[macro_export]
macro_rules! words {
    ($ty:ident { $($variant:ident => $word:literal),+ $(,)? }) => {
        impl $ty {
            /// Every value with its word, in declaration order.
            pub const WORDS: &'static [($ty, &'static str)] = &[$(($ty::$variant, $word)),+];

            /// The word for this value: the same in the CLI, HTTP, metrics,
            /// spans, logs and the decision log.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $word),+
                }
            }

            /// The value `word` names, if any.
            pub fn from_word(word: &str) -> Option<$ty> {
                match word {
                    $($word => Some($ty::$variant),)+
                    _ => None,
                }
            }
        }

        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $ty {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $ty {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Word;
                impl ::serde::de::Visitor<'_> for Word {
                    type Value = $ty;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        f.write_str(concat!("one of" $(, " `", $word, "`")+))
                    }
                    fn visit_str<E: ::serde::de::Error>(self, s: &str) -> Result<$ty, E> {
                        $ty::from_word(s).ok_or_else(|| E::unknown_variant(s, &[$($word),+]))
                    }
                }
                d.deserialize_str(Word)
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use crate::core::budget::BudgetScope;
    use crate::core::hold::{HoldKind, HoldScope};
    use crate::core::{
        Locale, Operation, ReadBack, Scope, SideEffectState, Strategy, TargetReached, TerminalState, Verdict,
    };

    /// Every word reads back as its value, through serde too, and no two
    /// values of one enum share a word.
    fn round_trips<T>(words: &[(T, &'static str)])
    where
        T: Copy + PartialEq + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Display,
    {
        for (i, (v, w)) in words.iter().enumerate() {
            assert_eq!(serde_json::to_value(v).expect("serializes"), serde_json::json!(w));
            assert_eq!(serde_json::from_value::<T>(serde_json::json!(w)).expect("reads"), *v);
            assert_eq!(v.to_string(), *w);
            assert!(words.iter().skip(i + 1).all(|(_, o)| o != w), "{w} twice");
        }
        let e = serde_json::from_value::<T>(serde_json::json!("no such word")).unwrap_err();
        assert!(
            e.to_string().contains("unknown variant `no such word`, expected"),
            "{e}"
        );
    }

    #[test]
    fn every_vocabulary_round_trips() {
        round_trips(Verdict::WORDS);
        round_trips(Operation::WORDS);
        round_trips(ReadBack::WORDS);
        round_trips(TargetReached::WORDS);
        round_trips(SideEffectState::WORDS);
        round_trips(Strategy::WORDS);
        round_trips(Scope::WORDS);
        round_trips(TerminalState::WORDS);
        round_trips(Locale::WORDS);
        round_trips(HoldScope::WORDS);
        round_trips(HoldKind::WORDS);
        round_trips(BudgetScope::WORDS);
    }
}
