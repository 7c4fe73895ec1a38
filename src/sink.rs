//! Throttling a `Sink`: each item sent costs tokens.
