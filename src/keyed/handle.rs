//! [`Keyed`], the handle every clone of one shares its keys through, and what they share:
//! the template, the shards, the count of keys and the settings.

use std::collections::hash_map::RandomState;
use std::fmt;
use std::sync::Arc;

use crate::clock::Clock;
use crate::keyed::compact::Compact;
use crate::keyed::shard::Shard;
use crate::observe::KeyedObserver;
use crate::sync::{AtomicUsize, Identity, Mutex};

/// One limiter per key (a user id, a client IP, an API key), each made on first use from
/// a template and forgotten again once it is idle.
///
/// `Keyed` works with any [`KeyTemplate`](crate::KeyTemplate): every limiter of this crate is one. The
/// template is a limiter built by the caller, so its settings were checked once, when it
/// was built; every key's limiter is [`template.fresh()`](crate::KeyTemplate::fresh). `Keyed`
/// keeps a fresh copy of the template, made when it is built: settings changed later
/// through a clone of the template (a bucket's `set_rate`) change no key. `Keyed` is a cheap handle: its clones share the
/// same keys.
///
/// # Examples
///
/// ```
/// use std::net::IpAddr;
/// use std::time::Duration;
/// use token_bucket::{Keyed, Rate, TokenBucket, TryAcquireError};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // Each client may make 2 requests at once, and 1 more every second.
/// let per_client: Keyed<IpAddr, TokenBucket> =
///     Keyed::new(TokenBucket::new(Rate::per_second(1), 2)?);
/// let alice: IpAddr = "192.0.2.1".parse()?;
/// let bob: IpAddr = "192.0.2.2".parse()?;
///
/// per_client.try_acquire(&alice, 2)?;
/// assert_eq!(
///     per_client.try_acquire(&alice, 1),
///     Err(TryAcquireError::Limited { retry_after: Duration::from_secs(1) })
/// );
/// // Bob has a budget of his own.
/// per_client.try_acquire(&bob, 2)?;
/// // Alice may wait for hers.
/// per_client.acquire(&alice, 1).await?;
/// # Ok(())
/// # }
/// ```
///
/// # Why forgetting an idle key costs nothing
///
/// A limiter is [idle](crate::KeyTemplate::is_idle) when it is back in the state a
/// [fresh](crate::KeyTemplate::fresh) one starts in (a full bucket, with no fraction of a token
/// carried; windows with nothing counted) and nobody waits on it. From then on it answers
/// every request exactly as a fresh one would. So a key whose limiter is idle can be
/// dropped, and when the key comes back a fresh limiter made from the template takes its
/// place: nobody can tell the difference, and the key's memory is freed meanwhile.
///
/// A limiter that anybody else still holds is never forgotten, idle or not: an
/// [`acquire`](Keyed::acquire) waiting in its key's line holds its key's limiter, as does
/// the `Arc` that [`get`](Keyed::get) returns. Otherwise a waiter not yet counted by its
/// limiter could be admitted by the forgotten limiter while a fresh one admits others for
/// the same key: twice the limit. (An `acquire` not yet polled holds nothing: it has
/// asked for nothing yet.)
///
/// # How a key is held
///
/// A key nobody waits on and nobody holds is kept as its limiter's state alone, one
/// 8-byte word beside the key in the shard's table, the settings living once in the
/// template: for a [`TokenBucket`](crate::TokenBucket), the word its lock-free fast path
/// keeps (when the bucket would be empty, in exact units of its rate); for a
/// [`FixedWindow`](crate::FixedWindow), its window and count. `try_acquire` reads and
/// writes that word under the shard's lock, with the bucket's or the window's own
/// arithmetic, so it answers exactly as the limiter would, `retry_after` included, to the
/// nanosecond.
///
/// An [`acquire`](Keyed::acquire) whose permits are there, with nobody waiting, is
/// served on the word too. The whole limiter (a bucket's waiter queue and refill task, a
/// window's line) is made from the word only when a request must wait, or when
/// [`get`](Keyed::get) or [`get_or_insert`](Keyed::get_or_insert) hands it out, and holds exactly
/// what the word held. It folds back into the word, holding exactly what the limiter
/// held, once its line is empty, nobody else holds it, and its settings are still the
/// template's: at once when the last `acquire` that waited in its line ends (served or
/// dropped), and otherwise at the key's next `try_acquire` or `acquire`, or at the next
/// sweep (automatic, or [`retain_recent`](Keyed::retain_recent)). A handle from `get`
/// keeps the key whole while it lives, and so does a clone of the limiter inside it or a
/// future made from either: "nobody else holds it" is checked under the shard's lock,
/// of everything that refers to the limiter ([`KeyTemplate::is_shared`](crate::KeyTemplate::is_shared)). A rate or capacity changed through it keeps the
/// key whole, with its own settings, until it is forgotten.
///
/// Which templates have the compact form: a `TokenBucket` of one limit whose full
/// bucket is worth at most 2<sup>61</sup> units of its rate (a unit is a token divided by
/// `period / gcd(amount, period)` of the rate: with one token an hour, up to 640,000
/// tokens; with any rate per second, up to 2.3 × 10<sup>9</sup>) and which gains at most
/// 4.6 × 10<sup>9</sup> units a nanosecond (so that the instant its words count from moves
/// at most once a second; moving it rewrites each word of a shard); and any
/// `FixedWindow`. Any other
/// limiter, a user's own included, is held whole: in an `Arc`, with its own allocations.
/// A [`SlidingLog`](crate::SlidingLog) must remember each grant still counted, so it has
/// no one-word form: its log grows only as grants come (8 bytes each, at most `8 × limit`),
/// so a key that was used once costs about 360 bytes, most of it the limiter's fixed
/// part. A [`SlidingWindow`](crate::SlidingWindow) holds its slots from the start (8 bytes
/// each).
///
/// # The memory bound
///
/// Keys are spread over shards, each a map behind its own lock. A shard forgets its idle
/// keys (it is *swept*) before a new key would take it past twice the keys it kept at its
/// previous sweep, and never while it holds fewer than 64 keys. So a shard holds at most
/// `max(64, 2 × busy)` keys, where `busy` is the number of its keys that were busy at its
/// last sweep: memory follows the keys in use, not every key ever seen. A sweep costs one
/// look at each key of the shard and is paid for by the keys added since the previous
/// one, so adding a key costs O(1) amortized. After a sweep the shard's map gives back
/// the room it no longer needs.
///
/// Sweeps happen only as new keys come. A `Keyed` with quiet periods can call
/// [`retain_recent`](Keyed::retain_recent) from a periodic task to forget idle keys then.
///
/// [`max_keys`](crate::KeyedBuilder::max_keys) is a hard bound, against floods of unique keys
/// (one per forged address, say). A new key that finds `max_keys` keys held makes room by
/// sweeping every shard; if no key is idle it is refused with
/// [`TooManyKeys`](crate::TryAcquireError::TooManyKeys), while the keys already held are served
/// as usual. Such a sweep looks at every key, so the next one waits until the clock has
/// moved on by nine times as long as it took, and new keys that find no room meanwhile
/// are refused without one: however fast they pour in, these sweeps take at most a tenth
/// of one thread's time, and a refused key costs O(1). The price is that a key going idle
/// during that wait is found only by the next sweep. Under tokio's paused clock a sweep
/// takes no time, so the next one waits only for the clock to move.
///
/// # What a key costs
///
/// Measured by `benches/keyed_memory.rs` and `benches/keyed.rs` with a million `u64` keys
/// (on a shared two-core machine, so roughly): a compact `TokenBucket` or `FixedWindow`
/// key takes about 35 bytes of heap and no allocation of its own (16 bytes in the table,
/// at the table's load), as governor's keyed limiter does, as it ships or reading tokio's
/// clock; so does a key used by `acquire` with its permits there. A key held whole costs
/// its limiter besides: about 950 bytes for a bucket, in three allocations. A
/// `try_acquire` costs about what governor's keyed limiter costs reading tokio's clock, as
/// ours must (see `docs/benchmarks.md`).
///
/// # Concurrency
///
/// A shard's lock is held to find or add a key, to read and write a compact key's word
/// (a few arithmetic steps, no call into the limiter), during a sweep, and when an
/// `acquire` that used a key's whole limiter ends and folds it back into its word; a
/// whole limiter is otherwise called after the lock is released, and no lock is held
/// across an `.await`. A key's word decided together with a global limiter, all or
/// nothing, is the one exception: the global limiter decides under the shard's lock, so
/// that the word is written back only if it admits too. Where both are held, the shard's
/// lock is taken before the limiter's.
/// A key is hashed once a call: the hash picks its shard and its place in the shard's
/// table. The number of shards is a power of two, by default the next one at or above
/// four per available thread.
pub struct Keyed<K, L> {
    pub(super) inner: Arc<Inner<K, L>>,
}

/// What every clone of a [`Keyed`] shares.
pub(super) struct Inner<K, L> {
    pub(super) template: L,
    /// How keys nobody waits on are held as words; `None` when the template's type or
    /// settings have no compact form, and every key holds a whole limiter.
    pub(super) compact: Option<Box<Compact<L>>>,
    pub(super) shards: Box<[ShardLock<K, L>]>,
    /// Hashes a key once a call: the hash picks its shard and its place in the shard.
    pub(super) hasher: RandomState,
    /// Keys held, over all shards, counting those being added. Shared with the keys
    /// gauge of a named `Keyed`, which holds it weakly, so as to read it without holding
    /// the keys (whose type may be neither `Send` nor `'static`).
    pub(super) keys: Arc<AtomicUsize>,
    pub(super) max_keys: Option<usize>,
    pub(super) clock: Clock,
    /// The earliest instant (on `clock`) the next sweep for room may start. Only one such
    /// sweep runs at a time: whoever finds this lock taken does not sweep.
    pub(super) next_room_sweep: Mutex<u64>,
    /// Orders its keys' shard locks among a composite's members, with the part its keys
    /// play in composites (see `keyed/member.rs`).
    pub(super) identity: Identity,
    /// What it reports through, if it was named (see `observe/`).
    pub(super) observer: KeyedObserver<K>,
}

/// A shard on cache lines of its own, so that threads locking neighbouring shards do not
/// slow each other down.
#[repr(align(128))]
pub(super) struct ShardLock<K, L>(pub(super) Mutex<Shard<K, L>>);

impl<K, L> Clone for Keyed<K, L> {
    /// Another handle to the same keys and limiters.
    ///
    /// ```
    /// use token_bucket::{Keyed, Rate, TokenBucket};
    ///
    /// let keyed = Keyed::new(TokenBucket::new(Rate::per_second(1), 1)?);
    /// let handle = keyed.clone();
    /// handle.try_acquire(&"a", 1)?;
    /// assert!(keyed.try_acquire(&"a", 1).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    fn clone(&self) -> Keyed<K, L> {
        Keyed {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K, L> fmt::Debug for Keyed<K, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyed")
            .field("keys", &self.len())
            .field("max_keys", &self.inner.max_keys)
            .field("shards", &self.shards())
            .finish_non_exhaustive()
    }
}
