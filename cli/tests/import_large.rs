//! Bounded memory: a synthetic trace of more than 50 MB imports in chunks
//! with a small ordering buffer (several passes), never holding more than
//! the configured number of records, and the output does not depend on the
//! buffer size.

mod import_common;

use import_common::{check_invariants, import_checked, segments, write_synthetic, Synth};
use rankscope_cli::import::ImportOptions;
use rankscope_proto::v1 as proto;

use proto::event::Kind;

#[test]
fn fifty_megabytes_in_bounded_chunks_and_buffers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("large.json");
    let synth = Synth {
        steps: 10,
        kernels_per_step: 2_000,
        filler_per_step: 2_000,
        filler_bytes: 2_400,
        warm_up: 50,
        events_first: false,
        no_dist: false,
    };
    write_synthetic(&path, &synth);
    let size = std::fs::metadata(&path).expect("meta").len();
    assert!(size > 50_000_000, "{size} bytes");

    let mut opts = ImportOptions::new("large");
    opts.chunk_events = 1_000;
    opts.max_buffered_events = 8_000;
    let s = import_checked(&path, &opts);
    check_invariants(&s);

    // 20k kernels + 50 warm-up; 200 collectives; 10 forward spans.
    let st = &s.stats;
    assert_eq!(st.events_by_kind.kernel, 20_050);
    assert_eq!(st.events_by_kind.collective, 200);
    assert_eq!(st.events_by_kind.span, 10);
    assert_eq!(st.events_by_kind.step_begin, 10);
    // The buffer bound held, so it took several passes.
    assert!(
        st.max_buffered_events <= 8_000,
        "{}",
        st.max_buffered_events
    );
    assert!(st.passes >= 4, "passes {}", st.passes);
    assert!(s.chunk_sizes.iter().all(|&n| n <= 1_000));
    assert_eq!(s.chunk_sizes.len() as u64, st.chunks);
    assert!(st.chunks >= 20);
    assert_eq!(st.json_bytes, size);
    assert_eq!(st.bytes_read, size * u64::from(st.passes));

    // Warm-up kernels first (before step 100), then 2000 GPU events and 20
    // collectives + 1 span per step.
    let segs = segments(&s);
    assert_eq!(segs[0].0, None);
    assert_eq!(segs[0].1.len(), 50);
    let in_steps: Vec<_> = segs.iter().filter(|(st, _)| st.is_some()).collect();
    assert_eq!(in_steps.len(), 10);
    for (i, (step, evs)) in in_steps.iter().enumerate() {
        assert_eq!(*step, Some(100 + i as u64));
        let k = evs
            .iter()
            .filter(|e| matches!(e.kind, Some(Kind::Kernel(_))))
            .count();
        assert_eq!((k, evs.len()), (2_000, 2_021));
    }
}

#[test]
fn output_does_not_depend_on_the_buffer_size_or_key_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let synth = Synth {
        steps: 4,
        kernels_per_step: 300,
        filler_per_step: 10,
        filler_bytes: 10,
        warm_up: 5,
        events_first: false,
        no_dist: false,
    };
    let normal = dir.path().join("normal.json");
    write_synthetic(&normal, &synth);
    let reordered = dir.path().join("events_first.json");
    write_synthetic(
        &reordered,
        &Synth {
            events_first: true,
            ..synth.clone()
        },
    );
    let mut opts = ImportOptions::new("same");
    opts.chunk_events = 97;
    let one_pass = import_checked(&normal, &opts);
    assert_eq!(
        one_pass.stats.passes, 1,
        "the scan kept every event: no second read"
    );
    opts.max_buffered_events = 50;
    let many = import_checked(&normal, &opts);
    assert!(many.stats.passes > 10, "{}", many.stats.passes);
    assert!(many.stats.max_buffered_events <= 50);
    let late_dist = import_checked(&reordered, &opts);
    for other in [&many, &late_dist] {
        assert_eq!(other.events, one_pass.events);
        assert_eq!(other.names, one_pass.names);
        assert_eq!(other.chunk_sizes, one_pass.chunk_sizes);
        assert_eq!(other.identity, {
            let mut id = one_pass.identity.clone();
            id.labels.insert(
                "trace_file".into(),
                other.identity.labels["trace_file"].clone(),
            );
            id
        });
    }
    assert_eq!(one_pass.identity.rank, 3);
    assert_eq!(one_pass.identity.world_size, 4);
    check_invariants(&many);
}
