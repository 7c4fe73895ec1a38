//! Reading a circular buffer in order, oldest first: what the sliding log's grant
//! instants and the time wheel's slot totals both are.

/// `len` entries of `storage` starting at index `oldest` and wrapping around its end, as
/// the two slices they occupy, oldest first.
fn in_order(storage: &[u64], oldest: usize, len: usize) -> (&[u64], &[u64]) {
    if len == 0 {
        return (&[], &[]);
    }
    let (wrapped, straight) = storage.split_at(oldest);
    if len <= straight.len() {
        (&straight[..len], &[])
    } else {
        (straight, &wrapped[..len - straight.len()])
    }
}

/// The `rank`-th entry (0 = the oldest) of the `len` entries starting at `oldest`.
/// The caller keeps `rank < len <= storage.len()`.
pub(crate) fn nth(storage: &[u64], oldest: usize, rank: usize) -> u64 {
    storage[(oldest + rank) % storage.len()]
}

/// How many of the `len` entries starting at `oldest`, oldest first, hold `before`
/// before the first that does not: a binary search, so the entries must be ordered so
/// that `before` is true for a prefix of them.
pub(crate) fn partition_point(
    storage: &[u64],
    oldest: usize,
    len: usize,
    before: impl Fn(u64) -> bool,
) -> usize {
    let (first, second) = in_order(storage, oldest, len);
    let point = first.partition_point(|&entry| before(entry));
    if point < first.len() {
        point
    } else {
        point + second.partition_point(|&entry| before(entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_wrapped_ring_in_order() {
        // Oldest first: 10, 20, 30, 40, stored from index 2 and wrapping.
        let storage = [30, 40, 10, 20];
        assert_eq!(in_order(&storage, 2, 4), (&[10, 20][..], &[30, 40][..]));
        assert_eq!(in_order(&storage, 2, 3), (&[10, 20][..], &[30][..]));
        assert_eq!(in_order(&storage, 2, 1), (&[10][..], &[][..]));
        assert_eq!(in_order(&storage, 0, 0), (&[][..], &[][..]));
        assert_eq!(nth(&storage, 2, 0), 10);
        assert_eq!(nth(&storage, 2, 3), 40);
        for (below, expected) in [(0, 0), (11, 1), (25, 2), (31, 3), (99, 4)] {
            assert_eq!(
                partition_point(&storage, 2, 4, |entry| entry < below),
                expected
            );
        }
        assert_eq!(partition_point(&storage, 2, 3, |entry| entry < 99), 3);
    }
}
