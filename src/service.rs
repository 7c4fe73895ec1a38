//! A tower `Layer` and `Service` that rate-limit requests (feature `tower`).
