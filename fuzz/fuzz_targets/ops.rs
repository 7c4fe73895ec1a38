//! Sequences of operations decoded from the fuzzer's bytes, run on a real bucket on
//! paused time beside the reference model, exactly as the model-based tests run them
//! (`tests/common/model.rs` and `tests/common/lockstep.rs`, shared through `#[path]`):
//! any disagreement, broken promise or panic is a crash. The ranges are wider than the
//! tests': capacities up to 1,000, rates from a token a second to one every nanosecond,
//! and one to three limits.
#![no_main]

#[path = "../../tests/common/lockstep.rs"]
mod lockstep;
#[path = "../../tests/common/model.rs"]
mod model;

use std::time::Duration;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use lockstep::Op;
use model::{Kind, ModelRate, Setup};

/// Enough steps to build a long queue, few enough that a run stays in milliseconds.
const MOST_STEPS: usize = 64;
const SECOND: u64 = 1_000_000_000;

fuzz_target!(|data: &[u8]| {
    let mut bytes = Unstructured::new(data);
    let Ok((setup, ops)) = decode(&mut bytes) else {
        return;
    };
    if let Err(failure) = lockstep::run(&setup, &ops) {
        panic!("{failure}\nsetup: {setup:?}\nops: {ops:#?}");
    }
});

fn decode(bytes: &mut Unstructured<'_>) -> Result<(Setup, Vec<Op>)> {
    let first = (rate(bytes)?, capacity(bytes)?);
    let mut more = Vec::new();
    for _ in 0..bytes.int_in_range(0..=2)? {
        more.push((rate(bytes)?, capacity(bytes)?));
    }
    let limits = 1 + more.len();
    let capacities = || more.iter().map(|&(_, capacity)| capacity).chain([first.1]);
    let smallest = capacities().min().unwrap_or(first.1);
    let largest = capacities().max().unwrap_or(first.1);
    let setup = Setup {
        rate: first.0,
        capacity: first.1,
        more,
        initial: if bytes.ratio(1, 4)? {
            None
        } else {
            Some(bytes.int_in_range(0..=smallest)?)
        },
        queue_limit: if bytes.ratio(1, 4)? {
            Some(bytes.int_in_range(0..=2 * smallest)?)
        } else {
            None
        },
    };
    let mut ops = Vec::new();
    while !bytes.is_empty() && ops.len() < MOST_STEPS {
        ops.push(op(bytes, smallest, limits, largest)?);
    }
    Ok((setup, ops))
}

fn capacity(bytes: &mut Unstructured<'_>) -> Result<u64> {
    if bytes.arbitrary()? {
        bytes.int_in_range(1..=8)
    } else {
        bytes.int_in_range(1..=1_000)
    }
}

/// A rate that fills a bucket of 1,000 within a few hours at the slowest.
fn rate(bytes: &mut Unstructured<'_>) -> Result<ModelRate> {
    Ok(ModelRate {
        amount: bytes.int_in_range(1..=1_000)?,
        period: bytes.int_in_range(1..=10 * SECOND)?,
    })
}

/// A rate, or now and then one that `set_rate` must refuse.
fn any_rate(bytes: &mut Unstructured<'_>) -> Result<ModelRate> {
    Ok(match bytes.int_in_range(0..=9)? {
        0 => ModelRate {
            amount: 0,
            period: bytes.int_in_range(0..=SECOND)?,
        },
        1 => ModelRate {
            amount: bytes.int_in_range(0..=1_000)?,
            period: 0,
        },
        _ => rate(bytes)?,
    })
}

fn tokens(bytes: &mut Unstructured<'_>, capacity: u64) -> Result<u64> {
    bytes.int_in_range(0..=capacity + 3)
}

fn timeout(bytes: &mut Unstructured<'_>) -> Result<Option<Duration>> {
    Ok(match bytes.int_in_range(0..=3)? {
        0 => None,
        1 => Some(Duration::MAX),
        _ => Some(Duration::from_nanos(bytes.int_in_range(0..=5 * SECOND)?)),
    })
}

/// An op for a bucket of `limits` whose smallest capacity is `capacity` and largest
/// `largest`.
fn op(bytes: &mut Unstructured<'_>, capacity: u64, limits: usize, largest: u64) -> Result<Op> {
    Ok(match bytes.int_in_range(0..=11)? {
        0..=2 => Op::Request {
            kind: if bytes.ratio(1, 4)? {
                Kind::Wait
            } else {
                Kind::Take
            },
            tokens: tokens(bytes, capacity)?,
            timeout: timeout(bytes)?,
            cancel_unpolled: bytes.ratio(1, 20)?,
        },
        3 => Op::Sleep(bytes.int_in_range(1..=3)?),
        4 => Op::Sleep(bytes.int_in_range(1..=10_000)?),
        5 => Op::SleepUntilDue,
        6 => Op::AtDue(Box::new(call_or_drop(bytes, capacity, limits, largest)?)),
        _ => call_or_drop(bytes, capacity, limits, largest)?,
    })
}

/// An op that decides outcomes at once: what may race a grant at the tick it is due.
fn call_or_drop(
    bytes: &mut Unstructured<'_>,
    capacity: u64,
    limits: usize,
    largest: u64,
) -> Result<Op> {
    Ok(match bytes.int_in_range(0..=22)? {
        0..=5 => Op::Drop {
            pick: bytes.arbitrary()?,
            racing: bytes.arbitrary()?,
        },
        6..=10 => Op::TryTake(tokens(bytes, capacity)?),
        11..=14 => Op::Refund(bytes.int_in_range(0..=capacity)?),
        15..=16 => Op::SetRate(any_rate(bytes)?),
        17..=19 => Op::SetCapacity(bytes.int_in_range(0..=capacity + 3)?),
        // One past the last limit now and then: refused with `NoSuchLimit`.
        21 => Op::SetLimitRate(bytes.int_in_range(0..=limits)?, any_rate(bytes)?),
        22 => Op::SetLimitCapacity(
            bytes.int_in_range(0..=limits)?,
            bytes.int_in_range(0..=largest + 3)?,
        ),
        _ => Op::Close,
    })
}
