//! Throttling a `Stream`: each item costs tokens.
