//! The studies called from Rust, without the binary.

use serverbench_sim::{Deployment, RunConfig};
use serverbench_study::{freeze_slo, screen, sweep, what_if, Study, KNOBS};
use serverbench_workloads::Workload;

fn study() -> Study {
    let d = Deployment::preset("qwen3-8b-1xh200").unwrap();
    let w = Workload::builtin(d.workload.as_deref());
    Study::new(d, w, RunConfig::new(1, 0, 240.0))
}

#[test]
fn a_sweep_is_the_same_on_one_thread_and_on_several() {
    let mut one = study();
    one.threads = Some(1);
    let mut four = study();
    four.threads = Some(4);
    let a = sweep(&one, &[1, 8], &[0, 1, 2], &[120.0, 240.0], &|| {}).unwrap();
    let b = sweep(&four, &[1, 8], &[0, 1, 2], &[120.0, 240.0], &|| {}).unwrap();
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    // Each level's mean is the mean of its cells, and the best level is one of them.
    for l in &a.levels {
        let ds: Vec<f64> = a
            .cells
            .iter()
            .filter(|c| c.concurrency == l.concurrency)
            .map(|c| c.d)
            .collect();
        assert_eq!(ds.len(), 3);
        approx::assert_relative_eq!(l.d.mean, ds.iter().sum::<f64>() / 3.0);
        assert_eq!(l.windows.len(), 2);
        approx::assert_relative_eq!(l.windows[1].ratio_to_longest, 1.0);
    }
    assert!(a.levels.iter().any(|l| l.concurrency == a.best_mean));
    assert!(
        sweep(&one, &[], &[0], &[], &|| {}).is_err(),
        "nothing to run"
    );
}

#[test]
fn a_cell_is_the_run_it_stands_for() {
    let s = study();
    let r = sweep(&s, &[4], &[3], &[], &|| {}).unwrap();
    let direct = s.run(&s.config(4, 3)).unwrap().summary;
    assert_eq!(r.cells[0].d, direct.score.d);
    assert_eq!(r.cells[0].requests, direct.requests);
}

#[test]
fn screening_ranks_hardest_first_and_freezing_takes_the_worst_seed() {
    let s = study();
    let seeds: Vec<u64> = (0..6).collect();
    let r = screen(&s, 4, &seeds, &|| {}).unwrap();
    assert!(r.seeds.windows(2).all(|w| w[0].d <= w[1].d));
    assert_eq!(
        r.seeds.iter().map(|x| x.rank).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5, 6]
    );
    assert_eq!(r.hardest[0], r.seeds[0].seed);
    let (rows, slo) = freeze_slo(&s, 1, &seeds, &|| {}).unwrap();
    assert_eq!(rows.len(), 6);
    assert_eq!(
        slo.ttft_s,
        rows.iter().map(|r| r.ttft_s).fold(0.0, f64::max)
    );
    assert!(rows.iter().all(|r| r.tpot_s <= slo.tpot_s));
}

#[test]
fn what_if_rows_are_the_deployment_with_one_knob_changed() {
    let s = study();
    let knobs = [
        KNOBS[0],
        ("max_num_seqs: 2", "engine: {max_num_seqs: 2}"),
        ("broken", "tp: 0"),
    ];
    let r = what_if(&s, &knobs, &[8, 16], &[0], &|| {}).unwrap();
    assert_eq!((r.rows.len(), r.concurrency.clone()), (6, vec![8, 16]));
    // Knob by knob, each knob's rows level by level.
    let labels: Vec<(&str, Vec<u32>)> = r
        .knobs()
        .map(|k| (k[0].knob, k.iter().map(|x| x.concurrency).collect()))
        .collect();
    let levels = vec![8, 16];
    assert_eq!(
        labels,
        vec![
            (knobs[0].0, levels.clone()),
            (knobs[1].0, levels.clone()),
            (knobs[2].0, levels)
        ]
    );
    let rows: Vec<&serverbench_study::KnobRow> = r.rows.iter().step_by(2).collect();
    let direct = s.run(&s.config(8, 0)).unwrap().summary.score;
    assert_eq!(
        rows[0].d.mean, direct.d,
        "the default row is the deployment as it is"
    );
    assert!(rows[1].error.is_none() && rows[1].d.mean != direct.d);
    let e = rows[2].error.as_deref().unwrap();
    assert!(e.contains("tp"), "{e}");
}
