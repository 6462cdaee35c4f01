//! PMU (filled in).

pub mod availability;
