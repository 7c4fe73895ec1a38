//! Point 3: with tokens there and nobody queued, `take` completes on its first poll
//! without allocating.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use token_bucket::{Rate, TokenBucket};

/// Counts the allocations made by the current thread.
struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
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
