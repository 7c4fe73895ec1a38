//! The fast path: while nobody waits, the bucket's whole state is one atomic word, and
//! `try_take`, the requests served at once, `available`, `rate` and `stats` read or
//! update it by compare-and-swap, without the lock.
//!
//! # The word is the state behind the lock
//!
//! The word holds the one limit's `empty_at` (see `gcra.rs`), the instant, in the rate's
//! units, at which the bucket would hold nothing: the very value the state behind the
//! lock holds, in the same units, counted from the same base. So the word and the lock
//! decide with one arithmetic, and a grant happens at the same nanosecond whichever
//! path serves it.
//!
//! # Who holds the state
//!
//! The top bit, [`LOCKED`], says that the state behind the lock is the authority:
//! someone waits, the bucket is closed, its numbers do not fit the word, it has several
//! limits (one word holds one limit: such a bucket's word stays seized for good), or a
//! locked operation is under way. Every locked operation first *seizes* the word (sets
//! the bit, and takes the value it held as the limit's), and when it ends with nobody
//! waiting and the bucket open it *publishes* the limit's value back. A waiter is queued only after the word is
//! seized, and no compare-and-swap succeeds while the word is seized (each expects an
//! open word), so a taker on the fast path never passes a waiter.
//!
//! The next bit, [`RECORD`], says that a grant made to a waiter is not seen yet (see
//! `unseen.rs`): a taker then notes the room it found before it takes (the least such
//! room, in one atomic beside the word), as the lock's holder notes it before every take
//! of its own, and the lock's holder reads that note when it next seizes the word. The
//! bit is in the word so that the compare-and-swap that takes checks it: a taker that
//! read the word before a grant was made cannot take without noting, whatever value the
//! word comes back to. So a grant left unread, even for good, keeps no take from the word.
//!
//! # Why a taker is never fooled by a change of settings
//!
//! The settings the word is read with (its units, the capacity, the instant and units
//! they count from) sit beside it, not in it, and change only while the word is seized. A
//! taker reads the word, then the settings, then swaps the word for its new value. Had
//! the settings changed in between and the word come back to the value the taker read,
//! the swap would succeed on arithmetic done with the old settings. So the word's values
//! never come back across a change: each set of settings (an *era*) counts its units from
//! above the highest value the word has ever held, and no value of an era is more than a
//! full bucket below its first instant's units, so every one is above every value of
//! every era before. (Within an era a value may come back, after a refund say: the
//! settings are then the same, and the value is the whole state.) A swap that succeeds
//! found the word unchanged since it was read, so of the settings it was read with. This holds whatever happens and however long a taker
//! stalls: it is not a matter of luck, as a counter that wraps would be.
//!
//! The same fact keeps readers honest: one that reads the word, then the settings, then
//! finds the word unchanged, read settings of the word's era (a setting of a later era
//! is written after the seize that began it, so it is seen only with a changed word). So
//! the arithmetic below never mixes two eras, and a refusal or a reading answers for one
//! moment.
//!
//! # The word's life
//!
//! Values never start again from a lower one, and a take writes the units of its instant
//! (less what the bucket holds), so the word has a life: the highest value it holds
//! climbs `per_nanosecond` units a nanosecond while the bucket is taken from, and each
//! change of settings spends up to a full bucket more. At one unit a nanosecond (any rate
//! whose amount divides its period's nanoseconds, such as 1,000/s) 2<sup>62</sup> units
//! last 146 years; at 1,001/s, 53 days; at 2<sup>30</sup> bytes a second (2<sup>21</sup>
//! units a nanosecond), 36 minutes. A word past its horizon starts a new era from the
//! highest value it held, which gives back the time nobody took from it; once less than
//! a second of units is left above that value, the word is *spent*: it stays seized, and
//! the lock serves the bucket for good, as exactly and a little slower (a byte throttle
//! taking chunks of kilobytes hardly notices). A rate so fast that a word would last less
//! than two seconds is left to the lock from the start.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::time::Duration;

use crate::bucket::counters::{Count, Counters};
use crate::bucket::gcra::{Refusal, Units, WORD};
use crate::bucket::limits::Limit;
use crate::error::TryTakeError;
use crate::rate::Rate;
use crate::sync::{AtomicBool, AtomicU64};

/// The state behind the lock is the authority; see the module's docs.
const LOCKED: u64 = 1 << 63;
/// A grant is unseen: a taker notes the room it found (see the module's docs). In the
/// word, so that the compare-and-swap that takes checks it too.
const RECORD: u64 = 1 << 62;
/// `empty_at`, in the units of the word's era.
const VALUE_MASK: u64 = RECORD - 1;

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
    fn empty_at(&self) -> u128 {
        (self.word & VALUE_MASK).into()
    }
}

/// The word and the settings it is read with. See the module's docs.
#[derive(Debug)]
#[repr(C, align(64))]
pub(crate) struct FastPath {
    // The word and what it is read with share one cache line.
    word: AtomicU64,
    // Written only while the word is seized.
    per_nanosecond: AtomicU64,
    per_token: AtomicU64,
    capacity: AtomicU64,
    base: AtomicU64,
    at_base: AtomicU64,
    /// Next, on the same line as far as it goes (`repr(C)` keeps this order): the two
    /// counters a taker adds to come first.
    pub(crate) counters: Counters,
    // The rate as given, for `rate()` and `stats()`: its period when it fits in u64.
    rate_amount: AtomicU64,
    rate_period: AtomicU64,
    /// The highest value the word has held: read and written by the lock's holder alone.
    highest: AtomicU64,
    /// While the word has [`RECORD`] set: the least room (a full bucket less what it
    /// held, in the era's units) a taker found before taking; `u64::MAX` for none.
    least_room: AtomicU64,
    /// The word's life is spent (see the module's docs): it stays seized. The lock's
    /// holder's alone.
    spent: AtomicBool,
}

impl FastPath {
    /// A seized word: the lock holds the state until something publishes to it (nothing
    /// does for a bucket with several limits, whose state one word cannot hold).
    pub(crate) fn seized() -> FastPath {
        FastPath {
            word: AtomicU64::new(LOCKED),
            counters: Counters::new(),
            per_nanosecond: AtomicU64::new(0),
            per_token: AtomicU64::new(0),
            capacity: AtomicU64::new(0),
            base: AtomicU64::new(0),
            at_base: AtomicU64::new(0),
            rate_amount: AtomicU64::new(0),
            rate_period: AtomicU64::new(0),
            highest: AtomicU64::new(0),
            least_room: AtomicU64::new(u64::MAX),
            spent: AtomicBool::new(false),
        }
    }

    /// The word, with the settings of its era; `None` while it is seized.
    #[inline]
    fn see(&self) -> Option<Seen> {
        self.see_with(|| ()).map(|(seen, ())| seen)
    }

    /// [`see`](FastPath::see), and `more` of the settings, read with the rest.
    #[inline]
    fn see_with<R>(&self, more: impl Fn() -> R) -> Option<(Seen, R)> {
        loop {
            let word = self.word.load(Acquire);
            if word & LOCKED != 0 {
                return None;
            }
            let units = self.units();
            let more = more();
            // Unchanged, so no era began in between (its values never come back): the
            // settings are the word's.
            if self.word.load(Acquire) == word {
                return Some((Seen { word, units }, more));
            }
        }
    }

    /// Takes `tokens` at `now` if nobody waits, and `read`s the word it was decided on (see
    /// [`attempt`](FastPath::attempt)): [`Units::quota`] for the [`Quota`](crate::quota::Quota) it leaves, or
    /// nothing, which the compiler then drops altogether. `None`: the lock must decide.
    #[inline(always)]
    pub(crate) fn try_take<R>(
        &self,
        tokens: u64,
        now: u64,
        read: impl FnOnce(&Units, u128, u128) -> R,
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
    /// `None`: the word is seized, or past its horizon, so the lock must decide.
    #[inline(always)]
    fn attempt<R>(
        &self,
        tokens: u64,
        now: u64,
        read: impl FnOnce(&Units, u128, u128) -> R,
    ) -> Option<(Outcome, R)> {
        loop {
            let seen = self.see()?;
            let units = seen.units;
            let now_units = units.in_word(now, WORD)?.into();
            match units.decide(seen.empty_at(), tokens, now_units) {
                Ok(end) => {
                    // The word is open, so the bucket is; and taking nothing passes nobody
                    // and changes nothing, so it writes nothing.
                    if tokens > 0 {
                        if seen.word & RECORD != 0 {
                            // Before the swap, so that a seize after it finds the note;
                            // one left by a swap that fails is lower than needed, never
                            // higher.
                            let room = units.room(seen.empty_at(), now_units);
                            self.least_room.fetch_min(in_word(room), AcqRel);
                        }
                        let word = in_word(end) | (seen.word & RECORD);
                        if (self.word.compare_exchange(seen.word, word, AcqRel, Acquire)).is_err() {
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

    /// `read` of the word at `now`, if nobody waits: called with the word's units, its
    /// `empty_at` and `now` in those units ([`Units::tokens`] for the tokens held,
    /// [`Units::quota`] for the [`Quota`](crate::quota::Quota)).
    #[inline]
    pub(crate) fn read<R>(
        &self,
        now: u64,
        read: impl FnOnce(&Units, u128, u128) -> R,
    ) -> Option<R> {
        let seen = self.see()?;
        let now_units = seen.units.in_word(now, WORD)?.into();
        Some(read(&seen.units, seen.empty_at(), now_units))
    }

    /// Whole tokens held at `now`, if nobody waits.
    pub(crate) fn available(&self, now: u64) -> Option<u64> {
        self.read(now, Units::tokens)
    }

    /// The rate, capacity and whole tokens held at `now`, if nobody waits.
    pub(crate) fn settings_and_tokens(&self, now: u64) -> Option<(Rate, u64, u64)> {
        let (seen, (amount, period)) = self.see_with(|| {
            (
                self.rate_amount.load(Acquire),
                self.rate_period.load(Acquire),
            )
        })?;
        let now_units = seen.units.in_word(now, WORD)?.into();
        let rate = Rate::new(amount, Duration::from_nanos(period));
        let tokens = seen.units.tokens(seen.empty_at(), now_units);
        Some((rate, seen.units.capacity, tokens))
    }

    /// The least room takers found since the word was published with [`RECORD`], in
    /// the limit's units (see `unseen.rs`); `None` when none took. Read by the lock's
    /// holder once it has seized the word, and forgotten.
    pub(crate) fn least_room_taken(&self) -> Option<u128> {
        let room = self.least_room.swap(u64::MAX, AcqRel);
        (room != u64::MAX).then_some(room.into())
    }

    /// Seizes the word for the lock's holder. When the word held the state, returns the
    /// limit's `empty_at` it held, which is the authority until it is published.
    pub(crate) fn seize(&self) -> Option<u128> {
        // Seized already (someone is queued): only the lock's holder, which is us, hands
        // it back, so a load tells, without writing to the word every taker reads.
        if self.word.load(Relaxed) & LOCKED != 0 {
            return None;
        }
        let word = self.word.fetch_or(LOCKED, AcqRel);
        if word & LOCKED != 0 {
            return None;
        }
        let empty_at = word & VALUE_MASK;
        self.note_highest(empty_at);
        Some(empty_at.into())
    }

    /// Hands `limit`'s state back to the word; called by the lock's holder when nobody
    /// waits and the bucket is open, with `now` the latest instant it observed, and
    /// `record` while a grant is unseen (takers then note the room they find). When the
    /// limit's settings are not the word's era's, or its instants left the era's horizon,
    /// a new era begins: the limit is re-counted from `now`, exactly (see the module's
    /// docs). Leaves the word seized when the settings do not fit it, or its life is spent.
    pub(crate) fn publish(&self, limit: &mut Limit, now: u64, record: bool) {
        debug_assert!(
            self.word.load(Relaxed) & LOCKED != 0,
            "only the lock's holder publishes"
        );
        if self.spent.load(Relaxed) {
            return;
        }
        let inside = |units: &Units, empty_at: u128| {
            units.in_word(now, WORD).is_some() && empty_at < u128::from(WORD.horizon)
        };
        let same_era = limit.units == self.units()
            && self.holds_rate(limit.rate)
            && inside(&limit.units, limit.empty_at);
        if !same_era {
            if !limit.units.fits(WORD) {
                // Settings the word cannot hold stay with the lock.
                return;
            }
            // Every value of the new era is at least `at_base - full`: above every value
            // the word has held (see the module's docs). A full bucket that fits the word
            // is below 2^50, so this cannot overflow.
            let full = limit.units.full();
            let at_base = u128::from(self.highest.load(Relaxed)) + 1 + full;
            let units = limit.units.counted_from(now, at_base);
            if !units.lasts(WORD) {
                // Spent: the lock serves from now on (see the module's docs).
                self.spent.store(true, Relaxed);
                return;
            }
            limit.empty_at = limit.units.convert(limit.empty_at, now, &units);
            limit.units = units;
            if !inside(&units, limit.empty_at) {
                return;
            }
            self.write_settings(&units, limit.rate);
        }
        let empty_at = in_word(limit.empty_at);
        self.note_highest(empty_at);
        let record = if record { RECORD } else { 0 };
        // The note of the least room is not cleared here but only as it is read, after a
        // seize: a taker that read this very value before the seize may note and swap
        // after this store, and its note must reach the next seize. One left by a swap
        // that failed is lower than needed, never higher.
        // Release: whoever reads this word reads the settings above with it.
        self.word.store(empty_at | record, Release);
    }

    /// Writes the settings of a new era, while the word is seized.
    fn write_settings(&self, units: &Units, rate: Rate) {
        // Release: a reader that sees one of these sees the seize before it too (see
        // `see_with`).
        self.per_nanosecond.store(units.per_nanosecond, Release);
        self.per_token.store(in_word(units.per_token), Release);
        self.capacity.store(units.capacity, Release);
        self.base.store(units.base, Release);
        self.at_base.store(in_word(units.at_base), Release);
        self.rate_amount.store(rate.amount(), Release);
        self.rate_period.store(
            u64::try_from(rate.period_nanos()).expect("checked by Units::new"),
            Release,
        );
    }

    fn note_highest(&self, empty_at: u64) {
        if empty_at > self.highest.load(Relaxed) {
            self.highest.store(empty_at, Relaxed);
        }
    }

    /// The settings as stored. Acquire, beside the Release stores of `write_settings`: a
    /// setting written in a later era is only seen together with the seize that began it,
    /// which `see_with`'s second reading of the word then sees.
    #[inline]
    fn units(&self) -> Units {
        Units::from_parts(
            self.per_nanosecond.load(Acquire),
            self.per_token.load(Acquire).into(),
            self.capacity.load(Acquire),
            self.base.load(Acquire),
            self.at_base.load(Acquire).into(),
        )
    }

    fn holds_rate(&self, rate: Rate) -> bool {
        self.rate_amount.load(Relaxed) == rate.amount()
            && u128::from(self.rate_period.load(Relaxed)) == rate.period_nanos()
    }
}

/// A value checked to fit the word: an instant inside the era's horizon, a room of at
/// most a full bucket, or a setting `Units::fits` allowed.
#[inline]
fn in_word(value: u128) -> u64 {
    u64::try_from(value).expect("inside the word's horizon")
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::bucket::counters::Tally;
    use crate::bucket::gcra::tests::rates;
    use crate::bucket::gcra::WORD_HORIZON;
    use crate::bucket::limits::Limits;
    use crate::bucket::queue::WaiterQueue;

    const SECOND: u64 = 1_000_000_000;

    /// One limit of `rate` and `capacity` holding `tokens` at 0, as the lock holds it.
    fn one_limit(rate: Rate, capacity: u64, tokens: u64) -> Limits {
        Limits::new((rate, capacity), &[], Some(tokens), 0)
    }

    /// A word publishing `limits`' one limit at 0.
    fn word_of(limits: &mut Limits) -> FastPath {
        let fast = FastPath::seized();
        fast.publish(limits.first_mut(), 0, false);
        fast
    }

    /// `try_take` on the word, reading nothing more.
    fn try_take(fast: &FastPath, tokens: u64, now: u64) -> Option<Result<(), TryTakeError>> {
        fast.try_take(tokens, now, |_, _, _| ())
            .map(|(result, ())| result)
    }

    /// `try_take` as the state behind the lock decides it, with nobody waiting.
    fn locked_try_take(limits: &mut Limits, tokens: u64, now: u64) -> Result<(), TryTakeError> {
        limits.observe(now);
        if limits.tokens() >= tokens {
            limits.take(tokens);
            return Ok(());
        }
        let nanos = limits.wait_behind(&WaiterQueue::default(), |_| tokens);
        Err(TryTakeError::Insufficient {
            retry_after: Duration::from_nanos(nanos),
        })
    }

    /// What the lock's holder does when the word sends a `try_take` to it: seize, decide,
    /// publish (beginning a new era when it must).
    fn try_take_locked(
        fast: &FastPath,
        limits: &mut Limits,
        tokens: u64,
        now: u64,
    ) -> Result<(), TryTakeError> {
        if let Some(empty_at) = fast.seize() {
            limits.adopt(empty_at, None);
        }
        let result = locked_try_take(limits, tokens, now);
        let now = limits.now();
        fast.publish(limits.first_mut(), now, false);
        result
    }

    /// The word decides every `try_take` exactly as the lock does, `retry_after`
    /// included, over an irregular walk through time.
    #[test]
    fn the_word_decides_as_the_lock_does() {
        for rate in rates() {
            for capacity in [1, 3, 50] {
                let mut expected = one_limit(rate, capacity, capacity / 2);
                let mut locked = one_limit(rate, capacity, capacity / 2);
                let fast = word_of(&mut locked);
                let mut now = 0u64;
                let mut step = 1u64;
                for request in 0..2_000u64 {
                    now += step;
                    step = (step * 7_919 + 104_729) % (3 * SECOND / 2);
                    let tokens = request % (capacity + 1);
                    let wanted = locked_try_take(&mut expected, tokens, now);
                    let decided = try_take(&fast, tokens, now)
                        .unwrap_or_else(|| try_take_locked(&fast, &mut locked, tokens, now));
                    assert_eq!(decided, wanted, "{rate} capacity {capacity} at {now}");
                    if let Some(available) = fast.available(now) {
                        assert_eq!(available, expected.tokens());
                    }
                }
            }
        }
    }

    #[test]
    fn settings_the_word_cannot_hold_leave_it_to_the_lock() {
        // A full bucket of 10,000 tokens at one an hour is 3.6e16 units: past the 2^50
        // a change of settings may spend.
        let rate = Rate::per_hour(1);
        let fast = word_of(&mut one_limit(rate, 10_000, 10_000));
        assert_eq!(try_take(&fast, 1, 0), None);
        assert_eq!(fast.available(0), None);
        // 400 at one an hour is 1.44e15 units, past 2^50 (1.13e15); 312 fit.
        let fast = word_of(&mut one_limit(rate, 400, 400));
        assert_eq!(fast.available(0), None);
        let fast = word_of(&mut one_limit(rate, 312, 312));
        assert_eq!(fast.available(0), Some(312));
        // A rate of more than 2^32 units a nanosecond would spend its word in less than
        // two seconds.
        let fastest = Rate::new(u64::MAX, Duration::from_nanos(1));
        let fast = word_of(&mut one_limit(fastest, 1, 1));
        assert_eq!(try_take(&fast, 1, 0), None);
    }

    #[test]
    fn a_seized_word_sends_everyone_to_the_lock_until_published() {
        let mut limits = one_limit(Rate::per_second(10), 5, 5);
        let fast = word_of(&mut limits);
        let empty_at = fast.seize().expect("the word held the state");
        limits.adopt(empty_at, None);
        limits.observe(SECOND);
        assert_eq!(limits.tokens(), 5);
        assert_eq!(fast.seize(), None, "seized twice");
        assert_eq!(try_take(&fast, 1, SECOND), None);
        assert!(!fast.take_now(1, SECOND));
        assert_eq!(fast.settings_and_tokens(SECOND), None);
        fast.publish(limits.first_mut(), SECOND, false);
        assert_eq!(try_take(&fast, 1, SECOND), Some(Ok(())));
        assert_eq!(fast.available(SECOND), Some(4));
    }

    /// Seizing the word sets a bit and nothing more: the lock's holder reads the very
    /// value the word held, in the very units.
    #[test]
    fn the_word_holds_the_lock_s_own_value() {
        let mut limits = one_limit(Rate::per_second(3), 7, 2);
        let fast = word_of(&mut limits);
        let published = limits.first().empty_at;
        assert_eq!(try_take(&fast, 2, SECOND), Some(Ok(())));
        let taken = fast.seize().expect("open");
        let units = limits.first().units;
        assert_eq!(
            taken,
            units.capped(published, units.at(SECOND)) + 2 * units.per_token
        );
    }

    /// 2,000,000,003 units a nanosecond: a word that lasts about 2.3 s of its clock.
    fn fast_units() -> Rate {
        Rate::new(2_000_000_003, Duration::from_secs(1))
    }

    /// A word taken from until it is spent hands the bucket to the lock for good, and
    /// every decision, by the word or by the lock, is the lock's.
    #[test]
    fn a_busy_word_is_spent_and_the_lock_keeps_the_books_exactly() {
        let (rate, capacity) = (fast_units(), 100);
        let mut expected = one_limit(rate, capacity, capacity);
        let mut locked = one_limit(rate, capacity, capacity);
        let fast = word_of(&mut locked);
        let (mut by_word, mut by_lock) = (0u64, 0u64);
        let mut now = 0;
        while now < 5 * SECOND {
            now += 3 * SECOND / 10 + 13;
            let wanted = locked_try_take(&mut expected, capacity, now);
            let Some(decided) = try_take(&fast, capacity, now) else {
                assert_eq!(try_take_locked(&fast, &mut locked, capacity, now), wanted);
                by_lock += 1;
                continue;
            };
            assert_eq!(decided, wanted);
            by_word += 1;
        }
        // 0.3 s a step: 7 inside the first era's 2.3 s. The last take's units, 4.2e18,
        // leave 0.2 s of units below the horizon: too little for a new era.
        assert_eq!((by_word, by_lock), (7, 10));
        assert_eq!(fast.available(now), None, "spent");
        assert!(fast.spent.load(Relaxed));
        assert_eq!(
            fast.counters.read(&Tally::default()).taken,
            by_word * capacity
        );
    }

    /// Once the highest value the word held is within a full bucket of its horizon, no
    /// new era fits: the word stays seized and the lock serves the bucket for good.
    #[test]
    fn a_spent_word_stays_seized() {
        let (rate, capacity) = (Rate::per_second(10), 5);
        let mut limits = one_limit(rate, capacity, capacity);
        let fast = word_of(&mut limits);
        limits.adopt(fast.seize().expect("open"), None);
        fast.highest.store(WORD_HORIZON - 100_000_000, Relaxed);
        limits.set(0, Rate::per_second(20), limits.first().capacity());
        fast.publish(limits.first_mut(), 0, false);
        assert_eq!(fast.available(0), None);
        assert_eq!(fast.seize(), None, "still seized");
        // Back to the rate of the last era it held: still spent.
        limits.set(0, rate, limits.first().capacity());
        fast.publish(limits.first_mut(), 0, false);
        assert_eq!(fast.available(0), None);
        // The same settings keep their era, which holds whatever the highest value.
        let mut limits = one_limit(rate, capacity, capacity);
        let fast = word_of(&mut limits);
        limits.adopt(fast.seize().expect("open"), None);
        fast.highest.store(WORD_HORIZON - 1, Relaxed);
        fast.publish(limits.first_mut(), 0, false);
        assert_eq!(fast.available(0), Some(capacity));
    }

    /// A word nobody took from past its horizon starts a new era from the highest value
    /// it held, not from where its clock has run to, and serves again.
    #[test]
    fn an_idle_word_past_its_horizon_serves_again() {
        let (rate, capacity) = (fast_units(), 100);
        let mut limits = one_limit(rate, capacity, capacity);
        let fast = word_of(&mut limits);
        let mut now = SECOND / 10;
        assert_eq!(try_take(&fast, capacity, now), Some(Ok(())));
        for _ in 0..4 {
            now += 3 * SECOND;
            assert_eq!(try_take(&fast, 1, now), None, "past the horizon");
            limits.adopt(fast.seize().expect("open until now"), None);
            limits.observe(now);
            assert_eq!(limits.tokens(), capacity);
            fast.publish(limits.first_mut(), now, false);
            assert_eq!(try_take(&fast, capacity, now), Some(Ok(())));
            assert_eq!(
                try_take(&fast, 1, now),
                Some(Err(TryTakeError::Insufficient {
                    retry_after: Duration::from_nanos(1),
                }))
            );
        }
    }

    /// A taker that read the word and stalled while its settings changed, however many
    /// times and back again, with the limit where it was, cannot swap the word: its
    /// values never come back across a change. (With an 8-bit count of changes, 256 of
    /// them brought the word back to the very bits the taker read.)
    #[test]
    fn a_stalled_taker_cannot_swap_after_any_number_of_changes() {
        let rates = [Rate::per_second(10), Rate::per_second(20)];
        let mut limits = one_limit(rates[0], 5, 5);
        let fast = word_of(&mut limits);
        let stale = fast.see().expect("open");
        for change in 0..512 {
            limits.adopt(fast.seize().expect("open"), None);
            assert_eq!(limits.tokens(), 5);
            limits.set(0, rates[(change + 1) % 2], limits.first().capacity());
            fast.publish(limits.first_mut(), 0, false);
            assert!(
                (fast
                    .word
                    .compare_exchange(stale.word, stale.word + 1, AcqRel, Acquire))
                .is_err(),
                "after {} changes",
                change + 1
            );
        }
        assert_eq!(fast.available(0), Some(5));
    }

    /// Takers raise the word between changes; each new era still begins above every
    /// value the word held, the takers' included (the seize reads them).
    #[test]
    fn each_era_begins_above_every_value_the_takers_wrote() {
        let rates = [Rate::per_second(10), Rate::per_second(20)];
        let mut limits = one_limit(rates[0], 5, 5);
        let fast = word_of(&mut limits);
        let stale = fast.see().expect("open");
        let mut highest = stale.empty_at();
        for change in 0..64usize {
            let now = change as u64 * SECOND / 10;
            for _ in 0..3 {
                if try_take(&fast, 1, now) == Some(Ok(())) {
                    highest = highest.max(fast.see().expect("open").empty_at());
                }
            }
            limits.adopt(fast.seize().expect("open"), None);
            limits.observe(now);
            limits.set(0, rates[(change + 1) % 2], limits.first().capacity());
            fast.publish(limits.first_mut(), now, false);
            let first = fast.see().expect("open").empty_at();
            assert!(
                first > highest,
                "era {change} begins at {first}, not above {highest}"
            );
            highest = first;
            assert!((fast
                .word
                .compare_exchange(stale.word, stale.word + 1, AcqRel, Acquire))
            .is_err());
        }
    }
}
