//! Throttling what flows: adapters that pay a [`TokenBucket`](crate::TokenBucket) for
//! each item or byte before letting it through.
//!
//! - `stream.rs`: streams, one token an item or a price per item.
//! - `sink.rs`: sinks, one token an item sent.
//! - `io.rs`: tokio byte I/O, one token a byte (feature `io`).
//! - `service.rs`: a tower layer and service, one token a request (feature `tower`).
//! - `installment.rs`: the one rule for how much of a cost one `take` asks for, which
//!   streams and byte I/O share.
//!
//! They use only the bucket's public API (`take`, `refund`, `closed`, and the settings it
//! publishes), so each could live outside the crate. Each adapter is public at the crate's root
//! (`token_bucket::stream`, `token_bucket::sink`, `token_bucket::io`,
//! `token_bucket::service`).

mod installment;
#[cfg(feature = "io")]
pub mod io;
#[cfg(feature = "tower")]
pub mod service;
pub mod sink;
pub mod stream;
