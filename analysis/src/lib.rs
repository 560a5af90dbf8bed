//! Pure analytics over rank timelines (no I/O, no clock). Filled in by the analytics issue.
