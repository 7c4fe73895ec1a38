//! How [`Keyed`](crate::Keyed) holds a key nobody waits on: as its limiter's state word
//! alone (a [`OneWord`]), the settings living once in the template. A [`TokenBucket`](crate::TokenBucket) of
//! one limit whose full bucket fits the word (see `bucket/compact.rs`) and a
//! [`FixedWindow`] have such a word; every other limiter, a user's own included, is
//! always held whole.
//!
//! The limiter type is known only as `L: KeyTemplate`, so the template is asked, once,
//! whether it is one of the two (`Any` downcasts): the traits users implement gain
//! nothing, and every later call goes straight to the form's own code.

use std::any::Any;

use crate::bucket::compact::CompactBucket;
use crate::limiter::{KeyTemplate, OneWord};
use crate::window::FixedWindow;

/// The compact form of one template's keys.
pub(crate) type Compact<L> = dyn OneWord<Limiter = L>;

/// The compact form of `template`'s keys, if its type and settings have one.
pub(crate) fn compact_of<L: KeyTemplate>(template: &L) -> Option<Box<Compact<L>>> {
    form::<CompactBucket, L>(template).or_else(|| form::<FixedWindow, L>(template))
}

/// `W`'s form of `template`'s keys, if `L` is `W`'s limiter and its settings fit a word.
fn form<W: OneWord, L: 'static>(template: &L) -> Option<Box<Compact<L>>>
where
    W::Limiter: 'static,
{
    let template: &W::Limiter = (template as &dyn Any).downcast_ref()?;
    let mut form: Option<Box<Compact<W::Limiter>>> = Some(Box::new(W::of(template)?));
    // `L` is `W::Limiter` here: the downcast only renames the type.
    (&mut form as &mut dyn Any)
        .downcast_mut::<Option<Box<Compact<L>>>>()?
        .take()
}
