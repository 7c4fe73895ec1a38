//! The fixed window's state word: how it packs a window's number and its count
//! ([`Layout`], with [`SEIZED`] for a composite), what a caller reads from it
//! ([`Current`]), and how a line of waiters packs into the windows that follow
//! ([`Packing`]). Plain arithmetic: it uses nothing else of the crate.

/// Set in the state word while a composite decides over this limiter (see `composite/`):
/// `try_acquire`'s compare-and-swap then fails, and it refuses as if a waiter were ahead,
/// so nothing changes the count between the composite's check and its record but a
/// refund, which only makes room.
pub(super) const SEIZED: u64 = 1 << 63;

/// How the state word is split: the count in the low `count_bits` bits, just enough for
/// the limit, the window number's low bits (its *tag*) in the bits above but the top one,
/// and [`SEIZED`] in the top one.
#[derive(Debug, Clone, Copy)]
pub(super) struct Layout {
    pub(super) count_bits: u32,
}

impl Layout {
    pub(super) fn for_limit(limit: u64) -> Layout {
        Layout {
            count_bits: u64::BITS - limit.leading_zeros(),
        }
    }

    /// The bits of a window number that the word keeps.
    #[inline]
    pub(super) fn tag_mask(self) -> u64 {
        u64::MAX >> (self.count_bits + 1)
    }

    #[inline]
    pub(super) fn pack(self, window: u64, count: u64) -> u64 {
        (window & self.tag_mask()) << self.count_bits | count
    }

    /// The window a caller whose clock reads `clock_window` counts into, given the
    /// stored `word`: the stored one when it is that window or a newer one (tags compared
    /// modulo their width, up to half of it ahead), else a new, empty one.
    #[inline]
    pub(super) fn read(self, word: u64, clock_window: u64) -> Current {
        let stored = (word & !SEIZED) >> self.count_bits;
        let ahead = stored.wrapping_sub(clock_window) & self.tag_mask();
        if ahead <= self.tag_mask() >> 1 {
            Current {
                clock_window,
                ahead,
                count: word & !(u64::MAX << self.count_bits),
            }
        } else {
            Current {
                clock_window,
                ahead: 0,
                count: 0,
            }
        }
    }
}

/// The window a caller counts into and the permits already counted there, as decided
/// from one reading of the clock and of the state word.
#[derive(Debug, Clone, Copy)]
pub(super) struct Current {
    /// The window the caller's clock reading falls in.
    pub(super) clock_window: u64,
    /// How many windows later the window counted into is: above zero when a caller whose
    /// clock read later has already started a newer one.
    pub(super) ahead: u64,
    /// Permits admitted in the window counted into.
    pub(super) count: u64,
}

impl Current {
    /// The number of the window counted into (wrapping: only its tag is stored).
    pub(super) fn window(self) -> u64 {
        self.clock_window.wrapping_add(self.ahead)
    }
}

/// Requests placed in windows from the current one on, each whole in the first window
/// where it fits, in order: how a line of waiters is admitted.
pub(super) struct Packing {
    pub(super) limit: u64,
    /// Permits counted in the last window used.
    pub(super) count: u64,
    /// How many windows after the current one that is.
    pub(super) later: u128,
}

impl Packing {
    pub(super) fn place(&mut self, permits: u64) {
        if self.count + permits > self.limit {
            self.later += 1;
            self.count = permits;
        } else {
            self.count += permits;
        }
    }
}
