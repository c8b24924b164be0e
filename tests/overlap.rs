//! The split fused pass on the sim (`fused-overlap`, `fused_save` / `fused_boundary` /
//! `fused_interior`): the bits of events under jitter in 1D and 2D with no hazard; the
//! pushes beside the interior on the timeline; each missing wait named by the checker, and
//! the one that lets the interior read stale margins shown by the fields; every misuse in a
//! file refused.

mod common;
use common::{assert_events_bits_under_jitter_and_no_hazard, builtin, fields_after, program, refused};

use haloscope::hazard::{self, Kind};
use haloscope::program::Mode;
use haloscope::runtime::sim::SimRuntime;
use haloscope::trace::TraceRecord;
use std::sync::{Arc, Mutex};

#[test]
fn fused_overlap_gives_the_bits_of_events_under_jitter_in_1d_and_2d_with_no_hazard() {
    let cases = [
        ("pulse", 2, 480),
        ("pulse", 3, 480),
        ("pulse", 7, 320),
        ("uneven", 4, 320),
        ("radiate", 3, 160),
    ];
    assert_events_bits_under_jitter_and_no_hazard(Mode::FusedOverlap, &cases);
}

#[test]
fn the_pushes_run_beside_the_interior_on_the_timeline() {
    // 2^21 cells a device (the lesson's grid): a round's GPU time outlasts the host's
    // calls, so from the third round on the host issues each push before the interior
    // it should run beside has ended.
    let mut s = builtin("pulse");
    s.cells = 1 << 22;
    let s = s.with_devices(2).unwrap();
    let mut rt = SimRuntime::new(&s, Mode::FusedOverlap.program(&s.ranges()), None).unwrap();
    let records: Arc<Mutex<Vec<TraceRecord>>> = Arc::default();
    let sink = records.clone();
    rt.scheduler.set_sink(
        Box::new(move |r: &TraceRecord| sink.lock().unwrap().push(r.clone())),
        96,
    );
    rt.run_until(96).unwrap();
    rt.scheduler.flush_sink_all();
    let all = records.lock().unwrap();
    let on = |d: usize, what: &str| -> Vec<&TraceRecord> {
        let mine = |r: &&TraceRecord| r.stream.is_some_and(|s| s.device == d);
        all.iter()
            .filter(mine)
            .filter(|r| r.label.starts_with(what))
            .collect()
    };
    for d in 0..2 {
        let (interiors, copies) = (on(d, "fused_interior"), on(d, "copy"));
        assert_eq!(interiors.len(), 6, "dev{d}: a round of 16 steps, 96 steps");
        assert_eq!(copies.len(), 12, "dev{d}: ex and hy each round");
        // Every push starts while that round's interior runs.
        for c in copies.iter().filter(|c| c.step >= Some(32)) {
            let i = interiors.iter().find(|i| i.step == c.step).unwrap();
            assert!(
                i.start_us < c.start_us && c.start_us < i.end_us,
                "dev{d} step {:?}: {c:?} outside {i:?}",
                c.step
            );
        }
    }
}

/// `fused-overlap` without the line that contains `line`.
fn without(line: &str) -> String {
    let src = Mode::FusedOverlap.source();
    assert_eq!(src.matches(line).count(), 1, "{line}");
    src.lines()
        .filter(|l| !l.contains(line))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn each_missing_wait_is_named_and_stale_margins_show_in_the_fields() {
    let s = builtin("pulse").with_devices(3).unwrap();
    let cases = [
        // The boundary may read the margins before the save writes them.
        (3, "cudaStreamWaitEvent(edge, saved[d]", Kind::Raw, "margins@dev"),
        // The save may rewrite the margins while last round's boundary reads them (with
        // neighbours the pushes order it too: they wait for the boundary).
        (
            1,
            "cudaStreamWaitEvent(compute, edges[d]",
            Kind::War,
            "margins@dev",
        ),
        // A push may land in the neighbour's halo before its boundary has read it.
        (
            3,
            "cudaStreamWaitEvent(to_left, edges[d - 1]",
            Kind::War,
            "ex@dev",
        ),
    ];
    for (n, line, kind, buffer) in cases {
        let s = s.clone().with_devices(n).unwrap();
        let p = program(&s, &without(line));
        let found = hazard::check_scenario(&s, &p).unwrap();
        assert!(
            found
                .iter()
                .any(|f| f.kind == kind && f.buffer.as_deref().is_some_and(|b| b.starts_with(buffer))),
            "without {line}: {found:#?}"
        );
    }
    // With no wait for the save, the boundary may run on its idle stream before the save:
    // the model's timing hides it (the host issues the save first and is slower than the
    // GPU on this grid), a jittered timing shows it in the fields.
    let p = program(&s, &without("cudaStreamWaitEvent(edge, saved[d]"));
    let want = fields_after(&s, Mode::FusedOverlap.program(&s.ranges()), 2000, None);
    assert!(fields_after(&s, p.clone(), 2000, None) == want, "hidden");
    assert!(fields_after(&s, p, 2000, Some(1)) != want, "shown");
}

#[test]
fn a_part_without_its_save_and_a_pass_of_no_steps_are_refused() {
    let dir = std::env::temp_dir().join(format!("haloscope-overlap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let head = "cudaStream_t s;\nround k;\nstep {\n";
    let cases = [
        (
            "    fused_boundary<<<s>>>(lo, hi, k);\n",
            "thread 0: fused_boundary<<<…>>>(0..500, 16) has no fused_save of the same cells and steps",
        ),
        (
            "    fused_save<<<s>>>(lo, hi, 8);\n    fused_interior<<<s>>>(lo, hi, k);\n",
            "fused_interior<<<…>>>(0..500, 16) has no fused_save",
        ),
        (
            "    fused_interior<<<s>>>(lo, hi, k);\n    fused_save<<<s>>>(lo, hi, k);\n",
            "has no fused_save of the same cells and steps on device 0 before it",
        ),
        (
            "    fused_steps<<<s>>>(lo, hi, 0);\n",
            "fused_steps: its third argument is 1 to 16, not 0",
        ),
        (
            "    fused_save<<<s>>>(lo, hi);\n",
            "bad.halo:4:5: fused_save takes (from, to, steps)",
        ),
    ];
    for (body, want) in cases {
        let got = refused(&dir, &format!("{head}{body}}}\n"));
        assert!(got.contains(want), "{body}: {got}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_program_view_names_the_cells_each_part_writes() {
    // The default grid: 2000 cells on 4 devices, k = 16; dev3's span ends at the grid's end.
    let s = builtin("pulse");
    let p = Mode::FusedOverlap.program(&s.ranges());
    let shown: Vec<String> = p.step[3].iter().map(|op| p.render(op)).collect();
    let line = |kernel: &str| shown.iter().find(|l| l.starts_with(kernel)).unwrap().clone();
    assert!(
        line("fused_boundary").ends_with("(cells 1484–2015, 16 steps: its tiles 1484–1515, 1968–1999)"),
        "{shown:#?}"
    );
    assert!(
        line("fused_interior").ends_with("(cells 1484–2015, 16 steps: its tiles 1516–1967)"),
        "{shown:#?}"
    );
    assert!(
        line("fused_save").ends_with("(cells 1484–2015, 16 steps)"),
        "{shown:#?}"
    );
    // A plane's parts are rows: radiate (240 rows) on 2 devices, dev0's span 0..136. The
    // cuts fall on tile rows (38): the interior is one tile, the boundaries 38 and 60 rows.
    let s = builtin("radiate");
    let p = Mode::FusedOverlap.program(&[0..120, 120..240]).on(&s);
    let shown: Vec<String> = p.step[0].iter().map(|op| p.render(op)).collect();
    let line = |kernel: &str| shown.iter().find(|l| l.starts_with(kernel)).unwrap().clone();
    assert!(
        line("fused_boundary").ends_with("(rows 0–135, 16 steps: its rows 0–37, 76–135)"),
        "{shown:#?}"
    );
    assert!(
        line("fused_interior").ends_with("(rows 0–135, 16 steps: its rows 38–75)"),
        "{shown:#?}"
    );
    let p2p = Mode::FusedP2p.program(&[0..120, 120..240]).on(&s);
    let store = p2p.step[0]
        .iter()
        .map(|op| p2p.render(op))
        .find(|l| l.starts_with("fused_store"));
    assert!(
        store
            .unwrap()
            .ends_with("16 steps: every row, the 16 end rows stored into the neighbours' halos)"),
        "{p2p:#?}"
    );
}
