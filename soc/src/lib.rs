//! SoC description (filled in).
