//! Checking a limiter's promise from outside: never more than `limit` permits admitted
//! in any interval of length `window`, with the admissions timed by the test, not by the
//! limiter.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// One admission as the test saw it: the limiter admitted `permits` at some instant
/// between `before` (read just before the call) and `after` (just after it returned).
#[derive(Debug, Clone, Copy)]
pub struct Admission {
    pub permits: u64,
    pub before: Instant,
    pub after: Instant,
}

impl Admission {
    /// An admission known to the nanosecond (paused time).
    pub fn at(instant: Instant, permits: u64) -> Admission {
        Admission {
            permits,
            before: instant,
            after: instant,
        }
    }
}

/// Fails when some interval `[x, x + window)` certainly holds more than `limit` admitted
/// permits: those whose whole `[before, after]` lies in it.
///
/// Never fails a correct limiter, however late the threads were scheduled (the true
/// admission instants lie in their intervals), and catches any excess larger than that
/// lateness. Only intervals starting at some `before` need checking: any set of
/// admissions inside an interval also lies inside the one starting at its earliest
/// `before`.
pub fn check_never_over(
    admissions: &[Admission],
    limit: u64,
    window: Duration,
) -> Result<(), String> {
    for start in admissions {
        let end = start.before + window;
        let inside: Vec<&Admission> = admissions
            .iter()
            .filter(|admission| admission.before >= start.before && admission.after < end)
            .collect();
        let permits: u64 = inside.iter().map(|admission| admission.permits).sum();
        if permits > limit {
            return Err(format!(
                "{permits} permits admitted within {window:?} (limit {limit}): {inside:#?}"
            ));
        }
    }
    Ok(())
}

/// What [`hammer`] saw.
pub struct Hammered {
    pub admissions: Vec<Admission>,
    pub refusals: u64,
}

/// `threads` std threads call `try_acquire` as fast as they can for `run_for` of real
/// time, cycling through `sizes` of requests, and time each admission around the call.
/// `try_acquire` returns whether it admitted.
pub fn hammer(
    threads: usize,
    run_for: Duration,
    sizes: &[u64],
    try_acquire: impl Fn(u64) -> bool + Sync,
) -> Hammered {
    let seen = Mutex::new(Hammered {
        admissions: Vec::new(),
        refusals: 0,
    });
    let stop = Instant::now() + run_for;
    std::thread::scope(|scope| {
        for thread in 0..threads {
            let (seen, try_acquire) = (&seen, &try_acquire);
            scope.spawn(move || {
                let mut admissions = Vec::new();
                let mut refusals = 0;
                let mut sizes = sizes.iter().cycle().skip(thread);
                while Instant::now() < stop {
                    let permits = *sizes.next().unwrap();
                    let before = Instant::now();
                    let admitted = try_acquire(permits);
                    let after = Instant::now();
                    if admitted {
                        admissions.push(Admission {
                            permits,
                            before,
                            after,
                        });
                    } else {
                        refusals += 1;
                    }
                }
                let mut seen = seen.lock().unwrap();
                seen.admissions.extend(admissions);
                seen.refusals += refusals;
            });
        }
    });
    seen.into_inner().unwrap()
}

/// The checker itself fails on an excess: the seam burst a fixed window lets through,
/// and an excess hidden among admissions with wide uncertain intervals.
pub fn check_the_checker() {
    let start = Instant::now();
    // `permits` admitted somewhere between `from` and `to` ms after `start`.
    let seen = |permits, from: u64, to: u64| Admission {
        permits,
        before: start + Duration::from_millis(from),
        after: start + Duration::from_millis(to),
    };
    let check = |admissions: &[Admission]| check_never_over(admissions, 10, Duration::from_secs(1));
    // The seam burst, and the same 11 a whole window apart, to the millisecond.
    assert!(check(&[seen(10, 999, 999), seen(1, 1_000, 1_000)]).is_err());
    assert!(check(&[seen(10, 999, 999), seen(1, 1_998, 1_998)]).is_err());
    assert_eq!(check(&[seen(10, 999, 999), seen(1, 1_999, 1_999)]), Ok(()));
    // An admission that may have been a window after the first is not counted against
    // it, but one that certainly was not is.
    assert_eq!(check(&[seen(10, 0, 0), seen(1, 500, 1_000)]), Ok(()));
    assert!(check(&[seen(10, 0, 0), seen(1, 500, 999)]).is_err());
    // Admissions spread over the window count together, wherever it starts.
    assert!(check(&[seen(4, 100, 100), seen(4, 600, 650), seen(3, 1_050, 1_099)]).is_err());
    assert_eq!(
        check(&[seen(4, 100, 100), seen(4, 600, 650), seen(3, 1_050, 1_100)]),
        Ok(())
    );
}
