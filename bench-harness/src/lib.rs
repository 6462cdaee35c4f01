//! how one thing is measured: warm-up, adaptive repetition, robust statistics, cold-cache rotation, pinning (being written).
