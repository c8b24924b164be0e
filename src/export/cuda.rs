//! A program as CUDA C++ host code: `main.cu`, one OpenMP host thread per device running
//! the program's step each round, its statements in its order with its cell ranges
//! written as it wrote them (`lo - 1`, `hi - k`), its comments kept. What a statement does
//! to memory is `halo.cuh`'s (assets/export/halo.cuh): the kernels' launches over the same
//! cells as haloscope's cuda runtime.

use std::fmt::Write;

use super::safe::{self, ident};
use super::skeleton::{
    FINISH, HEADER, LOOP_END, LOOP_START, MAIN_REST, NCCL_BUILD, PARSE_GPUS, THREAD_START, main_start,
};
use crate::program::lang::{CellPtr, EventRef, Expr, Source, Stmt, StmtKind, is_line_break, line_end};

/// What the text of `main.cu` is made from.
pub struct Unit<'a> {
    pub name: &'a str,
    pub text: &'a str,
    pub src: &'a Source,
    /// Logical devices and the default GPU of each.
    pub gpus: &'a [i32],
    /// The line that exported it, for the header.
    pub command: &'a str,
    /// A comment for the wait written at a byte offset of the text: which order it keeps.
    pub keeps: &'a dyn Fn(usize) -> Option<String>,
    /// A 2D grid (its kernels launched over rows), else 1D.
    pub plane: bool,
}

/// Binding strength of a binary operator, as in C.
fn strength(op: &str) -> u8 {
    match op {
        "*" | "/" | "%" => 6,
        "+" | "-" => 5,
        "<" | ">" | "<=" | ">=" => 4,
        "==" | "!=" => 3,
        "&&" => 2,
        _ => 1,
    }
}

/// `e` as C++ (every number a `long`), parenthesised where C needs it.
pub fn expr(e: &Expr) -> String {
    expr_in(e, 0)
}

fn expr_in(e: &Expr, outer: u8) -> String {
    match e {
        Expr::Num(n) => n.to_string(),
        Expr::Var(v, _) => ident(v),
        Expr::Not(x) => format!("!{}", expr_in(x, 7)),
        Expr::Neg(x, _) => {
            // `- -k` as `-(-k)`: `--k` would be a decrement.
            let x = expr_in(x, 7);
            if x.starts_with('-') {
                format!("-({x})")
            } else {
                format!("-{x}")
            }
        }
        Expr::Call(f, a, b) => format!("std::{f}<long>({}, {})", expr(a), expr(b)),
        Expr::Bin("%", a, b, _) => format!("emod({}, {})", expr(a), expr(b)),
        Expr::Bin(op, a, b, _) => {
            let s = strength(op);
            // Left-associative: the right operand binds one tighter.
            let text = format!("{} {op} {}", expr_in(a, s), expr_in(b, s + 1));
            if s < outer { format!("({text})") } else { text }
        }
    }
}

fn member(e: &EventRef) -> String {
    format!("{}[{}]", ident(&e.name), expr(&e.index))
}

fn ptr(p: &CellPtr, device: &str) -> String {
    format!("cell({}, {device}, {})", p.field, expr(&p.offset))
}

/// Whether a statement of `body`, nested ones included, is one `f` picks.
pub fn any(body: &[Stmt], f: &dyn Fn(&StmtKind) -> bool) -> bool {
    body.iter().any(|s| {
        f(&s.kind)
            || match &s.kind {
                StmtKind::If(_, a, b) => any(a, f) || any(b, f),
                StmtKind::For(_, _, _, b) | StmtKind::Graph(_, b) => any(b, f),
                _ => false,
            }
    })
}

/// The program's `//` comments (not `//!`) that start in `text[from..to]`, each as the
/// export writes it ([`safe::program_comment`]).
fn comments(u: &Unit, from: usize, to: usize) -> Vec<String> {
    u.src
        .comments
        .iter()
        .filter(|c| c.start >= from && c.start < to)
        .map(|c| &u.text[c.clone()])
        .filter(|c| !c.starts_with("//!"))
        .map(safe::program_comment)
        .collect()
}

struct Writer<'a> {
    u: &'a Unit<'a>,
    out: String,
    depth: usize,
    /// `d`, or `dev` where the program uses cudaSetDevice.
    dev: &'static str,
    graphs: usize,
}

impl Writer<'_> {
    fn line(&mut self, s: &str) {
        for _ in 0..self.depth {
            self.out.push_str("    ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn block(&mut self, body: &[Stmt], from: usize) {
        let mut at = from;
        for s in body {
            for c in comments(self.u, at, s.span.start) {
                self.line(&c);
            }
            self.stmt(s);
            at = line_end(self.u.text, s.span.end);
        }
    }

    /// The comment on the line a one-line statement ends on, if any.
    fn trailing(&self, s: &Stmt) -> String {
        let end = line_end(self.u.text, s.span.end);
        let from = if self.spans_lines(s) {
            s.span.end
        } else {
            s.span.start
        };
        comments(self.u, from, end)
            .first()
            .map_or(String::new(), |c| format!("  {c}"))
    }

    /// A call statement: one line (and, above a wait, the order it keeps).
    fn call(&self, s: &Stmt) -> Option<String> {
        let dev = self.dev;
        let text = match &s.kind {
            StmtKind::Launch { kernel, stream, args } => {
                let (from, to) = (expr(&args[0]), expr(&args[1]));
                let third = args.get(2).map(expr);
                if matches!(kernel.as_str(), "update_h" | "update_e") {
                    return None; // several lines: see `launch`
                }
                if kernel.starts_with("fused_") {
                    let steps = third.unwrap_or_else(|| "1".into());
                    format!(
                        "launch::{kernel}({dev}, {}, {from}, {to}, {steps}, step);",
                        ident(stream)
                    )
                } else {
                    let at = third.map_or("step".to_string(), |t| format!("step + {t}"));
                    format!("launch::{kernel}({dev}, {}, {from}, {to}, {at});", ident(stream))
                }
            }
            StmtKind::Record { event, stream } => {
                format!("CHECK(cudaEventRecord({}, {}));", member(event), ident(stream))
            }
            StmtKind::Wait { stream, event } => {
                format!(
                    "CHECK(cudaStreamWaitEvent({}, {}, 0));",
                    ident(stream),
                    member(event)
                )
            }
            StmtKind::Copy {
                dst,
                dst_device,
                src,
                src_device,
                count,
                stream,
            } => {
                let (dd, sd) = (expr(dst_device), expr(src_device));
                format!(
                    "CHECK(cudaMemcpyPeerAsync({}, gpuMapping[{dd}], {}, gpuMapping[{sd}], bytes({}, {}), {}));",
                    ptr(dst, &dd),
                    ptr(src, &sd),
                    src.field,
                    expr(count),
                    ident(stream)
                )
            }
            StmtKind::StreamSync(st) => format!("CHECK(cudaStreamSynchronize({}));", ident(st)),
            StmtKind::DeviceSync => "CHECK(cudaDeviceSynchronize());".into(),
            StmtKind::SetDevice(e) => {
                format!(
                    "dev = {}; CHECK(cudaSetDevice(gpuMapping[dev])); lo = device[dev].lo; hi = device[dev].hi;",
                    expr(e)
                )
            }
            StmtKind::Let(name, e) => format!("const long {} = {};", ident(name), expr(e)),
            StmtKind::Create(e) => format!(
                "CHECK(cudaEventCreateWithFlags(&{}, cudaEventDisableTiming));",
                member(e)
            ),
            StmtKind::Destroy(e) => format!("CHECK(cudaEventDestroy({}));", member(e)),
            StmtKind::Barrier => "#pragma omp barrier".into(),
            StmtKind::Flag {
                wait: true,
                stream,
                flag,
                value,
            } => format!(
                "CHECK(driver.cuStreamWaitValue32({}, {}, flag_value({}), CU_STREAM_WAIT_VALUE_GEQ));",
                ident(stream),
                member(flag),
                expr(value)
            ),
            StmtKind::Flag {
                wait: false,
                stream,
                flag,
                value,
            } => format!(
                "CHECK(driver.cuStreamWriteValue32({}, {}, flag_value({}), 0));",
                ident(stream),
                member(flag),
                expr(value)
            ),
            k => return nccl_call(k, dev),
        };
        Some(text)
    }

    fn stmt(&mut self, s: &Stmt) {
        if matches!(s.kind, StmtKind::Wait { .. } | StmtKind::Flag { wait: true, .. })
            && let Some(c) = (self.u.keeps)(s.span.start)
        {
            self.line(&format!("// {c}"));
        }
        if let Some(text) = self.call(s) {
            let t = self.trailing(s);
            self.line(&format!("{text}{t}"));
            return;
        }
        match &s.kind {
            StmtKind::Launch { kernel, stream, args } => self.launch(s, kernel, stream, args),
            StmtKind::If(c, then, els) => self.if_stmt(s, c, then, els),
            StmtKind::For(v, from, to, body) => {
                let v = ident(v);
                let head = format!("for (long {v} = {}; {v} < {}; {v}++) {{", expr(from), expr(to));
                self.line(&format!("{head}{}", self.trailing_open(s)));
                self.depth += 1;
                self.block(body, line_end(self.u.text, s.span.start));
                self.depth -= 1;
                self.line("}");
            }
            StmtKind::Graph(stream, body) => self.graph(s, stream, body),
            _ => unreachable!("NCCL statements are refused before the export"),
        }
    }

    /// A two-kernel launch written out: the local cells of from..to that the device holds
    /// where the kernel is defined (none: no launch), in 2D launched in pieces of at most
    /// 65,535 rows (gridDim.y's limit).
    fn launch(&mut self, s: &Stmt, kernel: &str, stream: &str, args: &[Expr]) {
        let (dev, st) = (self.dev, ident(stream));
        let (from, to) = (expr(&args[0]), expr(&args[1]));
        let on = if kernel == "update_h" { "ON_H" } else { "ON_E" };
        let fields = if kernel == "update_h" {
            format!("device[{dev}].h, device[{dev}].e, scenario.ch")
        } else {
            format!("device[{dev}].e, device[{dev}].h, device[{dev}].ca, device[{dev}].cb")
        };
        let range = format!("kernel_range({dev}, {on}, {from}, {to})");
        let t = self.trailing(s);
        if self.u.plane {
            self.line(&format!("for (const Span cells : row_launches({range})) {{{t}"));
            self.line(&format!(
                "    {kernel}_2d<<<grid_2d(cells), BLOCK, 0, {st}>>>({fields}, scenario.nx, cells.a, cells.len(), scenario.periodic);"
            ));
            self.line(&format!("    CHECK_LAUNCH(\"{kernel}_2d\");"));
        } else {
            self.line(&format!("if (const Span cells = {range}; !cells.empty()) {{{t}"));
            self.line(&format!(
                "    {kernel}<<<blocks_of(cells.len(), BLOCK), BLOCK, 0, {st}>>>({fields}, cells.a, cells.len());"
            ));
            self.line(&format!("    CHECK_LAUNCH(\"{kernel}\");"));
        }
        self.line("}");
    }

    /// The comment on a compound statement's first line (after its `{`).
    fn trailing_open(&self, s: &Stmt) -> String {
        let end = line_end(self.u.text, s.span.start);
        comments(self.u, s.span.start, end)
            .first()
            .map_or(String::new(), |c| format!("  {c}"))
    }

    fn if_stmt(&mut self, s: &Stmt, c: &Expr, then: &[Stmt], els: &[Stmt]) {
        let head = format!("if ({})", expr(c));
        // One call on the if's own line, as the program wrote it.
        let simple = |b: &[Stmt]| {
            b.len() == 1 && !matches!(b[0].kind, StmtKind::Barrier) && self.call(&b[0]).is_some()
        };
        if els.is_empty() && simple(then) && !self.spans_lines(s) {
            let text = self.call(&then[0]).unwrap_or_default();
            if matches!(
                then[0].kind,
                StmtKind::Wait { .. } | StmtKind::Flag { wait: true, .. }
            ) && let Some(k) = (self.u.keeps)(then[0].span.start)
            {
                self.line(&format!("// {k}"));
            }
            let t = self.trailing(s);
            self.line(&format!("{head} {text}{t}"));
            return;
        }
        self.line(&format!("{head} {{{}", self.trailing_open(s)));
        self.depth += 1;
        self.block(then, line_end(self.u.text, s.span.start));
        self.depth -= 1;
        if els.is_empty() {
            self.line("}");
            return;
        }
        self.line("} else {");
        self.depth += 1;
        let from = then
            .last()
            .map_or(s.span.start, |x| line_end(self.u.text, x.span.end));
        self.block(els, from);
        self.depth -= 1;
        self.line("}");
    }

    fn spans_lines(&self, s: &Stmt) -> bool {
        self.u.text[s.span.start.min(self.u.text.len())..s.span.end.min(self.u.text.len())]
            .contains(is_line_break)
    }

    fn graph(&mut self, s: &Stmt, stream: &str, body: &[Stmt]) {
        let g = format!("graph{}", self.graphs);
        self.graphs += 1;
        let st = ident(stream);
        self.line(&format!(
            "// cudaGraphLaunch({st}) {{ … }}: the launches below, captured as a graph (each node after the one"
        ));
        self.line(
            "// before). Built at the first round; each later round captures them again only to update",
        );
        self.line("// the nodes' arguments (the sources' values) in place with cudaGraphExecUpdate.");
        self.line("{");
        self.depth += 1;
        self.line("cudaGraph_t captured;");
        self.line(&format!(
            "CHECK(cudaStreamBeginCapture({st}, cudaStreamCaptureModeThreadLocal));{}",
            self.trailing_open(s)
        ));
        self.block(body, line_end(self.u.text, s.span.start));
        self.line(&format!("CHECK(cudaStreamEndCapture({st}, &captured));"));
        self.line(&format!("if ({g} == nullptr) {{"));
        self.line(&format!("    CHECK(cudaGraphInstantiate(&{g}, captured, 0));"));
        self.line("} else {");
        self.line("    cudaGraphExecUpdateResultInfo info;");
        self.line(&format!("    CHECK(cudaGraphExecUpdate({g}, captured, &info));"));
        self.line("}");
        self.line("CHECK(cudaGraphDestroy(captured));");
        self.line(&format!("CHECK(cudaGraphLaunch({g}, {st}));"));
        self.depth -= 1;
        self.line("}");
    }
}

/// The program's own description: the `//` comments before its first word (not `//!`).
fn about(u: &Unit) -> Vec<String> {
    let lead = &u.src.comments[..u.src.lead.min(u.src.comments.len())];
    lead.iter()
        .map(|c| &u.text[c.clone()])
        .filter(|c| !c.starts_with("//!"))
        .map(safe::program_comment)
        .collect()
}

/// The family declarations: events and flags, one per device.
fn declarations(u: &Unit, out: &mut String) {
    let src = u.src;
    if !src.events.is_empty() {
        let names: Vec<String> = src
            .events
            .iter()
            .map(|e| format!("{}[n]", ident(&e.name)))
            .collect();
        let _ = writeln!(out, "static cudaEvent_t {};", names.join(", "));
    }
    if !src.flags.is_empty() {
        let names: Vec<String> = src
            .flags
            .iter()
            .map(|e| format!("{}[n]", ident(&e.name)))
            .collect();
        let _ = writeln!(
            out,
            "static CUdeviceptr {};  // flags: a 32-bit word each, in its device's memory",
            names.join(", ")
        );
    }
}

/// Creates each family's members on their devices (`on`: `i` unless declared), as the
/// program's set-up does; a family the step creates itself is left to the step. The
/// families made on their own member's device share one loop; one declared elsewhere
/// (`on`) has its own.
fn creations(u: &Unit, out: &mut String) {
    let fams: Vec<_> = u
        .src
        .events
        .iter()
        .filter(|e| !u.src.manual.contains(&e.name))
        .map(|e| (e, false))
        .chain(u.src.flags.iter().map(|e| (e, true)))
        .collect();
    let make = |out: &mut String, name: &str, flag: bool| {
        if flag {
            let _ = writeln!(out, "        {name}[i] = flag_word();");
        } else {
            let _ = writeln!(
                out,
                "        CHECK(cudaEventCreateWithFlags(&{name}[i], cudaEventDisableTiming));"
            );
        }
    };
    let plain: Vec<_> = fams.iter().filter(|(e, _)| e.on.is_none()).collect();
    if !plain.is_empty() {
        let _ = writeln!(
            out,
            "    for (long i = 0; i < n; i++) {{  // member i on device i"
        );
        let _ = writeln!(out, "        CHECK(cudaSetDevice(gpuMapping[i]));");
        for (e, flag) in &plain {
            make(out, &ident(&e.name), *flag);
        }
        let _ = writeln!(out, "    }}");
    }
    for (e, flag) in fams.iter().filter(|(e, _)| e.on.is_some()) {
        let on = e.on.as_ref().map_or("i".to_string(), expr);
        let _ = writeln!(out, "    for (long i = 0; i < n; i++) {{");
        // The program's `i` (the member's index) is the loop's `i`, whatever C name the
        // export gives the program's own `i` elsewhere.
        let i = ident("i");
        if i != "i"
            && on
                .split(|c: char| !c.is_alphanumeric() && c != '_')
                .any(|w| w == i)
        {
            let _ = writeln!(out, "        const long {i} = i;");
        }
        let _ = writeln!(out, "        const long on = {on};");
        let _ = writeln!(out, "        if (on < 0 || on >= n) continue;  // no such device");
        let _ = writeln!(out, "        CHECK(cudaSetDevice(gpuMapping[on]));");
        make(out, &ident(&e.name), *flag);
        let _ = writeln!(out, "    }}");
    }
}

/// The nvcc line that builds an export.
pub const BUILD: &str = "nvcc -O3 --fmad=false -arch=native -Xcompiler -fopenmp main.cu -o halo";

/// What to change in [`BUILD`] away from the GPU it runs on, and with nvcc from pip.
pub const BUILD_NOTES: [&str; 3] = [
    "(-arch=native: this machine's GPU; elsewhere name one: -arch=sm_90 Hopper, sm_100",
    " Blackwell, sm_89 Ada, sm_80 Ampere. nvcc from pip (nvidia-cuda-nvcc-cu13) also needs",
    " -L$(dirname $(which nvcc))/../lib, where its static cudart is)",
];

/// The nvcc line of an NCCL program with NCCL from pip (`nvidia-nccl-cu13`: its `lib`
/// holds `libnccl.so.2` only, no `libnccl.so` for `-lnccl`), after
/// `NCCL=$(python3 -c 'import nvidia.nccl as m; print(m.__path__[0])')`.
pub const BUILD_PIP_NCCL: &str = "nvcc -O3 --fmad=false -arch=native -Xcompiler -fopenmp main.cu -o halo \
     -I$NCCL/include -L$NCCL/lib -l:libnccl.so.2 -Xlinker -rpath=$NCCL/lib";

/// The nvcc line of an export; an NCCL program links NCCL too.
pub fn build_line(nccl: bool) -> String {
    if nccl {
        format!("{BUILD} -lnccl")
    } else {
        BUILD.to_string()
    }
}

/// `main.cu`'s head: what it is, how to build and run it, the kernels' constants.
fn head(u: &Unit, nccl: bool) -> String {
    let mut out = String::new();
    // The name (a file's stem, where no `program NAME;`) and the command (its path) are
    // text from outside: each in a comment of its own, escaped.
    let _ = writeln!(
        out,
        "// main.cu: a haloscope program as CUDA C++: {}",
        safe::comment(u.name)
    );
    let _ = writeln!(out, "// exported by {}", safe::comment(u.command));
    let _ = writeln!(out, "//");
    for l in about(u) {
        let _ = writeln!(out, "{l}");
    }
    let _ = writeln!(out, "//\n// Build: {}", build_line(nccl));
    out.push_str(
        "//        (--fmad=false and never --use_fast_math: a contracted multiply-add changes the bits)\n",
    );
    for l in BUILD_NOTES {
        let _ = writeln!(out, "//        {l}");
    }
    if nccl {
        out.push_str(NCCL_BUILD);
        out.push_str(
            "// Run:   ./halo [--gpus 0,1,2,3] [--out fields]   (one GPU per device: NCCL's rule)\n",
        );
    } else {
        out.push_str("// Run:   ./halo [--gpus 0,0,0,0] [--out fields]\n");
    }
    out.push_str(HEADER);
    for (k, v) in crate::kernels::defines() {
        let _ = writeln!(out, "#define {k} {v}");
    }
    let _ = writeln!(
        out,
        "#define HALO {}  // halo cells each side of a device's cells",
        crate::decomp::HALO
    );
    let _ = writeln!(out, "#define SHARED_2D {}", crate::kernels::shared_2d());
    out
}

/// `main.cu` of the unit.
pub fn main_cu(u: &Unit) -> String {
    let src = u.src;
    let n = u.gpus.len();
    let flags = !src.flags.is_empty();
    let nccl = uses_nccl(&src.step);
    let setdev = any(&src.step, &|s| matches!(s, StmtKind::SetDevice(_)));
    let mut w = Writer {
        u,
        out: String::new(),
        depth: 3,
        dev: if setdev { "dev" } else { "d" },
        graphs: 0,
    };
    w.block(&src.step, src.step_span.start);
    let body = w.out;
    let graphs = w.graphs;

    let mut out = head(u, nccl);
    if nccl {
        out.push_str("#define HALO_NCCL 1  // halo.cuh's NCCL part: the communicators\n");
    }
    out.push_str("#include \"halo.cuh\"\n\n");
    let _ = writeln!(
        out,
        "static const int n = {n};  // logical devices, one host thread each"
    );
    let gpus: Vec<String> = u.gpus.iter().map(|g| g.to_string()).collect();
    let _ = writeln!(
        out,
        "static int gpuMapping[n] = {{{}}};  // the GPU of each device (./halo --gpus LIST)",
        gpus.join(", ")
    );
    declarations(u, &mut out);
    out.push_str(PARSE_GPUS);
    out.push_str(&main_start(nccl, flags));
    out.push_str(MAIN_REST);
    if flags {
        out.push_str("    load_driver();\n");
    }
    creations(u, &mut out);
    out.push_str("    set_up_done();  // every memset and copy of the set-up has landed\n");
    if nccl {
        out.push_str("    start_nccl(gpuMapping, n);  // one communicator per device: ncclCommInitAll\n");
    }
    out.push_str(&round_setup(u, &body));
    out.push_str(THREAD_START);
    if nccl {
        out.push_str("        ncclComm_t comm = comms[d];  // rank d's communicator\n");
    }
    if setdev {
        out.push_str("        int dev = d;  // the device this thread's calls go to (cudaSetDevice)\n");
        out.push_str("        long lo = device[d].lo, hi = device[d].hi;\n");
    } else {
        out.push_str("        const long lo = device[d].lo, hi = device[d].hi;  // the cells it owns\n");
    }
    out.push_str(&stream_decls(src));
    for g in 0..graphs {
        let _ = writeln!(out, "        cudaGraphExec_t graph{g} = nullptr;");
    }
    out.push_str(LOOP_START);
    if flags {
        out.push_str("            const long iter = step / round;  // the round's number, from 0: flags count rounds\n");
    }
    if setdev {
        out.push_str("            dev = d; CHECK(cudaSetDevice(gpuMapping[d])); lo = device[d].lo; hi = device[d].hi;\n");
    }
    if flags {
        out.push_str(
            "            keep_up(d, iter);  // at most RUN_AHEAD rounds ahead of the slowest thread\n",
        );
    }
    out.push_str(&body);
    out.push_str("        }\n");
    // Each thread waits for its own streams: a cudaDeviceSynchronize would also wait for
    // (and stall) the other threads' devices on the same GPU, and end their graph captures.
    for (s, _) in &src.streams {
        let _ = writeln!(out, "        CHECK(cudaStreamSynchronize({}));", ident(s));
    }
    out.push_str(LOOP_END);
    if nccl {
        out.push_str("    stop_nccl();\n");
    }
    out.push_str(FINISH);
    out
}

/// An NCCL call statement: one line.
fn nccl_call(k: &StmtKind, dev: &str) -> Option<String> {
    Some(match k {
        StmtKind::P2p {
            send,
            buf,
            count,
            peer,
            stream,
        } => format!(
            "CHECK({}({}, floats({}, {}), ncclFloat, {}, comm, {}));",
            if *send { "ncclSend" } else { "ncclRecv" },
            ptr(buf, dev),
            buf.field,
            expr(count),
            expr(peer),
            ident(stream)
        ),
        StmtKind::GroupStart => "CHECK(ncclGroupStart());".into(),
        StmtKind::GroupEnd => "CHECK(ncclGroupEnd());".into(),
        _ => return None,
    })
}

/// Whether the step sends NCCL messages.
pub fn uses_nccl(body: &[Stmt]) -> bool {
    any(body, &|s| {
        matches!(
            s,
            StmtKind::P2p { .. } | StmtKind::GroupStart | StmtKind::GroupEnd
        )
    })
}

fn round_setup(u: &Unit, body: &str) -> String {
    let round = u.src.round.as_ref().map_or("1".to_string(), |(e, _)| expr(e));
    // k only where the step names it (a program of one-cell halos never does).
    let k = if names_word(body, "k") || round != "1" {
        "    // k: the halo's width — at most what every device owns, at most HALO.
    long k = HALO;
    for (int i = 0; i < n; i++) k = std::min(k, device[i].hi - device[i].lo);
    k = std::max(k, 1L);
"
    } else {
        ""
    };
    format!(
        "{k}    const long round = {round};  // steps per round
    const long steps = scenario.steps;
"
    )
}

/// Whether C text `text` has `word` as a whole identifier.
pub(crate) fn names_word(text: &str, word: &str) -> bool {
    text.split(|c: char| !c.is_alphanumeric() && c != '_')
        .any(|w| w == word)
}

/// Each thread's streams, created non-blocking; the `priority` ones at the device's
/// greatest priority.
fn stream_decls(src: &Source) -> String {
    let mut out = String::new();
    if !src.priority.is_empty() {
        out.push_str(
            "        int least_priority, greatest_priority;  // `priority` streams take the greatest\n        \
             CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));\n",
        );
    }
    for (s, _) in &src.streams {
        let _ = writeln!(out, "        cudaStream_t {};", ident(s));
        if src.priority.iter().any(|(p, _)| p == s) {
            let _ = writeln!(
                out,
                "        CHECK(cudaStreamCreateWithPriority(&{}, cudaStreamNonBlocking, greatest_priority));",
                ident(s)
            );
        } else {
            let _ = writeln!(
                out,
                "        CHECK(cudaStreamCreateWithFlags(&{}, cudaStreamNonBlocking));",
                ident(s)
            );
        }
    }
    out
}
