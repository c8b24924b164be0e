//! The hazard checker against the modes, and against the sim: a program it finds nothing
//! wrong with never diverges, and what it flags is what a deleted call used to order.

use haloscope::decomp::{Domain, Field};
use haloscope::geometry::Coefficients;
use haloscope::hazard::{self, Finding, Kind};
use haloscope::program::{Mode, Op, Program};
use haloscope::runtime::sim::SimRuntime;
use haloscope::scenario::{self, Scenario};

fn builtin(name: &str) -> Scenario {
    scenario::load(Some(name)).unwrap()
}

fn findings(s: &Scenario, mode: Mode) -> Vec<Finding> {
    hazard::check_scenario(s, &mode.program(&s.ranges())).unwrap()
}

/// `kind thread:call>thread:call buffer` of each finding, for comparing with a list.
fn summary(f: &[Finding]) -> Vec<String> {
    let mut v: Vec<String> = f
        .iter()
        .map(|f| {
            let second = f
                .second
                .as_ref()
                .map_or(String::new(), |s| format!(">{}:{}", s.thread, s.call));
            let buffer = f.buffer.clone().unwrap_or_default();
            format!(
                "{} {}:{}{second} {buffer}",
                f.kind.name(),
                f.first.thread,
                f.first.call
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn correct_modes_have_no_findings_on_2_3_4_8_devices_and_uneven_splits() {
    let base = builtin("pulse");
    let mut cases: Vec<Scenario> = [2, 3, 4, 8]
        .iter()
        .map(|&n| base.clone().with_devices(n).unwrap())
        .collect();
    cases.push(builtin("uneven"));
    // A plane, where a split pass's save also writes the fields (its passes but the last).
    cases.extend([2, 3].map(|n| builtin("radiate").with_devices(n).unwrap()));
    for s in &cases {
        for mode in Mode::all().iter().copied().filter(|m| m.is_correct()) {
            let f = findings(s, mode);
            assert!(
                f.is_empty(),
                "{} on {} devices:\n{}",
                mode.name(),
                s.split.len(),
                hazard::text(&f)
            );
        }
    }
}

/// A small grid with sources next to every device boundary: a missing order shows in the
/// fields within a few steps.
fn busy(devices: usize) -> Scenario {
    let cells = 24 * devices;
    let mut text = format!("[grid]\ncells = {cells}\ncourant = 1.0\n[devices]\ncount = {devices}\n");
    for d in 1..devices {
        for (p, period) in [(24 * d - 1, 5.0), (24 * d, 7.0)] {
            text += &format!("[[sources]]\nkind = \"sinusoid\"\nposition = {p}\nperiod = {period}\n");
        }
    }
    scenario::parse(&text, "busy").unwrap()
}

/// Whether `program` stays bit-identical to the reference for `steps` steps under every
/// one of `seeds` jitter seeds.
fn identical_under_jitter(s: &Scenario, program: &Program, steps: u64, seeds: u64) -> bool {
    let c = Coefficients::new(s).unwrap();
    let mut d = Domain::reference(s, &c).unwrap();
    for n in 0..steps {
        d.step(n);
    }
    let (ex, hy) = (d.gather(Field::E).unwrap(), d.gather(Field::H).unwrap());
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    (0..seeds).all(|seed| {
        let mut rt = SimRuntime::new(s, program.clone(), Some(seed)).unwrap();
        match rt.run_until(steps) {
            Ok(()) => {
                let haloscope::decomp::Gathered { e, h } = rt.fields().unwrap();
                bits(&e) == bits(&ex) && bits(&h) == bits(&hy)
            }
            Err(_) => false,
        }
    })
}

/// The calls a deletion can take away: waits, records, synchronisations (one thread's
/// call) and host barriers (the collective: the `k`-th of every thread).
enum Deletion {
    Call(usize, usize),
    Barrier(usize),
}

fn deletions(p: &Program) -> Vec<Deletion> {
    let mut out = Vec::new();
    for (t, ops) in p.step.iter().enumerate() {
        for (i, op) in ops.iter().enumerate() {
            if matches!(
                op,
                Op::Wait { .. } | Op::Record { .. } | Op::StreamSync { .. } | Op::DeviceSync { .. }
            ) {
                out.push(Deletion::Call(t, i));
            }
        }
    }
    let barriers = p.step[0]
        .iter()
        .filter(|op| matches!(op, Op::HostBarrier))
        .count();
    out.extend((0..barriers).map(Deletion::Barrier));
    out
}

fn apply(p: &Program, d: &Deletion) -> (Program, Vec<(usize, usize)>) {
    let mut q = p.clone();
    let mut removed = Vec::new();
    match *d {
        Deletion::Call(t, i) => {
            q.step[t].remove(i);
            removed.push((t, i));
        }
        Deletion::Barrier(k) => {
            for (t, ops) in q.step.iter_mut().enumerate() {
                let i = ops
                    .iter()
                    .enumerate()
                    .filter(|(_, op)| matches!(op, Op::HostBarrier))
                    .nth(k)
                    .map(|(i, _)| i)
                    .unwrap();
                ops.remove(i);
                removed.push((t, i));
            }
        }
    }
    (q, removed)
}

/// A call of the mutated program as the call it was in the original.
fn original(call: usize, thread: usize, removed: &[(usize, usize)]) -> usize {
    match removed.iter().find(|(t, _)| *t == thread) {
        Some(&(_, i)) if call >= i => call + 1,
        _ => call,
    }
}

#[test]
fn every_single_deletion_is_flagged_at_what_it_ordered_or_proven_harmless_by_the_sim() {
    let (mut total, mut flagged, mut harmless) = (0, 0, 0);
    let mut report = Vec::new();
    for mode in Mode::all().iter().copied().filter(|m| m.is_correct()) {
        let s = busy(3);
        let p = mode.program(&s.ranges());
        let states = haloscope::decomp::DeviceState::shapes(&s);
        for d in deletions(&p) {
            total += 1;
            let (q, removed) = apply(&p, &d);
            let f = hazard::check(&q, &states);
            if f.is_empty() {
                harmless += 1;
                let steps = 6 * p.steps_per_round.max(16);
                assert!(
                    identical_under_jitter(&s, &q, steps, 30),
                    "{}: a deletion the checker calls harmless diverges on the sim: {:?}",
                    mode.name(),
                    removed
                );
                continue;
            }
            flagged += 1;
            // One finding involves a call the deleted one ordered: in the original program
            // the deleted call lies between the finding's two calls.
            let involved = f.iter().any(|x| {
                let Some(second) = &x.second else {
                    return x.kind == Kind::Invalid;
                };
                let a = (x.first.thread, original(x.first.call, x.first.thread, &removed));
                let b = (second.thread, original(second.call, second.thread, &removed));
                removed.iter().any(|&del| {
                    hazard::orders(&p, &states, a, del, b) || hazard::orders(&p, &states, b, del, a)
                })
            });
            assert!(
                involved,
                "{}: deleting {:?} is flagged, but at calls it did not order:\n{}",
                mode.name(),
                removed,
                hazard::text(&f)
            );
        }
        report.push(format!("{} ", mode.name()));
    }
    eprintln!("mutations: {total} deletions, {flagged} flagged, {harmless} proven harmless by the sim");
    assert!(total >= 40 && flagged > 0 && flagged + harmless == total);
}

#[test]
fn each_broken_mode_has_exactly_the_findings_its_lesson_describes() {
    // One finding per kind, buffer and pair of calls (`kind thread:call>thread:call`), on 3
    // devices; follow-on conflicts of a wrong call are listed, not folded into it.
    let s = builtin("pulse").with_devices(3).unwrap();
    let expect: [(Mode, &[&str]); 5] = [
        // The copies wait for nothing: each reads its source before the producer's kernel
        // may have written it (RAW), and may write a halo the consumer still reads (WAR) or
        // read a source the producer's next kernel overwrites (WAR).
        (
            Mode::NoWait,
            &[
                "RAW 0:0>1:2 hy@dev0",
                "RAW 1:0>2:2 hy@dev1",
                "RAW 1:5>0:5 ex@dev1",
                "RAW 2:5>1:8 ex@dev2",
                "WAR 0:0>0:5 ex@dev0",
                "WAR 0:5>1:5 ex@dev1",
                "WAR 1:0>1:8 ex@dev1",
                "WAR 1:2>0:0 hy@dev0",
                "WAR 1:5>1:2 hy@dev1",
                "WAR 1:8>2:5 ex@dev2",
                "WAR 2:2>1:0 hy@dev1",
                "WAR 2:5>2:2 hy@dev2",
            ],
        ),
        // Each wait is issued before its record: which record it binds to is the host's
        // timing (BINDING), and the copies it should order are not ordered.
        (
            Mode::WaitBeforeRecord,
            &[
                "BINDING 0:1>1:0 ",
                "BINDING 1:2>2:0 ",
                "BINDING 1:9>0:2 ",
                "BINDING 2:7>1:6 ",
                "RAW 0:0>1:3 hy@dev0",
                "RAW 1:1>2:2 hy@dev1",
                "RAW 1:7>0:5 ex@dev1",
                "RAW 2:5>1:10 ex@dev2",
                "WAR 0:0>0:5 ex@dev0",
                // A copy of one step against the producer's next step (no barrier keeps
                // the producer from running ahead): the earlier step's copy first.
                "WAR 0:5>1:7 ex@dev1",
                "WAR 1:10>2:5 ex@dev2",
                "WAR 1:1>1:10 ex@dev1",
                "WAR 1:3>0:0 hy@dev0",
                "WAR 1:7>1:3 hy@dev1",
                "WAR 2:2>1:1 hy@dev1",
                "WAR 2:5>2:2 hy@dev2",
            ],
        ),
        // Records on a stream of another device fail (INVALID); the waits on those events
        // then order nothing (INVALID), nor the copies after them.
        (
            Mode::CrossDeviceRecord,
            &[
                "INVALID 0:1 ",
                "INVALID 0:6 ",
                "INVALID 1:1 ",
                "INVALID 1:3 ",
                "INVALID 1:7 ",
                "INVALID 1:9 ",
                "INVALID 2:2 ",
                "INVALID 2:6 ",
                "RAW 0:0>1:4 hy@dev0",
                "RAW 1:0>2:3 hy@dev1",
                "RAW 1:5>0:7 ex@dev1",
                "RAW 2:4>1:10 ex@dev2",
                "WAR 0:7>1:5 ex@dev1",
                "WAR 1:10>2:4 ex@dev2",
                "WAR 1:4>0:0 hy@dev0",
                "WAR 2:3>1:0 hy@dev1",
            ],
        ),
        // Receives posted before the sends they wait for, outside groups: a circle of
        // waits, named at an NCCL call of each of two threads on it; nothing else.
        (Mode::NcclMismatch, &["INVALID 0:0>1:0 "]),
        // The pushes follow their producers but precede nothing on the consumer: its
        // kernel may read the halo before the push lands (RAW), and the next push may
        // overwrite it while it still reads it (WAR).
        (
            Mode::HaloOverwrite,
            &[
                "RAW 0:1>1:3 hy@dev1",
                "RAW 1:1>2:2 hy@dev2",
                "RAW 1:5>0:0 ex@dev0",
                "RAW 2:4>1:0 ex@dev1",
                "WAR 0:0>1:5 ex@dev0",
                "WAR 1:0>2:4 ex@dev1",
                "WAR 1:3>0:1 hy@dev1",
                "WAR 2:2>1:1 hy@dev2",
            ],
        ),
    ];
    for (mode, list) in expect {
        assert_eq!(summary(&findings(&s, mode)), list, "{}", mode.name());
    }
    // write-after-read: nothing but WARs — a kernel of the next round that rewrites cells
    // a neighbour's pull of this round reads, one finding each.
    let f = findings(&s, Mode::WriteAfterRead);
    assert!(f.iter().all(|x| x.kind == Kind::War), "{}", hazard::text(&f));
    assert_eq!(f.len(), 16 * 2 * 2 * 2);
    // Every broken mode is covered.
    let broken = Mode::all().iter().copied().filter(|m| !m.is_correct()).count();
    assert_eq!(broken, expect.len() + 1);
}

#[test]
fn a_race_the_sim_never_shows_on_the_default_scenario_is_flagged() {
    // events without thread 1's wait for h_ready[0]: its copy of dev0's Hy is no longer
    // ordered after dev0's update_h. On the sim the kernel always finishes first: 10,000
    // steps stay bit-identical. The program is wrong all the same.
    let s = builtin("pulse");
    let mut p = Mode::Events.program(&s.ranges());
    assert!(
        matches!(p.step[1][3], Op::Wait { .. }),
        "{}",
        p.render(&p.step[1][3])
    );
    p.step[1].remove(3);
    let f = hazard::check_scenario(&s, &p).unwrap();
    assert_eq!(summary(&f), ["RAW 0:0>1:3 hy@dev0", "WAR 0:7>1:4 ex@dev1"]);
    assert!(
        f[0].fix
            .contains("record an event on compute@dev0 after thread 0's update_h 0–499 (call 0)"),
        "{}",
        f[0].fix
    );

    let c = Coefficients::new(&s).unwrap();
    let mut d = Domain::reference(&s, &c).unwrap();
    let steps = 10_000;
    for n in 0..steps {
        d.step(n);
    }
    let mut rt = SimRuntime::new(&s, p, None).unwrap();
    rt.run_until(steps).unwrap();
    let haloscope::decomp::Gathered { e: ex, h: hy } = rt.fields().unwrap();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&ex), bits(&d.gather(Field::E).unwrap()));
    assert_eq!(bits(&hy), bits(&d.gather(Field::H).unwrap()));
}

#[test]
fn the_declared_accesses_are_what_the_kernels_touch() {
    // Poison every cell a kernel does not declare it reads (NaN): what it writes must not
    // change. And every cell it does not declare it writes must keep its value.
    use haloscope::decomp::{Buffer, DeviceState, Kernel};
    let text = "[grid]\ncells = 64\ncourant = 1.0\n[devices]\ncount = 2\n\
                [[sources]]\nkind = \"sinusoid\"\nposition = 1\nperiod = 5.0\n\
                [[sources]]\nkind = \"sinusoid\"\nposition = 31\nperiod = 7.0\ninjection = \"hard\"\n\
                [[sources]]\nkind = \"sinusoid\"\nposition = 62\nperiod = 9.0\n";
    let s = scenario::parse(text, "poison").unwrap();
    let c = Coefficients::new(&s).unwrap();
    let kernels = [
        Kernel::UpdateH,
        Kernel::UpdateE,
        Kernel::SourcesBoundaries,
        Kernel::Fused { steps: 4 },
    ];
    let mut checked = 0;
    for (d, range) in s.ranges().into_iter().enumerate() {
        for kernel in kernels {
            for cells in [
                range.clone(),
                0..64,
                range.start + 3..range.end - 3,
                0..range.start + 2,
            ] {
                let fresh = || {
                    let mut st = DeviceState::new(d, range.clone(), &s, &c).unwrap();
                    for f in [Field::E, Field::H] {
                        for (i, v) in st.field_mut(f).iter_mut().enumerate() {
                            *v = ((i * 7 + f as usize * 3) % 11) as f32 * 0.1 - 0.5;
                        }
                    }
                    st
                };
                let acc = fresh().accesses(kernel, &cells);
                let declared = |f: Field, write: bool, g: usize| {
                    acc.iter()
                        .any(|a| a.buffer == Buffer::Field(f) && a.write == write && a.cells.contains(&g))
                };
                let lo = range.start as isize - haloscope::decomp::HALO as isize;
                let global = |i: usize| (lo + i as isize) as usize;
                let mut plain = fresh();
                let before = [plain.field(Field::E).to_vec(), plain.field(Field::H).to_vec()];
                plain.run(kernel, &cells, 5);
                let mut poisoned = fresh();
                for f in [Field::E, Field::H] {
                    for (i, v) in poisoned.field_mut(f).iter_mut().enumerate() {
                        if lo + (i as isize) < 0 || !declared(f, false, global(i)) {
                            *v = f32::NAN;
                        }
                    }
                }
                poisoned.run(kernel, &cells, 5);
                for (k, f) in [Field::E, Field::H].into_iter().enumerate() {
                    for (i, (&a, &b)) in plain.field(f).iter().zip(poisoned.field(f)).enumerate() {
                        let g = lo + i as isize;
                        let written = g >= 0 && declared(f, true, g as usize);
                        if written {
                            assert_eq!(
                                a.to_bits(),
                                b.to_bits(),
                                "{kernel:?} {cells:?} dev{d}: {f:?}[{g}] read undeclared"
                            );
                        } else {
                            assert_eq!(
                                a.to_bits(),
                                before[k][i].to_bits(),
                                "{kernel:?} {cells:?} dev{d}: {f:?}[{g}] written undeclared"
                            );
                        }
                    }
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * 4 * 4);
}

#[test]
fn an_event_used_after_its_destruction_in_host_order_is_invalid() {
    use haloscope::decomp::Kernel;
    use haloscope::program::{EventId, EventInfo, StreamId};
    let s = builtin("pulse").with_devices(1).unwrap();
    let compute = StreamId { device: 0, index: 0 };
    let e = EventId(0);
    let program = Program {
        name: "destroyed".into(),
        stream_names: vec!["compute".into()],
        high_priority: Vec::new(),
        events: vec![EventInfo {
            name: "done[0]".into(),
            device: 0,
        }],
        flags: Vec::new(),
        setup: vec![vec![Op::EventCreate { event: e, device: 0 }]],
        step: vec![vec![
            Op::Launch {
                kernel: Kernel::UpdateH,
                cells: 0..2000,
                stream: compute,
                substep: 0,
            },
            Op::Record {
                event: e,
                stream: compute,
            },
            Op::Wait {
                stream: compute,
                event: e,
            },
            // Destroyed every step, created only once: the next step's record and wait
            // use it after its destruction.
            Op::EventDestroy { event: e },
        ]],
        steps_per_round: 1,
        grid: haloscope::geometry::Grid::Line,
        cells: 0,
    };
    let f = hazard::check_scenario(&s, &program).unwrap();
    assert_eq!(summary(&f), ["INVALID 0:1 ", "INVALID 0:2 "]);
    assert!(
        f.iter().all(|x| x.why.contains("used after it was destroyed")),
        "{}",
        hazard::text(&f)
    );
    // Created again before each use: nothing to report.
    let mut fixed = program.clone();
    fixed.step[0].insert(0, Op::EventCreate { event: e, device: 0 });
    assert!(hazard::check_scenario(&s, &fixed).unwrap().is_empty());
}

#[test]
fn a_missing_exchange_is_found_where_a_kernel_reads_a_halo_nothing_writes() {
    // Every correct mode without one field's exchange (its copies, or its NCCL calls): the
    // checker names the missing halo, or another finding, or the sim shows the mode never
    // needed it.
    let s = busy(3);
    let states = haloscope::decomp::DeviceState::shapes(&s);
    let mut report = Vec::new();
    for mode in Mode::all().iter().copied().filter(|m| m.is_correct()) {
        let p = mode.program(&s.ranges());
        for field in [haloscope::decomp::Field::E, haloscope::decomp::Field::H] {
            let mut q = p.clone();
            let exchanges = |op: &Op| match op {
                Op::PeerCopy { field: f, .. } | Op::Nccl { field: f, .. } => *f == field,
                _ => false,
            };
            let before: usize = q.step.iter().flatten().filter(|op| exchanges(op)).count();
            for ops in q.step.iter_mut() {
                ops.retain(|op| !exchanges(op));
            }
            if before == 0 {
                continue;
            }
            let f = hazard::check(&q, &states);
            let missing = f.iter().any(|x| x.kind == Kind::Missing);
            report.push(format!(
                "{} {field:?}: {}",
                mode.name(),
                if missing { "MISSING" } else { "-" }
            ));
            if !mode.uses_nccl() {
                assert!(
                    missing,
                    "{} without its {field:?} exchange: no MISSING finding\n{}",
                    mode.name(),
                    hazard::text(&f)
                );
            }
        }
    }
    eprintln!("{}", report.join("\n"));
    // Correct programs read no halo that nothing writes.
    for mode in Mode::all().iter().copied().filter(|m| m.is_correct()) {
        let f = hazard::check(&mode.program(&s.ranges()), &states);
        assert!(f.iter().all(|x| x.kind != Kind::Missing), "{}", mode.name());
    }
}

/// Issue 52: the smallest fix — each conflict's own order tried on the program, the best
/// kept — leaves every broken mode it is offered for with no finding, in fewer orders than
/// the causes; exercise 1's six findings are two missing orders, and the judge says them once.
#[test]
fn the_smallest_fix_fixes_everything_in_fewer_orders_than_causes() {
    let mut offered = 0;
    for n in [2, 3, 4] {
        let s = builtin("pulse").with_devices(n).unwrap();
        let states = haloscope::decomp::DeviceState::shapes(&s);
        for mode in Mode::all().iter().copied().filter(|m| !m.is_correct()) {
            let program = mode.program(&s.ranges());
            let f = hazard::check_scenario(&s, &program).unwrap();
            let causes = hazard::Grouped::new(f.clone()).len();
            let Some(orders) = hazard::smallest_fix(&program, &states, &f) else {
                continue;
            };
            offered += 1;
            assert!(orders.len() < f.len(), "{} on {n}: {orders:?}", mode.name());
            let fixed = hazard::fix::with(&program, &orders);
            let left = hazard::check_within_limits(&fixed, &states).unwrap();
            assert!(
                left.is_empty(),
                "{} on {n} with {orders:?}:\n{}",
                mode.name(),
                hazard::text(&left)
            );
            assert!(orders.len() <= causes, "{}", mode.name());
        }
    }
    assert!(offered >= 3, "offered for {offered} broken mode(s) only");
    let ex = &haloscope::exercise::all()[0];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(&ex.file);
    std::fs::write(&path, ex.broken()).unwrap();
    let v = haloscope::exercise::judge(ex, &path);
    assert_eq!((v.finding_count, v.smallest_fix.len()), (6, 2), "{}", v.text());
    let text = v.text();
    assert!(
        text.contains("2 missing order(s) cause them all; the smallest fix adds:"),
        "{text}"
    );
    assert!(!text.contains("— fix:"), "{text}");
    assert!(
        text.contains("1. record an event on compute@dev0 after thread 0's update_h 0–999 (call 0), and wait on it on copy@dev1 before thread 1's copy hy dev0→dev1 (call 2)"),
        "{text}"
    );
}
