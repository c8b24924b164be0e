//! A check's report as text (`check --recording`'s output, the JSON being the report
//! itself): a head line and notes, the races in short where several findings are one, each
//! finding with both calls, what the host's synchronisation contributed.

use std::path::Path;

use super::check;

/// The races the findings are of, where several findings are one race: the same two calls
/// of the code on several allocations, threads or steps.
fn races(report: &check::Report) -> String {
    use std::fmt::Write;
    let races = &report.races;
    let mut s = format!(
        "in short: the {} conflicts of bytes below are {} race(s) of the code, each the same two \
         calls meeting on one or more allocations and threads:\n",
        report.conflicts(),
        races.len()
    );
    for r in races {
        let many = |n: usize, one: &str, more: &str| {
            if n == 1 {
                format!("1 {one}")
            } else {
                format!("{n} {more}")
            }
        };
        let _ = writeln!(
            s,
            "  {} between {} and {}: on {} ({}), {}, {}",
            r.kind.name(),
            r.first,
            r.second,
            r.buffers.join(", "),
            many(r.threads.len(), "pair of threads", "pairs of threads"),
            many(r.findings, "finding", "findings"),
            many(r.times, "time", "times"),
        );
    }
    s
}

/// The report as text: a head line, then each finding with both calls.
pub fn summary(path: &Path, r: &check::Report) -> String {
    use std::fmt::Write;
    let mut s = format!(
        "recording {}: {} calls on {} host thread(s), GPU(s) {:?}: {} finding(s)\n",
        path.display(),
        r.calls,
        r.threads,
        r.devices,
        r.findings.len()
    );
    for n in &r.notes {
        let _ = writeln!(s, "note: the recording {n}");
    }
    let l = r.launches;
    if l.measured + l.reused > 0 {
        let _ = writeln!(
            s,
            "kernel footprints: {} launch(es) measured on the GPU, {} reusing the footprint of an \
             earlier launch of the same kernel, shape and arguments, {} without (captured into a graph, \
             or not measurable)",
            l.measured, l.reused, l.without
        );
    }
    let whole = r
        .findings
        .iter()
        .filter(|f| f.kernel_model == Some(check::Model::Conservative))
        .count();
    if whole > 0 {
        let _ = writeln!(
            s,
            "note: {whole} of them rest on a kernel taken whole (no annotation names it: a launch is \
             taken to read and write every allocation its pointers point into), and may be races that \
             are not; --annotations FILE says which bytes each kernel touches (an export's \
             kernels/access.txt)"
        );
    }
    if r.races.len() < r.conflicts() {
        s.push_str(&races(r));
    }
    for f in &r.findings {
        let on = f.buffer.as_deref().map_or(String::new(), |b| {
            let a = r.allocations.iter().find(|a| a.name == b);
            a.map_or(format!(" on {b}"), |a| {
                format!(
                    " on {b} ({} bytes on GPU {}, cudaMalloc at line {})",
                    a.bytes, a.device, a.line
                )
            })
        });
        let times = if f.times > 1 {
            format!(", {} times (the first shown)", f.times)
        } else {
            String::new()
        };
        let _ = writeln!(s, "\n{}{on}{times}", f.kind.name());
        for c in std::iter::once(&f.first).chain(&f.second) {
            let step = c.step.map_or(String::new(), |n| format!(", step {n}"));
            let _ = writeln!(
                s,
                "  thread {} (seq {}, line {}{step}): {}",
                c.thread, c.seq, c.line, c.call
            );
        }
        let _ = writeln!(s, "  {}", f.why);
        if let Some(almost) = &f.almost {
            let _ = writeln!(s, "  {almost}");
        }
        if let Some(bytes) = f.bytes_text() {
            let _ = writeln!(s, "  {bytes}");
        }
        match f.kernel_model {
            Some(check::Model::Conservative) => {
                let _ = writeln!(
                    s,
                    "  (the kernel's bytes assumed: all of the allocation; no annotation)"
                );
            }
            Some(check::Model::Annotated) => {
                let _ = writeln!(s, "  (the kernel's bytes from its annotation)");
            }
            Some(check::Model::Measured) => {
                let _ = writeln!(s, "  (the kernel's bytes measured on the GPU at this launch)");
            }
            Some(check::Model::Reused) => {
                let _ = writeln!(
                    s,
                    "  (the kernel's bytes measured on the GPU at an earlier launch of the same kernel, \
                     shape and arguments)"
                );
            }
            _ => {}
        }
    }
    s.push_str(&host_footnote(r.host_syncs, r.host_left_out));
    s
}

/// What the check saw of the host's own synchronisation, under the findings.
fn host_footnote(seen: usize, left_out: usize) -> String {
    if left_out > 0 {
        format!(
            "\nThe host's own synchronisation ({left_out} record(s)) was left out (--ignore-host-sync): the \
             threads are ordered only by their CUDA calls, their starts and their ends. A finding here \
             that the check without it does not make is one the host's synchronisation orders.\n"
        )
    } else if seen > 0 {
        format!(
            "\nThe host's own synchronisation ({seen} record(s): barriers, mutexes, condition variables, \
             semaphores, thread starts and joins, OpenMP regions) orders the threads here; futexes, \
             atomics and C++20 barriers are not seen.\n"
        )
    } else {
        "\nNo host synchronisation in this recording (recorded by an older haloscope, or with \
         --no-host-sync, or none the recorder can see): the threads are ordered only by their CUDA \
         calls, their starts and their ends.\n"
            .to_string()
    }
}
