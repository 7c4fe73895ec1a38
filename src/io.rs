//! Throttling tokio byte I/O: one token per byte (feature `io`).
