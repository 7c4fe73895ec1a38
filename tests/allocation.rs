//! Point 3: with tokens there and nobody queued, `take` completes on its first poll
//! without allocating. And a decision with its quota (issue 22) allocates nothing either,
//! on a limiter or on a key held as a word.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use std::time::Duration;

use token_bucket::{FixedWindow, Keyed, Limiter, Rate, TokenBucket};

/// Counts the allocations made by the current thread.
struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    static LARGEST: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        LARGEST.with(|largest| largest.set(largest.get().max(layout.size() as u64)));
        // SAFETY: forwards the caller's layout unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: the pointer came from `System.alloc` with this layout.
        unsafe { System.dealloc(pointer, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// The largest allocation the current thread made since the last call, in bytes.
fn largest_since() -> u64 {
    LARGEST.with(|largest| largest.replace(0))
}

#[tokio::test(start_paused = true)]
async fn take_with_tokens_there_does_not_allocate() {
    let bucket = TokenBucket::new(Rate::per_second(1), 100).unwrap();
    let mut waker_context = std::task::Context::from_waker(futures::task::noop_waker_ref());
    for _ in 0..10 {
        let before = allocations();
        let mut take = std::pin::pin!(bucket.take(1));
        let poll = std::future::Future::poll(take.as_mut(), &mut waker_context);
        assert!(matches!(poll, std::task::Poll::Ready(Ok(()))));
        assert_eq!(allocations(), before, "the fast path allocated");
    }
    // A request that has to queue does allocate (its place in the queue, the refill
    // task): the counter works.
    let before = allocations();
    let mut take = std::pin::pin!(bucket.take(100));
    assert!(std::future::Future::poll(take.as_mut(), &mut waker_context).is_pending());
    assert!(allocations() > before);
}

#[tokio::test(start_paused = true)]
async fn a_decision_with_its_quota_does_not_allocate_on_a_limiter_or_a_key_held_as_a_word() {
    let bucket = TokenBucket::new(Rate::per_second(1), 100).unwrap();
    let window = FixedWindow::new(100, Duration::from_secs(1)).unwrap();
    let buckets: Keyed<u64, TokenBucket> = Keyed::new(bucket.clone());
    let windows: Keyed<u64, FixedWindow> = Keyed::new(window.clone());
    // The keys' first calls add them to their tables, which allocates.
    buckets.try_acquire(&7, 1).unwrap();
    windows.try_acquire(&7, 1).unwrap();
    for _ in 0..10 {
        let before = allocations();
        assert!(bucket.try_acquire_decision(1).quota.is_some());
        assert!(window.try_acquire_decision(1).quota.is_some());
        assert!(buckets.try_acquire_decision(&7, 1).quota.is_some());
        assert!(windows.try_acquire_decision(&7, 1).quota.is_some());
        assert!(buckets.quota(&7).is_some() && windows.quota(&7).is_some());
        // A key not held reads the template's quota, adding nothing.
        assert!(buckets.quota(&8).is_some() && windows.quota(&8).is_some());
        buckets.refund(&7, 1);
        windows.refund(&7, 1);
        assert_eq!(allocations(), before, "a decision or a quota allocated");
    }
    assert_eq!((buckets.len(), buckets.keys_held_whole()), (1, 0));
    // The counter works: a key held whole is made in an allocation of its own.
    let before = allocations();
    let handle = buckets.get(&7);
    assert!(allocations() > before);
    drop(handle);
}

/// A key as a composite member (issue 23), decided on its word beside a global bucket,
/// admitted or refused, makes no limiter for the key: the decision allocates only its
/// short lists of members (issue 32 let them go to the heap: inline storage for them
/// showed no gain in any bench row), each far smaller than the key's whole bucket, which
/// `get` makes.
#[tokio::test(start_paused = true)]
async fn a_key_member_decided_on_its_word_makes_no_limiter() {
    let per_key: Keyed<u64, TokenBucket> =
        Keyed::new(TokenBucket::new(Rate::per_second(1), 2).unwrap());
    let global = TokenBucket::new(Rate::per_second(1_000), 1_000).unwrap();
    // The key's first use adds it to its shard's table, which may allocate.
    token_bucket::all_in_turn((per_key.member(&7), &global))
        .unwrap()
        .try_acquire(1)
        .unwrap();
    largest_since();
    let both = token_bucket::all_in_turn((per_key.member(&7), &global)).unwrap();
    both.try_acquire(1).unwrap();
    assert!(both.try_acquire(1).is_err());
    drop(both);
    let decided = largest_since();
    assert_eq!((per_key.len(), per_key.keys_held_whole()), (1, 0));
    // The key made whole, for comparison: its bucket is one allocation far larger.
    let whole = per_key.get(&7);
    let made_whole = largest_since();
    assert_eq!(per_key.keys_held_whole(), 1);
    drop(whole);
    assert!(
        4 * decided <= made_whole,
        "the decisions' largest allocation was {decided} bytes; a whole limiter's {made_whole}"
    );
}
