//! PMU (filled in).
