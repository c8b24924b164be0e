#!/usr/bin/env python3
"""Writes BENCHMARKS.md from the JSON files in benchmarks/ (one per measured machine).

Each file: {"date", "machine", "command", "bench": <the output of
`haloscope bench --runtime cuda --json`>}. Run from the repository root:

    python3 scripts/benchmarks-md.py > BENCHMARKS.md
"""
import glob
import json

TARGETS = {
    "interior": 0.90,  # of the copy bandwidth at the same bytes per cell
    "weak": 0.99,  # overlap, 1 -> 2 GPUs at 2^26 cells per GPU
    "halo_share": 0.01,  # overlap at 2^26 cells per GPU
    "copy_vs_latency": 1.2,
}


def pct(x):
    return f"{100 * x:.1f} %"


def targets(b):
    """The issue's targets, each a ratio measured in this run."""
    out = ["### Targets", "", "| target | measured | |", "|---|---|---|"]
    if b["interior"]:
        big = max(i["cells"] for i in b["interior"])
        worst = min(i["vs_copy"] for i in b["interior"] if i["cells"] == big)
        out.append(f"| interior update ≥ 90 % of the copy bandwidth ({big:,} cells) | {pct(worst)} | {'✓' if worst >= 0.90 else '✗'} |")
    for s in b["scaling"]:
        if s["cells_per_gpu"] == 2**26 and s["mode"] in ("overlap", "push"):
            e = s["efficiency"]
            out.append(f"| `{s['mode']}` weak scaling 1 → {s.get('gpus', 2)} GPUs ≥ 99 % at 2^26 cells/GPU | {100 * e:.2f} % | {'✓' if e >= 0.99 else '✗'} |")
    for m in b["modes"]:
        if m["cells_per_gpu"] == 2**26 and m["gpus"] == 2 and m["mode"] in ("overlap", "push"):
            h = m["halo_share"]
            out.append(f"| `{m['mode']}` halo overhead ≤ 1 % of the step at 2^26 cells/GPU | {100 * h:.2f} % ({m['halo_overhead_us']:.2f} µs) | {'✓' if h <= 0.01 else '✗'} |")
    for m in b["modes"]:
        if m["gpus"] == 2 and m["cells_per_gpu"] == 2**16 and m["copy_vs_latency"] is not None:
            r = m["copy_vs_latency"]
            out.append(f"| `{m['mode']}` halo copy ≤ 1.2 × the 4-byte push latency | {r:.2f}× ({m['copy_median_us']:.2f} µs) | {'✓' if r <= 1.2 else '✗'} |")
    fused = b.get("fused", [])
    for f in fused:
        if f["gpus"] == 1 and f["cells_per_gpu"] == 2**28:
            r = f["vs_roofline"]
            out.append(f"| fused kernel ≥ 1.5 × the two-kernel roofline at 2^28 cells, bit-identical | {r:.2f}× ({bits(f)}) | {'✓' if r >= 1.5 and f['differing_cells'] == 0 else '✗'} |")
    for f in fused:
        if f["gpus"] == 2 and f["cells_per_gpu"] == 2**16:
            r = f["vs_launch"]
            out.append(f"| 2^16 cells/GPU on 2 GPUs: time per step ≤ 2 × one empty launch (fused, {f['steps_per_pass']} steps per exchange) | {r:.2f}× ({f['us_per_step']:.2f} µs) | {'✓' if r <= 2 and f['differing_cells'] == 0 else '✗'} |")
    for m in b["modes"]:
        if m["mode"] in ("graph", "fused") and m["gpus"] == 2 and m["cells_per_gpu"] == 2**16:
            r = m["us_per_step"] / b["launch_us"]
            out.append(f"| `{m['mode']}` mode, 2^16 cells/GPU on 2 GPUs: time per step ≤ 2 × one empty launch | {r:.2f}× ({m['us_per_step']:.2f} µs) | {'✓' if r <= 2 else '✗'} |")
    return out + [""]


def bits(f):
    if f["differing_cells"] == 0:
        return f"same bits as the CPU after {f['checked_steps']} steps"
    return f"{f['differing_cells']} cells differ from the CPU"


def section(run):
    b = run["bench"]
    out = [f"## {run['date']} — {run['machine']}", "", f"`{run['command']}`", ""]
    out += targets(b)
    if not b["interior"]:
        out += ["A partial run: only the modes named in the command, with what they are compared with.", ""]
    out += ["### What the hardware allows", "", "| what | measured |", "|---|---|"]
    for c in b["copy"]:
        out.append(f"| GPU {c['gpu']} device-to-device copy (read + write) | {c['gb_per_s']:.0f} GB/s |")
    for l in b["links"]:
        kind = "direct" if l["direct"] else "staged"
        out.append(
            f"| GPU {l['src']} → GPU {l['dst']} peer copy ({kind}) | {l['latency_us']:.2f} µs (4 B, pushed: "
            f"source's stream), {l.get('pull_latency_us', float('nan')):.2f} µs (pulled: destination's stream), "
            f"{l['gb_per_s']:.0f} GB/s (256 MiB) |"
        )
    out.append(f"| empty kernel launch, back to back | {b['launch_us']:.2f} µs |")
    if b["interior"]:
        out += ["", "### Interior update (update_h + update_e, no exchange)", ""]
        out += ["| GPU | cells | µs/step | Gcells/s | GB/s | vs copy bandwidth (target ≥ 90 %) |", "|---|---|---|---|---|---|"]
        for i in b["interior"]:
            ok = "✓" if i["vs_copy"] >= TARGETS["interior"] else "✗"
            out.append(
                f"| {i['gpu']} | {i['cells']:,} | {i['us_per_step']:.2f} | {i['gcells_per_s']:.1f} | "
                f"{i['gb_per_s']:.0f} | {pct(i['vs_copy'])} {ok} |"
            )
        out.append(f"\n{int(b['interior'][0]['bytes_per_cell'])} bytes per cell, read + written.\n")
    else:
        out.append("")
    out += ["### Modes", "", "Halo overhead = the step minus the same step with no exchange, same devices. The modes' halo",
            "copies are pulls (issued on the destination's stream); \"vs latency\" compares them with the pushed 4-byte copy.", ""]
    out += ["| mode | cells/GPU | GPUs | µs/step | no exchange | overhead µs | share | halo copy µs | vs latency |",
            "|---|---|---|---|---|---|---|---|---|"]
    for m in b["modes"]:
        c = "-" if m["copy_median_us"] is None else f"{m['copy_median_us']:.2f}"
        r = "-" if m["copy_vs_latency"] is None else f"{m['copy_vs_latency']:.2f}×"
        out.append(
            f"| {m['mode']} | {m['cells_per_gpu']:,} | {m['gpus']} | {m['us_per_step']:.2f} | "
            f"{m['no_exchange_us']:.2f} | {m['halo_overhead_us']:.2f} | {pct(m['halo_share'])} | {c} | {r} |"
        )
    out += ["", "### Weak scaling (same cells per GPU)", "", "| mode | cells/GPU | GPUs | 1 GPU µs | N GPUs µs | efficiency |",
            "|---|---|---|---|---|---|"]
    for s in b["scaling"]:
        n_us = s.get("n_gpu_us", s.get("two_gpu_us"))
        out.append(
            f"| {s['mode']} | {s['cells_per_gpu']:,} | 1 → {s.get('gpus', 2)} | {s['one_gpu_us']:.2f} | {n_us:.2f} | "
            f"{100 * s['efficiency']:.2f} % |"
        )
    if b.get("strong"):
        out += ["", "### Strong scaling (one grid over more GPUs)", "", "| mode | cells | GPUs | µs/step | speedup | efficiency |",
                "|---|---|---|---|---|---|"]
        for s in b["strong"]:
            out.append(
                f"| {s['mode']} | {s['cells']:,} | {s['gpus']} | {s['us_per_step']:.2f} | {s['speedup']:.2f}× | {pct(s['efficiency'])} |"
            )
    if b.get("fused"):
        out += ["", "### Fused kernel (k steps per pass over memory, and per halo exchange on several GPUs)", "",
                "Roofline: the copy bandwidth over 32 B per cell, what the two-kernel step moves; a pass moves 24 B per cell",
                "for k steps. \"vs 2-kernel\": the interior step (1 GPU) or `overlap` (several GPUs) of the same run over this one.", "",
                "| cells/GPU | GPUs | k | µs/step | Gcells/s per GPU | vs roofline | vs 2-kernel | vs empty launch | bits |",
                "|---|---|---|---|---|---|---|---|---|"]
        for f in b["fused"]:
            two = "-" if f["vs_two_kernel"] is None else f"{f['vs_two_kernel']:.2f}×"
            out.append(
                f"| {f['cells_per_gpu']:,} | {f['gpus']} | {f['steps_per_pass']} | {f['us_per_step']:.3f} | {f['gcells_per_s']:.1f} | "
                f"{f['vs_roofline']:.2f}× | {two} | {f['vs_launch']:.2f}× | {bits(f)} |"
            )
    if b["snapshot"]:
        out += ["", "### Snapshot (reduction kernel + async copy into pinned memory)", "", "| cells | columns | µs |", "|---|---|---|"]
        for s in b["snapshot"]:
            out.append(f"| {s['cells']:,} | {s['columns']} | {s['us']:.1f} |")
    return "\n".join(out) + "\n"


def text_section(path):
    """A bench that printed a table (`bench --plane`, or one run kept as text): its first
    line says the command."""
    lines = open(path).read().rstrip("\n").split("\n")
    date = path.split("/")[-1][:10]
    kind = "2D: " if "-plane" in path.rsplit("/", 1)[-1] else ""
    out = [f"## {date} — {kind}`{lines[0][2:]}`\n", "```"]
    out += lines[1:]
    out.append("```\n")
    return "\n".join(out)


def main():
    runs = [json.load(open(f)) for f in sorted(glob.glob("benchmarks/*.json"), reverse=True)]
    print("# Benchmarks\n")
    print("Generated by `scripts/benchmarks-md.py` from `benchmarks/*.json` and the tables kept as")
    print("text, `benchmarks/*.txt` (newest first); every ratio is measured in the same run as its")
    print("denominator. Regenerate after adding a run.\n")
    for f in sorted(glob.glob("benchmarks/*.txt"), reverse=True):
        print(text_section(f))
    for r in runs:
        print(section(r))


main()
