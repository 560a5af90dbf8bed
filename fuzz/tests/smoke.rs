//! `make test`'s short run of every fuzz target (2,000 inputs each; `make
//! fuzz` runs 1,000,000): no panic, hang or runaway memory.

use std::time::Duration;

use rankscope_fuzz::{fuzz, targets, Options};

#[test]
fn every_target_survives_a_short_run() {
    let opts = Options {
        inputs: 2_000,
        // Debug builds are slower; the bound still catches a hang.
        time_limit: Duration::from_secs(10),
        artifacts: std::env::temp_dir().join("rankscope-fuzz-smoke"),
        ..Options::default()
    };
    for t in targets() {
        let r = fuzz(&t, &opts).unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(r.inputs, 2_000);
        assert!(r.outcomes.contains_key("ok") || t.name == "query" || t.name == "config");
    }
}
