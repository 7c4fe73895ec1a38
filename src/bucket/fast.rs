//! The fast path: while nobody waits, the bucket's whole state is one atomic word, and
//! `try_take`, the requests served at once, `available`, `rate` and `stats` read or
//! update it by compare-and-swap, without the lock.
//!
//! # The word is the ledger in other units
//!
//! Divide the rate's amount and period by their greatest common divisor: then one
//! nanosecond is worth `per_nanosecond` *units* and one token `per_token` units, both whole
//! numbers. The word holds `empty_at`, the instant, in units, at which the bucket would
//! hold nothing. At `now` it holds `now - empty_at` units, but never more than its
//! capacity: taking `tokens` first raises `empty_at` to `now - capacity` (a full bucket)
//! and then moves it `tokens` tokens' worth later, and is allowed only if it is then no
//! later than `now`. This is GCRA (the generic cell rate algorithm), and it is the ledger
//! behind the lock (whole tokens, a carried fraction, capped when observed) to the unit:
//! converting between the two loses nothing, so a grant happens at the same nanosecond
//! whichever path serves it.
//!
//! Units are counted from a `base` instant, so that they fit in the word's 55 bits for
//! years at common rates. When they would not, a locked operation moves the base.
//!
//! # Who holds the state
//!
//! The top bit, [`LOCKED`], says that the state behind the lock is the authority:
//! someone waits, the bucket is closed, its numbers do not fit the word, it has several
//! limits (one word holds one ledger: such a bucket's word stays seized for good), or a
//! locked operation is under way. Every locked operation first *seizes* the word (sets
//! the bit and turns the word into the ledger), and when it ends with nobody waiting and
//! the bucket open it *publishes* the ledger back. A waiter is queued only after the word is
//! seized, and seizing makes every compare-and-swap begun before it fail, so a taker on
//! the fast path never passes a waiter.
//!
//! # The epoch
//!
//! The settings the word is read with (its units, the capacity, the base) change only
//! while the word is seized, and each change advances an 8-bit epoch kept in the word. A
//! taker that read the word before such a change and the settings after it fails its
//! compare-and-swap, since the epoch moved, and a reader that saw settings of another
//! epoch reads again. The epoch wraps after 256 changes, so a taker stalled between its
//! read and its compare-and-swap while exactly a multiple of 256 changes went by, and
//! finding the word's value where it left it, could be fooled. The base moves at most
//! once every half millisecond, but `set_rate` and `set_capacity` are as frequent as
//! their callers make them: code that changes a bucket's settings in a tight loop while
//! other threads take from it comes closest. A change of the value alone (a take, a
//! refund) cannot fool anyone: the value is the whole state.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::time::Duration;

use crate::bucket::counters::{Count, Counters};
use crate::bucket::ledger::Ledger;
use crate::bucket::units::{Refusal, Units, REBASE_AT_WORD as REBASE_AT, WORD};
use crate::error::TryTakeError;
use crate::quota::Quota;
use crate::rate::Rate;
use crate::sync::AtomicU64;

/// The state behind the lock is the authority; see the module's docs.
const LOCKED: u64 = 1 << 63;
/// Where the epoch starts: bits 55 to 62.
const EPOCH_SHIFT: u32 = 55;
const EPOCH_MASK: u64 = 0xFF << EPOCH_SHIFT;
/// `empty_at`, in units since the base minus a capacity's worth (so never negative).
const FIELD_MASK: u64 = (1 << EPOCH_SHIFT) - 1;

/// What one attempt decided: taken, or refused, with why and the units of the word it
/// was refused on (what its `retry_after` is counted in).
type Outcome = Result<(), (Refusal, Units)>;

/// What the fast path saw in the word: everything it needs, read consistently.
#[derive(Debug, Clone, Copy)]
struct Seen {
    word: u64,
    units: Units,
}

impl Seen {
    #[inline]
    fn empty_at(&self) -> u64 {
        self.word & FIELD_MASK
    }
}

/// The word and the settings it is read with. See the module's docs.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct FastPath {
    // The word and what it is read with share one cache line.
    word: AtomicU64,
    // Written only while the word is seized, published by the store that releases it.
    per_nanosecond: AtomicU64,
    per_token: AtomicU64,
    capacity: AtomicU64,
    base: AtomicU64,
    /// Next, on the same line as far as it goes (`repr(C)` keeps this order): the two
    /// counters a taker adds to come first.
    pub(crate) counters: Counters,
    // The rate as given, for `rate()` and `stats()`: its period when it fits in u64.
    rate_amount: AtomicU64,
    rate_period: AtomicU64,
}

impl FastPath {
    /// A word that holds `ledger`, or stays seized when the settings do not fit it.
    pub(crate) fn new(ledger: &Ledger, rate: Rate, capacity: u64) -> FastPath {
        let fast = FastPath::seized();
        fast.publish(ledger, rate, capacity);
        fast
    }

    /// A word seized for good unless something publishes to it: for a bucket with
    /// several limits, whose state one word cannot hold.
    pub(crate) fn seized() -> FastPath {
        FastPath {
            word: AtomicU64::new(LOCKED),
            counters: Counters::new(),
            per_nanosecond: AtomicU64::new(0),
            per_token: AtomicU64::new(0),
            capacity: AtomicU64::new(0),
            base: AtomicU64::new(0),
            rate_amount: AtomicU64::new(0),
            rate_period: AtomicU64::new(0),
        }
    }

    /// The word, with the settings it is read with; `None` while it is seized.
    #[inline]
    fn see(&self) -> Option<Seen> {
        loop {
            let word = self.word.load(Acquire);
            if word & LOCKED != 0 {
                return None;
            }
            // Acquire, beside the Release stores in `publish`: a setting written after a
            // later seize is only seen together with that seize, which `settled` then
            // sees. So no arithmetic below runs on settings of two publishes.
            let units = Units {
                per_nanosecond: self.per_nanosecond.load(Acquire),
                per_token: self.per_token.load(Acquire),
                capacity: self.capacity.load(Acquire),
                base: self.base.load(Acquire),
                span: WORD,
            };
            if self.settled(word) {
                return Some(Seen { word, units });
            }
        }
    }

    /// Whether the word is still open and of the same epoch as `word`: what was read
    /// since belongs to it. A change of the value alone (a take) does not matter: what
    /// was read is then true of the moment `word` was read.
    #[inline]
    fn settled(&self, word: u64) -> bool {
        self.word.load(Acquire) & !FIELD_MASK == word & !FIELD_MASK
    }

    /// Takes `tokens` at `now` if nobody waits, and `read`s the word it was decided on (see
    /// [`attempt`](FastPath::attempt)): [`Units::quota`] for the [`Quota`] it leaves, or
    /// nothing, which the compiler then drops altogether. `None`: the lock must decide.
    #[inline(always)]
    pub(crate) fn try_take<R>(
        &self,
        tokens: u64,
        now: u64,
        read: impl FnOnce(&Units, u64, u64) -> R,
    ) -> Option<(Result<(), TryTakeError>, R)> {
        let (outcome, reading) = self.attempt(tokens, now, read)?;
        let result = outcome.map_err(|(refusal, units)| self.refuse(refusal, units));
        Some((result, reading))
    }

    /// The error for a refused attempt, counted. Out of line: refusals are the rarer
    /// outcome, and the taking path inlined into callers stays small without them.
    #[cold]
    #[inline(never)]
    fn refuse(&self, refusal: Refusal, units: Units) -> TryTakeError {
        self.counters.add(Count::Denied, 1);
        units.error(refusal)
    }

    /// Takes `tokens` at `now` if nobody waits and they are there: `true` when taken,
    /// `false` when the lock must decide (to queue, refuse or time out the request).
    #[inline]
    pub(crate) fn take_now(&self, tokens: u64, now: u64) -> bool {
        matches!(self.attempt(tokens, now, |_, _, _| ()), Some((Ok(()), ())))
    }

    /// One try at taking `tokens` at `now`, by compare-and-swap until it is decided, and
    /// `read` of the word it was decided on (the one it wrote, when it took) at the same
    /// `now`: called with the word's units, its `empty_at` and `now` in those units.
    /// `None`: the word is seized, or its base must move, so the lock must decide.
    #[inline(always)]
    fn attempt<R>(
        &self,
        tokens: u64,
        now: u64,
        read: impl FnOnce(&Units, u64, u64) -> R,
    ) -> Option<(Outcome, R)> {
        loop {
            let seen = self.see()?;
            let units = seen.units;
            let now_units = units.at(now)?;
            match units.decide(seen.empty_at(), tokens, now_units) {
                Ok(end) => {
                    // The word is open, so the bucket is; and taking nothing passes nobody
                    // and changes nothing, so it writes nothing.
                    if tokens > 0 {
                        if !self.swap(&seen, end) {
                            continue;
                        }
                        self.counters.add(Count::Taken, tokens);
                    }
                    return Some((Ok(()), read(&units, end, now_units)));
                }
                Err(refusal) => {
                    let reading = read(&units, seen.empty_at(), now_units);
                    return Some((Err((refusal, units)), reading));
                }
            }
        }
    }

    #[inline]
    fn swap(&self, seen: &Seen, empty_at: u64) -> bool {
        let word = (seen.word & !FIELD_MASK) | empty_at;
        self.word
            .compare_exchange(seen.word, word, AcqRel, Acquire)
            .is_ok()
    }

    /// `read` of the word at `now`, if nobody waits: called with the word's units, its
    /// `empty_at` and `now` in those units.
    #[inline]
    fn read<R>(&self, now: u64, read: impl FnOnce(&Units, u64, u64) -> R) -> Option<R> {
        let seen = self.see()?;
        let now_units = seen.units.at(now)?;
        Some(read(&seen.units, seen.empty_at(), now_units))
    }

    /// Whole tokens held at `now`, if nobody waits.
    pub(crate) fn available(&self, now: u64) -> Option<u64> {
        self.read(now, Units::tokens)
    }

    /// The [`Quota`] at `now`, if nobody waits.
    pub(crate) fn quota(&self, now: u64) -> Option<Quota> {
        self.read(now, Units::quota)
    }

    /// Whether `tokens` are held at `now` with nobody waiting: `wait(tokens)` is served
    /// at once. `false` when the lock must decide.
    pub(crate) fn holds(&self, tokens: u64, now: u64) -> bool {
        self.available(now).is_some_and(|held| held >= tokens)
    }

    /// The rate, capacity and whole tokens held at `now`, if nobody waits.
    pub(crate) fn settings_and_tokens(&self, now: u64) -> Option<(Rate, u64, u64)> {
        loop {
            let seen = self.see()?;
            let now_units = seen.units.at(now)?;
            let rate = Rate::new(
                self.rate_amount.load(Acquire),
                Duration::from_nanos(self.rate_period.load(Acquire)),
            );
            if self.settled(seen.word) {
                let tokens = seen.units.tokens(seen.empty_at(), now_units);
                return Some((rate, seen.units.capacity, tokens));
            }
        }
    }

    /// Seizes the word for the lock's holder. When the word held the state, returns the
    /// ledger it is worth at `now`, which becomes the authority until it is published.
    pub(crate) fn seize(&self, now: u64, rate: Rate) -> Option<Ledger> {
        // Seized already (someone is queued): only the lock's holder, which is us, hands
        // it back, so a load tells, without writing to the word every taker reads.
        if self.word.load(Relaxed) & LOCKED != 0 {
            return None;
        }
        let word = self.word.fetch_or(LOCKED, AcqRel);
        if word & LOCKED != 0 {
            return None;
        }
        Some(self.units().ledger(word & FIELD_MASK, now, rate))
    }

    /// Hands the state back to the word; called by the lock's holder when nobody waits
    /// and the bucket is open. Leaves the word seized when `rate` and `capacity` do not
    /// fit it.
    pub(crate) fn publish(&self, ledger: &Ledger, rate: Rate, capacity: u64) {
        let word = self.word.load(Relaxed);
        debug_assert!(word & LOCKED != 0, "only the lock's holder publishes");
        let current = self.units();
        let Some(mut units) = Units::new(rate, capacity, current.base, ledger.fraction(), WORD)
        else {
            return;
        };
        // Keep the base while the ledger's instant is well inside its horizon, so the
        // epoch (and every taker's view) changes only when it must.
        let keep_base = ledger.last() >= units.base
            && units
                .at(ledger.last())
                .is_some_and(|now_units| now_units < REBASE_AT);
        if !keep_base {
            units.base = ledger.last();
        }
        let empty_at = units
            .empty_at(ledger, rate)
            .expect("a base at the ledger's instant fits");
        let mut epoch = word & EPOCH_MASK;
        if units != current || !self.holds_rate(rate) {
            // Release: a reader that sees one of these sees the seize before it too (see
            // `see`).
            self.per_nanosecond.store(units.per_nanosecond, Release);
            self.per_token.store(units.per_token, Release);
            self.capacity.store(units.capacity, Release);
            self.base.store(units.base, Release);
            self.rate_amount.store(rate.amount(), Release);
            self.rate_period.store(
                u64::try_from(rate.period_nanos()).expect("checked by Units::new"),
                Release,
            );
            epoch = (epoch + (1 << EPOCH_SHIFT)) & EPOCH_MASK;
        }
        // Release: whoever reads this word reads the settings above with it.
        self.word.store(epoch | empty_at, Release);
    }

    /// The settings as stored; read by the lock's holder, who alone writes them.
    fn units(&self) -> Units {
        Units {
            per_nanosecond: self.per_nanosecond.load(Relaxed),
            per_token: self.per_token.load(Relaxed),
            capacity: self.capacity.load(Relaxed),
            base: self.base.load(Relaxed),
            span: WORD,
        }
    }

    fn holds_rate(&self, rate: Rate) -> bool {
        self.rate_amount.load(Relaxed) == rate.amount()
            && u128::from(self.rate_period.load(Relaxed)) == rate.period_nanos()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::bucket::counters::Tally;

    const SECOND: u64 = 1_000_000_000;

    /// Rates whose units are awkward: a prime amount, a period not a whole number of
    /// microseconds, many units a nanosecond, a slow rate.
    fn rates() -> [Rate; 5] {
        [
            Rate::per_second(3),
            Rate::new(7, Duration::from_nanos(999_999_937)),
            Rate::new(1_000_003, Duration::from_millis(17)),
            Rate::per_hour(5),
            Rate::per_second(1_000_000),
        ]
    }

    /// The ledger after running from `initial` tokens at 0 to `now`, capped.
    fn ledger_at(rate: Rate, capacity: u64, initial: u64, now: u64) -> Ledger {
        let mut ledger = Ledger::new(initial, 0);
        ledger.advance(now, rate);
        ledger.cap(capacity);
        ledger
    }

    /// `try_take` on the word, reading nothing more.
    fn try_take(fast: &FastPath, tokens: u64, now: u64) -> Option<Result<(), TryTakeError>> {
        fast.try_take(tokens, now, |_, _, _| ())
            .map(|(result, ())| result)
    }

    /// What the lock's holder does when the word sends a `try_take` to it: seize, decide
    /// on the ledger, publish (moving the base when it must).
    fn try_take_locked(
        fast: &FastPath,
        tokens: u64,
        now: u64,
        rate: Rate,
        capacity: u64,
    ) -> Result<(), TryTakeError> {
        let mut ledger = fast.seize(now, rate).expect("nobody else holds it");
        let result = ledger_try_take(&mut ledger, tokens, now, rate, capacity);
        fast.publish(&ledger, rate, capacity);
        result
    }

    /// `try_take` as the ledger behind the lock decides it, with nobody waiting.
    fn ledger_try_take(
        ledger: &mut Ledger,
        tokens: u64,
        now: u64,
        rate: Rate,
        capacity: u64,
    ) -> Result<(), TryTakeError> {
        ledger.advance(now, rate);
        ledger.cap(capacity);
        if ledger.tokens() >= tokens {
            ledger.take(tokens);
            Ok(())
        } else {
            let nanos = ledger.time_until(u128::from(tokens), rate);
            Err(TryTakeError::Insufficient {
                retry_after: Duration::from_nanos(nanos),
            })
        }
    }

    #[test]
    fn a_ledger_and_its_word_convert_without_losing_a_part() {
        for rate in rates() {
            for capacity in [1, 2, 10, 1_000] {
                let units = Units::new(rate, capacity, 5, 0, WORD).expect("fits");
                for now in [
                    5,
                    6,
                    333_333_337,
                    SECOND + 1,
                    17 * SECOND / 3,
                    3_600 * SECOND,
                ] {
                    let ledger = ledger_at(rate, capacity, 0, now);
                    // Past the horizon of base 5 the lock's holder moves the base to now.
                    let units = match units.at(now) {
                        Some(_) => units,
                        None => Units { base: now, ..units },
                    };
                    let empty_at = units.empty_at(&ledger, rate).expect("inside the horizon");
                    assert_eq!(
                        units.ledger(empty_at, now, rate),
                        ledger,
                        "{rate} {capacity} {now}"
                    );
                }
            }
        }
    }

    /// The word decides every `try_take` exactly as the ledger behind the lock does,
    /// `retry_after` included, over an irregular walk through time.
    #[test]
    fn the_word_decides_as_the_ledger_does() {
        for rate in rates() {
            for capacity in [1, 3, 50] {
                let mut ledger = Ledger::new(capacity / 2, 0);
                let fast = FastPath::new(&ledger, rate, capacity);
                let mut now = 0u64;
                let mut step = 1u64;
                for request in 0..2_000u64 {
                    now += step;
                    step = (step * 7_919 + 104_729) % (3 * SECOND / 2);
                    let tokens = request % (capacity + 1);
                    let expected = ledger_try_take(&mut ledger, tokens, now, rate, capacity);
                    let decided = try_take(&fast, tokens, now)
                        .unwrap_or_else(|| try_take_locked(&fast, tokens, now, rate, capacity));
                    assert_eq!(decided, expected, "{rate} capacity {capacity} at {now}");
                    if let Some(available) = fast.available(now) {
                        assert_eq!(available, ledger.tokens());
                    }
                }
            }
        }
    }

    /// A rate change can leave a fraction of a token that the new rate's own divisor does
    /// not divide (found by the model-based tests): the word's units then divide it too,
    /// and `retry_after` stays exact to the nanosecond.
    #[test]
    fn a_fraction_left_by_a_rate_change_is_kept_to_the_part() {
        let first = Rate::new(3, Duration::from_nanos(1_450_775_289));
        let mut ledger = Ledger::new(0, 0);
        ledger.advance(1_000_000, first);
        for rate in [
            Rate::new(2, Duration::from_millis(1)),
            Rate::new(1, Duration::from_millis(1)),
        ] {
            ledger.change_rate(first, rate);
            let fast = FastPath::new(&ledger, rate, 7);
            let mut expected = ledger.clone();
            let decided = try_take(&fast, 1, 1_000_000).expect("the word is open");
            assert_eq!(
                decided,
                ledger_try_take(&mut expected, 1, 1_000_000, rate, 7),
                "{rate}"
            );
            assert_eq!(fast.seize(1_000_000, rate), Some(expected), "{rate}");
        }
    }

    #[test]
    fn settings_the_word_cannot_hold_leave_it_to_the_lock() {
        // A full bucket of 10,000 tokens at one an hour is 3.6e16 units: past a quarter
        // of the horizon.
        let rate = Rate::per_hour(1);
        let ledger = Ledger::new(10_000, 0);
        let fast = FastPath::new(&ledger, rate, 10_000);
        assert_eq!(try_take(&fast, 1, 0), None);
        assert_eq!(fast.available(0), None);
        // A rate of more than 2^33 units a nanosecond would have to move its base more
        // often than once a millisecond.
        let fast = FastPath::new(
            &Ledger::new(1, 0),
            Rate::new(u64::MAX, Duration::from_nanos(1)),
            1,
        );
        assert_eq!(try_take(&fast, 1, 0), None);
    }

    #[test]
    fn a_seized_word_sends_everyone_to_the_lock_until_published() {
        let rate = Rate::per_second(10);
        let fast = FastPath::new(&Ledger::new(5, 0), rate, 5);
        let ledger = fast.seize(SECOND, rate).expect("the word held the state");
        assert_eq!(ledger.tokens(), 5);
        assert_eq!(fast.seize(SECOND, rate), None, "seized twice");
        assert_eq!(try_take(&fast, 1, SECOND), None);
        assert!(!fast.take_now(1, SECOND));
        assert_eq!(fast.settings_and_tokens(SECOND), None);
        fast.publish(&ledger, rate, 5);
        assert_eq!(try_take(&fast, 1, SECOND), Some(Ok(())));
        assert_eq!(fast.available(SECOND), Some(4));
    }

    #[test]
    fn the_base_moves_past_the_horizon_and_the_books_stay_exact() {
        // 1,000,003 units a nanosecond: the base must move every 9 s or so.
        let rate = Rate::new(1_000_003, Duration::from_millis(17));
        let capacity = 100;
        let fast = FastPath::new(&Ledger::new(0, 0), rate, capacity);
        let mut ledger = Ledger::new(0, 0);
        let mut taken = 0u64;
        let mut moves = 0;
        let mut now = 0;
        while now < 120 * SECOND {
            now += 7 * SECOND / 10 + 13;
            let result = try_take(&fast, capacity, now).unwrap_or_else(|| {
                moves += 1;
                try_take_locked(&fast, capacity, now, rate, capacity)
            });
            ledger.advance(now, rate);
            ledger.cap(capacity);
            assert!(ledger.tokens() >= capacity, "a full bucket every 0.7 s");
            ledger.take(capacity);
            assert_eq!(result, Ok(()));
            taken += capacity;
        }
        // Units pass the horizon every 18 s: 6 moves in 120 s.
        assert!(moves >= 6, "the base moved {moves} times");
        assert_eq!(
            fast.counters.read(&Tally::default()).taken,
            taken - moves * capacity
        );
        let held = fast.seize(now, rate).expect("open");
        assert_eq!(held, ledger, "the word and the ledger agree to the part");
    }
}
