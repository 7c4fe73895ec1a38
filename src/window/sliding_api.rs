//! The public methods both sliding limiters share, written once: a macro that gives
//! [`SlidingLog`](crate::SlidingLog) and [`SlidingWindow`](crate::SlidingWindow) their
//! [`Limiter`](crate::Limiter) implementation, `Debug`, naming and accessors, with
//! rustdoc examples in each one's own terms. What the methods call is in `sliding.rs`.

/// Gives a public type whose field `sliding` holds its `Sliding` handle (`sliding.rs`)
/// what both sliding limiters have: [`Limiter`](crate::Limiter), `Debug`, naming, and the
/// accessors `limit`, `window` and `queued_permits`. `$example` makes one admitting 2
/// permits a second, for the accessors' examples; `$counts` says how long a permit
/// counts, and `$full_after` is how long the one it admits at the start counts 250 ms
/// later. `$kind` is its `observe::Kind`, whose label is `$kind_label`.
macro_rules! impl_limiter {
    (
        $limiter:ident,
        $example:literal,
        $counts:literal,
        $full_after:literal,
        $kind:ident,
        $kind_label:literal
    ) => {
        impl $limiter {
            #[doc = concat!(
                        "Acquires `permits` now if they fit and nobody waits; never waits. Zero ",
                        "permits always succeed. Needs no runtime, and no import: the ",
                        "[`Limiter`](crate::limiter::Limiter) trait offers the same call for code that ",
                        "takes any limiter.\n\n",
                        "# Errors\n\n",
                        "[`TryAcquireError::Limited`](crate::error::TryAcquireError::Limited) when ",
                        "`permits` more would count more than the limit now, or others wait; its ",
                        "`retry_after` is exact to the nanosecond: the time until enough permits ",
                        "stop counting (", $counts, "), after every waiter ahead of it. ",
                        "[`TryAcquireError::ExceedsLimit`](crate::error::TryAcquireError::ExceedsLimit) ",
                        "when `permits` is above the limit, naming both.\n\n",
                        "# Examples\n\n",
                        "```\n",
                        "use std::time::Duration;\n",
                        "use token_bucket::{", stringify!($limiter), ", TryAcquireError};\n\n",
                        "# #[tokio::main(flavor = \"current_thread\", start_paused = true)]\n",
                        "# async fn main() -> Result<(), Box<dyn std::error::Error>> {\n",
                        "let limiter = ", $example, "?;\n",
                        "limiter.try_acquire(2)?;\n",
                        "tokio::time::advance(Duration::from_millis(250)).await;\n",
                        "assert_eq!(\n",
                        "    limiter.try_acquire(1),\n",
                        "    Err(TryAcquireError::Limited { retry_after: ", $full_after, " })\n",
                        ");\n",
                        "assert_eq!(\n",
                        "    limiter.try_acquire(3),\n",
                        "    Err(TryAcquireError::ExceedsLimit { requested: 3, limit: 2 })\n",
                        ");\n",
                        "# Ok(())\n",
                        "# }\n",
                        "```",
                    )]
            pub fn try_acquire(&self, permits: u64) -> Result<(), $crate::error::TryAcquireError> {
                self.sliding.try_acquire(permits)
            }

            #[doc = concat!(
                        "Acquires `permits`, waiting first in, first out behind the other ",
                        "waiters until they fit. Zero permits succeed at once.\n\n",
                        "# Errors\n\n",
                        "[`AcquireError::ExceedsLimit`](crate::error::AcquireError::ExceedsLimit) at ",
                        "once when `permits` is above the limit, naming both; ",
                        "[`AcquireError::NoRuntime`](crate::error::AcquireError::NoRuntime) when it ",
                        "must wait outside a tokio runtime.\n\n",
                        "# Panics\n\n",
                        "On its first poll, when it must wait inside a tokio runtime built ",
                        "without time (no `enable_time` on the runtime's builder): nothing could ",
                        "ever wake it, so it says so at once rather than hang.\n\n",
                        "# Cancel safety\n\n",
                        "This method uses a queue to admit requests in the order they were ",
                        "made. Cancelling a call to `acquire` makes you lose your place in the ",
                        "queue, and acquires nothing; the waiter behind it moves up.\n\n",
                        "# Examples\n\n",
                        "```\n",
                        "use std::time::Duration;\n",
                        "use token_bucket::", stringify!($limiter), ";\n",
                        "use tokio::time::Instant;\n\n",
                        "# #[tokio::main(flavor = \"current_thread\", start_paused = true)]\n",
                        "# async fn main() -> Result<(), Box<dyn std::error::Error>> {\n",
                        "let limiter = ", $example, "?;\n",
                        "limiter.try_acquire(2)?;\n",
                        "tokio::time::advance(Duration::from_millis(250)).await;\n",
                        "let start = Instant::now();\n",
                        "limiter.acquire(1).await?; // until a permit stops counting\n",
                        "assert_eq!(start.elapsed(), ", $full_after, ");\n",
                        "# Ok(())\n",
                        "# }\n",
                        "```",
                    )]
            pub fn acquire(
                &self,
                permits: u64,
            ) -> impl std::future::Future<Output = Result<(), $crate::error::AcquireError>> + Send + '_
            {
                self.sliding.acquire(permits)
            }

            #[doc = concat!(
                        "Gives `permits` back for work that did not happen, and lets the head ",
                        "of the line try again at once: the newest `permits` that still count ",
                        "stop counting, whoever acquired them (permits that stopped counting are ",
                        "not given back), so the limiter never admits more than its limit ",
                        "because of a refund. So refund soon after the `acquire` it undoes: if ",
                        "others acquired since, their newer permits stop counting instead, and ",
                        "the refunded ones count until they leave.\n\n",
                        "```\n",
                        "use std::time::Duration;\n",
                        "use token_bucket::", stringify!($limiter), ";\n\n",
                        "let limiter = ", $example, "?;\n",
                        "limiter.try_acquire(2)?;\n",
                        "limiter.refund(1);\n",
                        "assert_eq!(limiter.available(), 1);\n",
                        "limiter.refund(5); // only the 1 still counted comes back\n",
                        "assert_eq!(limiter.available(), 2);\n",
                        "# Ok::<(), Box<dyn std::error::Error>>(())\n",
                        "```",
                    )]
            pub fn refund(&self, permits: u64) {
                self.sliding.refund(permits);
            }

            #[doc = concat!(
                        "How many permits `try_acquire` could take now if nobody waited: the ",
                        "limit less the permits that count now.\n\n",
                        "```\n",
                        "use std::time::Duration;\n",
                        "use token_bucket::", stringify!($limiter), ";\n\n",
                        "let limiter = ", $example, "?;\n",
                        "limiter.try_acquire(1)?;\n",
                        "assert_eq!(limiter.available(), 1);\n",
                        "# Ok::<(), Box<dyn std::error::Error>>(())\n",
                        "```",
                    )]
            pub fn available(&self) -> u64 {
                self.sliding.available()
            }

            #[doc = concat!(
                        "This limiter, reporting under `name` (see [`observe`](crate::observe)): ",
                        "the `limiter` label of its metrics (feature `metrics`, with the label ",
                        "`kind` = `", $kind_label, "`) and the `limiter` field of its events ",
                        "(feature `tracing`). A limiter without a name reports nothing. Any ",
                        "string is a name, the empty one included. Names are labels, so keep ",
                        "them few: one per limit in the program, never one per user or key (a ",
                        "`Keyed`'s keys are never named, and ",
                        "[`fresh`](crate::limiter::KeyTemplate::fresh) limiters are unnamed).\n\n",
                        "It reports the permits `try_acquire` admits and the requests it ",
                        "refuses (a `debug` event with the `retry_after`), the permits ",
                        "`acquire` admits on its first poll, and the requests that waited, with ",
                        "the time they waited (a histogram) and a `debug` span around each ",
                        "wait. A composite (`all`) admitting a request over it counts the ",
                        "permits as admitted here. ",
                        "[`record_gauges`](crate::observe::record_gauges) sets its gauges: the ",
                        "permits that would fit now, and the requests waiting in line. It has ",
                        "no close: nothing is reported for one.\n\n",
                        "The name lives on this handle and on the clones made from it ",
                        "afterwards; clones made before are not named, nor are the composites ",
                        "built over them. So name it as it is made. Its metrics are registered ",
                        "now, with the recorder installed now. Naming it again gives the handle ",
                        "the new name; the gauges of the old one are set too, by ",
                        "[`record_gauges`](crate::observe::record_gauges), while the limiter ",
                        "lives.\n\n",
                        "```\n",
                        "use std::time::Duration;\n",
                        "use token_bucket::{KeyTemplate, ", stringify!($limiter), "};\n\n",
                        "let limiter = ", $example, "?.named(\"upstream\");\n",
                        "assert_eq!(limiter.name(), Some(\"upstream\"));\n",
                        "assert_eq!(limiter.clone().name(), Some(\"upstream\"));\n",
                        "assert_eq!(limiter.fresh().name(), None);\n",
                        "# Ok::<(), token_bucket::ConfigError>(())\n",
                        "```",
                    )]
            pub fn named(self, name: impl Into<String>) -> $limiter {
                let name: String = name.into();
                $limiter {
                    sliding: self
                        .sliding
                        .named($crate::observe::Kind::$kind, &name),
                }
            }

            #[doc = concat!(
                        "The name it reports under, if [`named`](", stringify!($limiter),
                        "::named) gave this handle one.\n\n",
                        "```\n",
                        "# use std::time::Duration;\n",
                        "# use token_bucket::", stringify!($limiter), ";\n",
                        "let limiter = ", $example, "?;\n",
                        "assert_eq!(limiter.name(), None);\n",
                        "assert_eq!(limiter.named(\"search\").name(), Some(\"search\"));\n",
                        "# Ok::<(), token_bucket::ConfigError>(())\n",
                        "```",
                    )]
            pub fn name(&self) -> Option<&str> {
                self.sliding.name()
            }

            #[doc = concat!(
                        "The most permits admitted in any interval of length [`window`](",
                        stringify!($limiter), "::window).\n\n",
                        "```\n",
                        "# use std::time::Duration;\n",
                        "# use token_bucket::", stringify!($limiter), ";\n",
                        "let limiter = ", $example, "?;\n",
                        "assert_eq!(limiter.limit(), 2);\n",
                        "# Ok::<(), token_bucket::ConfigError>(())\n",
                        "```",
                    )]
            pub fn limit(&self) -> u64 {
                self.sliding.settings().limit
            }

            #[doc = concat!(
                        "The length of the intervals the [`limit`](", stringify!($limiter),
                        "::limit) applies to.\n\n",
                        "```\n",
                        "# use std::time::Duration;\n",
                        "# use token_bucket::", stringify!($limiter), ";\n",
                        "let limiter = ", $example, "?;\n",
                        "assert_eq!(limiter.window(), Duration::from_secs(1));\n",
                        "# Ok::<(), token_bucket::ConfigError>(())\n",
                        "```",
                    )]
            pub fn window(&self) -> std::time::Duration {
                self.sliding.settings().window
            }

            #[doc = concat!(
                        "Permits asked for by the [`acquire`](", stringify!($limiter),
                        "::acquire) calls waiting in line now (`u64::MAX` if they add up to ",
                        "more).\n\n",
                        "```\n",
                        "use std::time::Duration;\n",
                        "use token_bucket::", stringify!($limiter), ";\n\n",
                        "# #[tokio::main(flavor = \"current_thread\", start_paused = true)]\n",
                        "# async fn main() -> Result<(), Box<dyn std::error::Error>> {\n",
                        "let limiter = ", $example, "?;\n",
                        "limiter.try_acquire(2)?;\n",
                        "let waiter = tokio::spawn({\n",
                        "    let limiter = limiter.clone();\n",
                        "    async move { limiter.acquire(2).await }\n",
                        "});\n",
                        "tokio::task::yield_now().await;\n",
                        "assert_eq!(limiter.queued_permits(), 2);\n",
                        "waiter.await??;\n",
                        "assert_eq!(limiter.queued_permits(), 0);\n",
                        "# Ok(())\n",
                        "# }\n",
                        "```",
                    )]
            pub fn queued_permits(&self) -> u64 {
                self.sliding.queued_permits()
            }

            /// The limiter as a composite sees it (see `hooks.rs`).
            pub(crate) fn as_window(&self) -> &dyn $crate::window::Window {
                &self.sliding
            }
        }

        impl $crate::limiter::Limiter for $limiter {
            fn try_acquire(&self, permits: u64) -> Result<(), $crate::error::TryAcquireError> {
                $limiter::try_acquire(self, permits)
            }

            fn acquire(
                &self,
                permits: u64,
            ) -> impl std::future::Future<Output = Result<(), $crate::error::AcquireError>> + Send + '_
            {
                $limiter::acquire(self, permits)
            }

            fn is_limited(&self) -> bool {
                self.sliding.is_limited()
            }

            fn refund(&self, permits: u64) {
                $limiter::refund(self, permits);
            }

            fn available(&self) -> u64 {
                $limiter::available(self)
            }

            #[doc = concat!(
                        "`limit` per `window`.\n\n",
                        "```\n",
                        "use std::time::Duration;\n",
                        "use token_bucket::{Limiter, Policy, ", stringify!($limiter), "};\n\n",
                        "let limiter = ", $example, "?;\n",
                        "assert_eq!(limiter.policy(), Some(Policy { limit: 2, window: Duration::from_secs(1) }));\n",
                        "# Ok::<(), token_bucket::ConfigError>(())\n",
                        "```",
                    )]
            fn policy(&self) -> Option<$crate::quota::Policy> {
                Some(self.sliding.policy())
            }

            #[doc = concat!(
                        "The permits left now, and the time until the newest permit counted ",
                        "stops counting (", $counts, "), zero when none counts. The same ",
                        "numbers as [`try_acquire_decision(0)`](crate::limiter::Limiter::try_acquire_decision) ",
                        "shows; it counts nothing.\n\n",
                        "While others wait in line, `remaining` is still what would fit if nobody ",
                        "waited (`try_acquire` takes nothing meanwhile), and `full_after` counts ",
                        "the line as served: it is the time until the permits of its last waiter ",
                        "stop counting, each waiter admitted at the instant the line will admit ",
                        "it. A waiter that leaves early only makes it sooner.\n\n",
                        "```\n",
                        "use std::time::Duration;\n",
                        "use token_bucket::{Limiter, Quota, ", stringify!($limiter), "};\n\n",
                        "# #[tokio::main(flavor = \"current_thread\", start_paused = true)]\n",
                        "# async fn main() -> Result<(), Box<dyn std::error::Error>> {\n",
                        "let limiter = ", $example, "?;\n",
                        "limiter.try_acquire(1)?;\n",
                        "tokio::time::advance(Duration::from_millis(250)).await;\n",
                        "assert_eq!(\n",
                        "    limiter.quota(),\n",
                        "    Some(Quota { remaining: 1, full_after: ", $full_after, " })\n",
                        ");\n",
                        "# Ok(())\n",
                        "# }\n",
                        "```",
                    )]
            fn quota(&self) -> Option<$crate::quota::Quota> {
                Some(self.sliding.quota())
            }

            /// `try_acquire`, and the quota it leaves (see
            /// [`quota`](crate::Limiter::quota)), in one step: in the lock section
            /// it was decided in, after counting the permits when it admitted them.
            fn try_acquire_decision(&self, permits: u64) -> $crate::quota::Decision {
                self.sliding.try_acquire_decision(permits)
            }
        }

        impl $crate::limiter::KeyTemplate for $limiter {
            fn is_idle(&self) -> bool {
                self.sliding.is_idle()
            }

            fn fresh(&self) -> $limiter {
                $limiter {
                    sliding: self.sliding.fresh(),
                }
            }

            fn is_shared(&self) -> bool {
                self.sliding.is_shared()
            }
        }

        impl std::fmt::Debug for $limiter {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.sliding.debug(stringify!($limiter), f)
            }
        }
    };
}

pub(crate) use impl_limiter;
