//! Who is calling, as far as placing a hold cares.

use std::borrow::Cow;

/// The caller of one request: a name given, or a way to work it out. A door
/// passes [`Caller::Lazy`] so the name (a peer address formatted, a
/// certificate parsed) is only made when a hold is placed: doing it on
/// every decision cost more than the rest of the fleet lookup.
#[derive(Clone, Copy)]
pub enum Caller<'a> {
    /// This name.
    Named(&'a str),
    /// The name this function gives, asked for only when needed.
    Lazy(&'a (dyn Fn() -> String + Sync)),
}

impl std::fmt::Debug for Caller<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Caller::Named(name) => f.debug_tuple("Named").field(name).finish(),
            Caller::Lazy(_) => f.write_str("Lazy"),
        }
    }
}

impl<'a> Caller<'a> {
    /// The caller's name.
    pub fn name(self) -> Cow<'a, str> {
        match self {
            Caller::Named(name) => Cow::Borrowed(name),
            Caller::Lazy(name) => Cow::Owned(name()),
        }
    }
}
