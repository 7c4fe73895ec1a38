//! How much of a cost one `take` may ask for: the one rule the stream and byte I/O
//! adapters both pay by.

use crate::bucket::TokenBucket;

/// The most tokens one [`take`](TokenBucket::take) toward `owed` tokens may ask for: what
/// is owed, but no more than the bucket's capacity (all one `take` can ever be granted)
/// nor its [queue limit](crate::Builder::queue_limit) (all one `take` can ever queue for).
/// A larger cost is paid in several installments.
///
/// A queue limit of zero bounds nothing here. It says that nothing may wait, not that
/// tokens must be asked for one at a time: each installment is served at once, in full,
/// or refused with [`QueueFull`](crate::TakeError::QueueFull). So a cost that cannot be
/// paid now is refused before it takes anything, instead of taking tokens one by one and
/// giving them back when the next one is missing (which, for a moment, hid them from
/// everyone else).
///
/// Both settings are read afresh on every call, since the capacity may change between
/// installments.
pub(crate) fn installment(bucket: &TokenBucket, owed: u64) -> u64 {
    let tokens = owed.min(bucket.capacity());
    match bucket.queue_limit() {
        Some(limit) if limit > 0 => tokens.min(limit),
        _ => tokens,
    }
}
