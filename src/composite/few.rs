//! [`Few`]: a composite's members in lock order, inline up to three so that deciding over
//! a tuple of members allocates nothing.

/// Members kept inline before spilling to the heap: tuples of members have at most three.
const INLINE: usize = 3;

/// Up to [`INLINE`] values inline, the rest in a vector, in the order pushed.
pub(crate) struct Few<T> {
    inline: [Option<T>; INLINE],
    heap: Vec<T>,
}

impl<T> Few<T> {
    pub(crate) fn new() -> Few<T> {
        Few {
            inline: [None, None, None],
            heap: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, value: T) {
        match self.inline.iter_mut().find(|slot| slot.is_none()) {
            Some(slot) => *slot = Some(value),
            None => self.heap.push(value),
        }
    }

    /// Sorts the values by `key`, stably.
    pub(crate) fn sort_by_key<K: Ord>(&mut self, key: impl Fn(&T) -> K) {
        if self.heap.is_empty() {
            // Empty slots last, where `push` looks for one.
            (self.inline).sort_by_key(|slot| (slot.is_none(), slot.as_ref().map(&key)));
        } else {
            let mut values: Vec<T> = std::mem::take(self).into_iter().collect();
            values.sort_by_key(key);
            *self = values.into_iter().collect();
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> + Clone {
        self.inline.iter().flatten().chain(self.heap.iter())
    }

    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.inline.iter_mut().flatten().chain(self.heap.iter_mut())
    }
}

impl<T> Default for Few<T> {
    fn default() -> Few<T> {
        Few::new()
    }
}

impl<T> IntoIterator for Few<T> {
    type Item = T;
    type IntoIter = std::iter::Chain<
        std::iter::Flatten<std::array::IntoIter<Option<T>, INLINE>>,
        std::vec::IntoIter<T>,
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.inline.into_iter().flatten().chain(self.heap)
    }
}

impl<T> FromIterator<T> for Few<T> {
    fn from_iter<I: IntoIterator<Item = T>>(values: I) -> Few<T> {
        let mut few = Few::new();
        values.into_iter().for_each(|value| few.push(value));
        few
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_order_pushed_past_the_inline_slots() {
        let few: Few<u32> = (0..7).collect();
        assert_eq!(
            few.iter().copied().collect::<Vec<_>>(),
            [0, 1, 2, 3, 4, 5, 6]
        );
        let mut few = few;
        few.iter_mut().for_each(|value| *value *= 2);
        assert_eq!(
            few.iter().copied().collect::<Vec<_>>(),
            [0, 2, 4, 6, 8, 10, 12]
        );
        assert_eq!(few.into_iter().collect::<Vec<_>>(), [0, 2, 4, 6, 8, 10, 12]);
    }

    #[test]
    fn sorts_inline_and_spilled_values_and_keeps_pushing_after() {
        let mut few: Few<u32> = [3, 1].into_iter().collect();
        few.sort_by_key(|value| *value);
        few.push(2);
        assert_eq!(few.iter().copied().collect::<Vec<_>>(), [1, 3, 2]);
        few.sort_by_key(|value| *value);
        assert_eq!(few.iter().copied().collect::<Vec<_>>(), [1, 2, 3]);
        let mut few: Few<u32> = [5, 4, 3, 2, 1].into_iter().collect();
        few.sort_by_key(|value| *value);
        assert_eq!(few.iter().copied().collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
    }
}
