use super::*;

fn row(step: u64, rank: u32, ms: u64) -> StepRow {
    let start_ns = 1_700_000_000_000_000_000 + step * 1_000_000_000;
    StepRow {
        step,
        rank,
        node: format!("n{}", rank / 8),
        start_ns,
        end_ns: start_ns + ms * 1_000_000,
        step_time_ns: ms * 1_000_000,
    }
}

fn job() -> JobInfo {
    JobInfo {
        job: "sim-1".into(),
        run_id: String::new(),
        world_size: 8,
        ranks_seen: 8,
        nodes: 1,
        first_seen_ns: 1_700_000_000_123_456_789,
        last_seen_ns: 1_700_000_060_000_000_000,
        last_step: Some(49),
        warnings: Vec::new(),
    }
}

fn wait(step: u64, rank: u32, work_ms: u64, wait_ms: u64) -> StepWait {
    StepWait {
        step,
        rank,
        work_ns: work_ms * 1_000_000,
        wait_ns: wait_ms * 1_000_000,
    }
}

#[test]
fn steps_table_names_the_rank_the_others_waited_for() {
    // A synchronous job: every rank's step takes 130 ms because rank 2
    // computes 120 ms while the others compute 90 and wait 30.
    let rows = vec![
        row(0, 0, 130),
        row(0, 1, 130),
        row(0, 2, 130),
        row(1, 0, 131),
        row(1, 1, 130),
        row(1, 2, 130),
    ];
    let waits = vec![
        wait(0, 0, 90, 30),
        wait(0, 1, 91, 29),
        wait(0, 2, 120, 0),
        wait(1, 0, 90, 31),
        wait(1, 1, 90, 30),
        wait(1, 2, 120, 1),
    ];
    let expected = "\
step    r0_ms    r1_ms    r2_ms  median_ms  max/median  waited_for  its_work/median  others_wait_ms
   0  130.000  130.000  130.000    130.000       1.000          r2            1.319          30.000
   1  131.000  130.000  130.000    130.000       1.008          r2            1.333          31.000
the others waited for r2 in 2 of 2 steps (its compute + input 1.33x the median; the others' median wait 30.500 ms per step)
";
    assert_eq!(steps_table_with(&rows, &waits), expected);
}

#[test]
fn steps_table_without_breakdowns_names_nobody_and_marks_missing_ranks() {
    let rows = vec![row(3, 0, 10), row(3, 1, 10), row(4, 1, 12)];
    let expected = "\
step   r0_ms   r1_ms  median_ms  max/median  waited_for  its_work/median  others_wait_ms
   3  10.000  10.000     10.000       1.000           -                -               -
   4       -  12.000     12.000       1.000           -                -               -
(no breakdowns for these steps yet: the rank the others wait for is named once the steps are analysed)
";
    assert_eq!(steps_table(&rows), expected);
}

#[test]
fn steps_table_summarises_wide_jobs() {
    let rows: Vec<StepRow> = (0..32).map(|r| row(7, r, 150)).collect();
    let waits: Vec<StepWait> = (0..32)
        .map(|r| {
            if r == 20 {
                wait(7, r, 140, 0)
            } else {
                wait(7, r, 100, 40)
            }
        })
        .collect();
    let expected = "\
step  ranks   min_ms  median_ms   max_ms  max/median  waited_for  its_work/median  others_wait_ms
   7     32  150.000    150.000  150.000       1.000         r20            1.400          40.000
the others waited for r20 in 1 of 1 steps (its compute + input 1.40x the median; the others' median wait 40.000 ms per step)
";
    assert_eq!(steps_table_with(&rows, &waits), expected);
}

#[test]
fn empty_results_say_so() {
    assert_eq!(steps_table(&[]), "(no steps)\n");
    assert_eq!(jobs_table(&[]), "(no jobs)\n");
    assert_eq!(render_steps(&[], OutputFormat::Json), "[]\n");
    assert_eq!(
        render_steps(&[], OutputFormat::Csv),
        "step,rank,node,start_ns,end_ns,step_time_ns\n"
    );
}

#[test]
fn steps_json_and_csv_pass_rows_through() {
    let rows = vec![row(0, 0, 100), row(0, 1, 130)];
    let json: serde_json::Value =
        serde_json::from_str(&render_steps(&rows, OutputFormat::Json)).unwrap();
    let first = &json[0];
    assert_eq!(first["step"], 0);
    assert_eq!(first["rank"], 0);
    assert_eq!(first["node"], "n0");
    assert_eq!(first["start_ns"], 1_700_000_000_000_000_000_u64);
    assert_eq!(first["step_time_ns"], 100_000_000);
    assert_eq!(json.as_array().unwrap().len(), 2);
    let back: Vec<StepRow> = serde_json::from_value(json).unwrap();
    assert_eq!(back, rows);

    let csv = render_steps(&rows, OutputFormat::Csv);
    let expected = "\
step,rank,node,start_ns,end_ns,step_time_ns
0,0,n0,1700000000000000000,1700000000100000000,100000000
0,1,n0,1700000000000000000,1700000000130000000,130000000
";
    assert_eq!(csv, expected);
}

#[test]
fn jobs_table_json_and_csv() {
    let mut other = job();
    other.job = "a,\"b\"".into();
    other.run_id = "r1".into();
    other.last_step = None;
    other.warnings = vec!["world split".into()];
    let jobs = vec![job(), other];
    let expected = "\
job    run_id  world_size  ranks_seen  nodes  first_seen_utc           last_seen_utc            last_step
sim-1  -                8           8      1  2023-11-14 22:13:20.123  2023-11-14 22:14:20.000         49
a,\"b\"  r1               8           8      1  2023-11-14 22:13:20.123  2023-11-14 22:14:20.000          -
warning: job a,\"b\": world split
";
    assert_eq!(render_jobs(&jobs, OutputFormat::Table), expected);

    let csv = render_jobs(&jobs, OutputFormat::Csv);
    let expected = "\
job,run_id,world_size,ranks_seen,nodes,first_seen_ns,last_seen_ns,last_step,warnings
sim-1,,8,8,1,1700000000123456789,1700000060000000000,49,
\"a,\"\"b\"\"\",r1,8,8,1,1700000000123456789,1700000060000000000,,world split
";
    assert_eq!(csv, expected);

    let json: serde_json::Value =
        serde_json::from_str(&render_jobs(&jobs, OutputFormat::Json)).unwrap();
    assert_eq!(json[0]["last_step"], 49);
    assert!(json[1]["last_step"].is_null());
    assert_eq!(json[1]["job"], "a,\"b\"");
    assert_eq!(json[1]["warnings"][0], "world split");
    assert_eq!(json[0]["warnings"].as_array().map(Vec::len), Some(0));
}

#[test]
fn utc_formats_known_instants() {
    assert_eq!(utc(0), "1970-01-01 00:00:00.000");
    assert_eq!(utc(951_782_400_000_000_000), "2000-02-29 00:00:00.000");
    assert_eq!(utc(1_709_251_199_999_000_000), "2024-02-29 23:59:59.999");
}

#[test]
fn csv_field_quotes_only_when_needed() {
    assert_eq!(csv_field("plain"), "plain");
    assert_eq!(csv_field("a,b"), "\"a,b\"");
    assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    assert_eq!(csv_field("two\nlines"), "\"two\nlines\"");
}
