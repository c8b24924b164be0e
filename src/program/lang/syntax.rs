//! The program language's syntax: tokens, then statements, each with where it was written.
//! It reads like the host code of a CUDA program with one OpenMP thread per device: the
//! same statements run on every host thread, with `d` its device (see the README).
//!
//! Hand-written: the grammar is a dozen statement forms, and a recursive-descent parser
//! of a few hundred lines gives every error as one line with its line and column, in our
//! own words; a parser-generator crate would add its own error format and grammar files.

use std::ops::Range;

use super::excerpt;

mod expr;
mod flags;
mod launch;
mod lex;
mod names;
mod nccl;

pub use lex::{SyntaxError, is_line_break, line_end};
use lex::{Tok, err, lex_with_comments};

/// An integer or truth expression over `d`, `n`, `lo`, `hi`, `k` and loop variables.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    Num(i64),
    Var(String, Range<usize>),
    /// `op` is one of `+ - * / % < > <= >= == != && ||`, written at the span.
    Bin(&'static str, Box<Expr>, Box<Expr>, Range<usize>),
    Not(Box<Expr>),
    /// `-x`, the `-` written at the span.
    Neg(Box<Expr>, Range<usize>),
    /// `max(a, b)` or `min(a, b)`.
    Call(&'static str, Box<Expr>, Box<Expr>),
}

/// `name[index]`: one event of a family.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRef {
    pub name: String,
    pub index: Expr,
    pub span: Range<usize>,
}

/// `field + offset`: a cell of a device's field, as a pointer.
#[derive(Debug, Clone, PartialEq)]
pub struct CellPtr {
    pub field: String,
    pub offset: Expr,
}

#[derive(Debug, Clone, PartialEq)]
pub enum StmtKind {
    /// `kernel<<<stream>>>(from, to [, t])`.
    Launch {
        kernel: String,
        stream: String,
        args: Vec<Expr>,
    },
    Record {
        event: EventRef,
        stream: String,
    },
    Wait {
        stream: String,
        event: EventRef,
    },
    /// `cudaMemcpyPeerAsync(dst, dst_device, src, src_device, cells, stream)`.
    Copy {
        dst: CellPtr,
        dst_device: Expr,
        src: CellPtr,
        src_device: Expr,
        count: Expr,
        stream: String,
    },
    StreamSync(String),
    DeviceSync,
    /// `cudaSetDevice(dev)`: the calls after it go to device `dev`.
    SetDevice(Expr),
    /// `int name = value;`: a name for a number, to the end of its block.
    Let(String, Expr),
    /// `cudaEventCreate(&e[i])` (or `…WithFlags(&e[i], cudaEventDisableTiming)`) on the
    /// current device, in the step.
    Create(EventRef),
    /// `cudaEventDestroy(e[i])`.
    Destroy(EventRef),
    Barrier,
    If(Expr, Vec<Stmt>, Vec<Stmt>),
    /// `for (var = from; var < to; var++) { … }`
    For(String, Expr, Expr, Vec<Stmt>),
    /// `cudaGraphLaunch(stream) { launches }`: the launches, built once as a graph.
    Graph(String, Vec<Stmt>),
    GroupStart,
    GroupEnd,
    /// `cuStreamWriteValue32(stream, flag[i], iter + c, 0)` (`wait`: false) or
    /// `cuStreamWaitValue32(stream, flag[i], iter + c, CU_STREAM_WAIT_VALUE_GEQ)`; `value`
    /// may name `iter`, the round's number.
    Flag {
        wait: bool,
        stream: String,
        flag: EventRef,
        value: Expr,
    },
    /// `ncclSend(buf, count, ncclFloat, peer, comm, stream)` or `ncclRecv(…)`.
    P2p {
        send: bool,
        buf: CellPtr,
        count: Expr,
        peer: Expr,
        stream: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Range<usize>,
}

/// A family of events: `name[i]` for each device index, created on device `on` (an
/// expression of `i`; default `i`).
#[derive(Debug, Clone, PartialEq)]
pub struct EventDecl {
    pub name: String,
    pub on: Option<Expr>,
    pub span: Range<usize>,
}

/// A whole program file.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub name: Option<String>,
    pub streams: Vec<(String, Range<usize>)>,
    /// Streams created at the device's greatest priority (`priority compute;`).
    pub priority: Vec<(String, Range<usize>)>,
    pub events: Vec<EventDecl>,
    /// Flag families (`cuuint32_t name[n];`): a word per device, in its memory.
    pub flags: Vec<EventDecl>,
    pub round: Option<(Expr, Range<usize>)>,
    pub step: Vec<Stmt>,
    pub step_span: Range<usize>,
    /// Event families the step creates itself (`cudaEventCreate`): not created at setup.
    pub manual: Vec<String>,
    /// The `//` comments, in order: each from its `//` to its line's end (the line break,
    /// `\n` or `\r`, excluded), as the lexer read them.
    pub comments: Vec<Range<usize>>,
    /// How many of `comments` come before the file's first word: what it is about.
    pub lead: usize,
}

pub const KERNELS: [&str; 8] = [
    "update_h",
    "update_e",
    "sources_boundaries",
    "fused_steps",
    "fused_save",
    "fused_boundary",
    "fused_interior",
    "fused_store",
];
pub const FIELDS: [&str; 2] = ["ex", "hy"];
pub const VARS: [&str; 6] = ["d", "n", "lo", "hi", "k", "dev"];

/// How deep statements (`if`, `for`, graphs) and, separately, parentheses and unary
/// operators may nest: deeper is refused, so that neither the parser nor the instance
/// recurses without bound (20,000 nested `if (1)` would overflow the stack).
pub const MAX_NESTING: usize = 64;

/// The most operands and operators in one expression (a sum of 100,000 terms is a tree
/// 100,000 deep).
pub const MAX_EXPR_NODES: usize = 1024;

struct Parser {
    toks: Vec<(Tok, Range<usize>)>,
    at: usize,
    end: usize,
    /// Names in scope: streams, event and flag families, loop variables.
    streams: Vec<String>,
    events: Vec<String>,
    flags: Vec<String>,
    loops: Vec<String>,
    /// Statements and expressions open around the parser's position.
    stmt_depth: usize,
    expr_depth: usize,
    /// Operands and operators of the expression being read.
    expr_nodes: usize,
    /// Whether names are the program's (`d`, `n`, … and its loop variables); else only
    /// `loops` (an annotation's parameters: [`parse_expr`]).
    program: bool,
}

/// Parses a program file.
pub fn parse(text: &str) -> Result<Source, SyntaxError> {
    let mut comments = Vec::new();
    let toks = lex_with_comments(text, &mut comments)?;
    let first = toks.first().map_or(text.len(), |t| t.1.start);
    let lead = comments.iter().take_while(|c| c.start < first).count();
    let mut p = Parser {
        toks,
        at: 0,
        end: text.len(),
        streams: Vec::new(),
        events: Vec::new(),
        flags: Vec::new(),
        loops: Vec::new(),
        stmt_depth: 0,
        expr_depth: 0,
        expr_nodes: 0,
        program: true,
    };
    let mut src = p.source()?;
    src.comments = comments;
    src.lead = lead;
    Ok(src)
}

/// Parses `text` as one expression of the program language whose only names are `names`
/// (a kernel annotation's parameters), bounded as a program's expressions are
/// ([`MAX_NESTING`], [`MAX_EXPR_NODES`]). No comments or directives inside.
pub fn parse_expr(text: &str, names: &[String]) -> Result<Expr, SyntaxError> {
    let comment = [text.find('#'), text.find("//"), text.find("/*")];
    if let Some(i) = comment.into_iter().flatten().min() {
        return err(i..i + 1, "a comment or directive has no place in an expression");
    }
    let mut p = Parser {
        toks: lex_with_comments(text, &mut Vec::new())?,
        at: 0,
        end: text.len(),
        streams: Vec::new(),
        events: Vec::new(),
        flags: Vec::new(),
        loops: names.to_vec(),
        stmt_depth: 0,
        expr_depth: 0,
        expr_nodes: 0,
        program: false,
    };
    let e = p.expr()?;
    if p.peek().is_some() {
        let found = p.describe();
        return err(
            p.span(),
            format!("expected the end of the expression, found {found}"),
        );
    }
    Ok(e)
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at).map(|t| &t.0)
    }

    fn span(&self) -> Range<usize> {
        self.toks.get(self.at).map_or(self.end..self.end, |t| t.1.clone())
    }

    fn prev_end(&self) -> usize {
        self.at
            .checked_sub(1)
            .and_then(|i| self.toks.get(i))
            .map_or(0, |t| t.1.end)
    }

    fn is_sym(&self, s: &str) -> bool {
        matches!(self.peek(), Some(Tok::Sym(x)) if *x == s)
    }

    /// Takes the word `s` if it comes next.
    fn eat_ident(&mut self, s: &str) -> bool {
        let yes = matches!(self.peek(), Some(Tok::Ident(x)) if x == s);
        self.at += usize::from(yes);
        yes
    }

    fn eat_sym(&mut self, s: &str) -> bool {
        let yes = self.is_sym(s);
        self.at += usize::from(yes);
        yes
    }

    fn expect(&mut self, s: &str, what: &str) -> Result<(), SyntaxError> {
        if self.eat_sym(s) {
            return Ok(());
        }
        let found = self.describe();
        err(self.span(), format!("expected `{s}` {what}, found {found}"))
    }

    fn describe(&self) -> String {
        match self.peek() {
            None => "the end of the file".into(),
            Some(Tok::Ident(x)) => format!("`{}`", excerpt(x)),
            Some(Tok::Num(n)) => format!("`{n}`"),
            Some(Tok::Sym(s)) => format!("`{s}`"),
            Some(Tok::Barrier) => "`#pragma omp barrier`".into(),
        }
    }

    /// The one word `want` allowed here; anything else is refused with `why`.
    fn fixed_word(&mut self, want: &str, why: &str) -> Result<(), SyntaxError> {
        let (w, sp) = self.ident(want)?;
        if w != want {
            return err(sp, why);
        }
        Ok(())
    }

    fn ident(&mut self, what: &str) -> Result<(String, Range<usize>), SyntaxError> {
        match self.peek() {
            Some(Tok::Ident(x)) => {
                let x = x.clone();
                let span = self.span();
                self.at += 1;
                Ok((x, span))
            }
            _ => err(self.span(), format!("expected {what}, found {}", self.describe())),
        }
    }

    fn source(&mut self) -> Result<Source, SyntaxError> {
        let mut src = Source {
            name: None,
            streams: Vec::new(),
            priority: Vec::new(),
            events: Vec::new(),
            flags: Vec::new(),
            round: None,
            step: Vec::new(),
            step_span: 0..0,
            manual: Vec::new(),
            comments: Vec::new(),
            lead: 0,
        };
        while self.peek().is_some() {
            let (word, span) = self.ident(
                "`program`, `cudaStream_t`, `priority`, `cudaEvent_t`, `cuuint32_t`, `round` or `step`",
            )?;
            match word.as_str() {
                "program" => {
                    let mut name = String::new();
                    while !self.is_sym(";") && self.peek().is_some() {
                        let (part, _) = match self.peek() {
                            Some(Tok::Sym("-")) => {
                                self.at += 1;
                                ("-".to_string(), 0..0)
                            }
                            _ => self.ident("the program's name")?,
                        };
                        name.push_str(&part);
                    }
                    self.expect(";", "after the program's name")?;
                    src.name = Some(name);
                }
                "cudaStream_t" => loop {
                    let (s, sp) = self.ident("a stream's name")?;
                    if self.streams.contains(&s) {
                        return err(sp, format!("stream `{s}` is declared twice"));
                    }
                    self.declare(&s, &sp, "a stream")?;
                    self.streams.push(s.clone());
                    src.streams.push((s, sp));
                    if !self.eat_sym(",") {
                        self.expect(";", "after the streams")?;
                        break;
                    }
                },
                "priority" => loop {
                    let (s, sp) = self.ident("a stream's name")?;
                    if !self.streams.contains(&s) {
                        return err(
                            sp,
                            format!("`{s}`: not a declared stream (`cudaStream_t {s};` first)"),
                        );
                    }
                    if src.priority.iter().any(|(p, _)| *p == s) {
                        return err(sp, format!("stream `{s}` is given priority twice"));
                    }
                    src.priority.push((s, sp));
                    if !self.eat_sym(",") {
                        self.expect(";", "after the streams")?;
                        break;
                    }
                },
                "cudaEvent_t" => self.event_decls(&mut src, false)?,
                "cuuint32_t" => self.event_decls(&mut src, true)?,
                "round" => {
                    let e = self.expr()?;
                    self.expect(";", "after the round's steps")?;
                    src.round = Some((e, span));
                }
                "step" => {
                    if self.streams.is_empty() {
                        return err(span, "declare the streams first: `cudaStream_t compute;`");
                    }
                    src.step = self.block()?;
                    src.step_span = span.start..self.prev_end();
                    created(&src.step, &mut src.manual);
                }
                other => {
                    return err(
                        span,
                        format!(
                            "`{other}`: expected `program`, `cudaStream_t`, `priority`, `cudaEvent_t`, \
                             `cuuint32_t`, `round` or `step`"
                        ),
                    );
                }
            }
        }
        if src.step_span == (0..0) {
            return err(
                self.end..self.end,
                "no `step { … }`: the calls every host thread makes each round",
            );
        }
        Ok(src)
    }

    /// `cudaEvent_t a[n], b[n] on i + 1;` (or `cuuint32_t …` when `flag`: flags) after
    /// its first word.
    fn event_decls(&mut self, src: &mut Source, flag: bool) -> Result<(), SyntaxError> {
        let (what, a) = family(flag);
        loop {
            let (e, sp) = self.ident(&format!("{a}'s name"))?;
            if self.events.contains(&e) || self.flags.contains(&e) || self.streams.contains(&e) {
                return err(sp, format!("`{e}` is declared twice"));
            }
            self.declare(&e, &sp, &format!("{a} family"))?;
            self.expect(
                "[",
                &format!("after the {what}'s name: {what}s come one per device, `name[n]`"),
            )?;
            let (count, csp) = self.ident("`n`")?;
            if count != "n" {
                return err(csp, format!("{a} family has one {what} per device: write `[n]`"));
            }
            self.expect("]", "after `[n`")?;
            let on = if self.eat_ident("on") {
                self.loops.push("i".into());
                let e = self.expr()?;
                self.loops.pop();
                Some(e)
            } else {
                None
            };
            let decl = EventDecl {
                name: e.clone(),
                on,
                span: sp,
            };
            if flag {
                self.flags.push(e);
                src.flags.push(decl);
            } else {
                self.events.push(e);
                src.events.push(decl);
            }
            if !self.eat_sym(",") {
                self.expect(";", &format!("after the {what}s"))?;
                break;
            }
        }
        Ok(())
    }

    fn block(&mut self) -> Result<Vec<Stmt>, SyntaxError> {
        self.expect("{", "to open a block")?;
        // Names an `int` declares live to the end of their block.
        let scope = self.loops.len();
        let mut out = Vec::new();
        while !self.eat_sym("}") {
            if self.peek().is_none() {
                return err(self.span(), "a block that never ends (no `}`)");
            }
            let s = self.stmt();
            if s.is_err() {
                self.loops.truncate(scope);
            }
            out.push(s?);
        }
        self.loops.truncate(scope);
        Ok(out)
    }

    /// One statement, or a block as a list.
    fn body(&mut self) -> Result<Vec<Stmt>, SyntaxError> {
        if self.is_sym("{") {
            self.block()
        } else {
            Ok(vec![self.stmt()?])
        }
    }

    fn stream(&mut self) -> Result<String, SyntaxError> {
        let (s, sp) = self.ident("a stream")?;
        if !self.streams.contains(&s) {
            return err(
                sp,
                format!("unknown stream `{s}` (declared: {})", self.streams.join(", ")),
            );
        }
        Ok(s)
    }

    fn event(&mut self) -> Result<EventRef, SyntaxError> {
        self.member(false)
    }

    /// `name[index]`: one event of a family, or (`flag`) one flag.
    fn member(&mut self, flag: bool) -> Result<EventRef, SyntaxError> {
        let ((what, a), decl) = (family(flag), if flag { "cuuint32_t" } else { "cudaEvent_t" });
        let (name, sp) = self.ident(a)?;
        let declared = if flag { &self.flags } else { &self.events };
        if !declared.contains(&name) {
            let known = if declared.is_empty() {
                format!("none declared: `{decl} name[n];`")
            } else {
                format!("declared: {}", declared.join(", "))
            };
            return err(sp, format!("unknown {what} `{name}` ({known})"));
        }
        self.expect(
            "[",
            &format!("after the {what}'s name: which device's, e.g. `[d]`"),
        )?;
        let index = self.expr()?;
        self.expect("]", &format!("after the {what}'s index"))?;
        Ok(EventRef {
            name,
            index,
            span: sp.start..self.prev_end(),
        })
    }

    fn cell_ptr(&mut self) -> Result<CellPtr, SyntaxError> {
        let (field, sp) = self.ident("a field, `ex` or `hy`")?;
        if !FIELDS.contains(&field.as_str()) {
            return err(sp, format!("unknown field `{field}`: the fields are ex and hy"));
        }
        self.expect("+", "after the field: a cell is `field + index`")?;
        let offset = self.term()?;
        Ok(CellPtr { field, offset })
    }

    fn stmt(&mut self) -> Result<Stmt, SyntaxError> {
        if self.stmt_depth >= MAX_NESTING {
            return err(
                self.span(),
                format!("statements nested more than {MAX_NESTING} deep: write it flatter"),
            );
        }
        self.stmt_depth += 1;
        let s = self.one_stmt();
        self.stmt_depth -= 1;
        s
    }

    fn one_stmt(&mut self) -> Result<Stmt, SyntaxError> {
        let start = self.span().start;
        if matches!(self.peek(), Some(Tok::Barrier)) {
            self.at += 1;
            return Ok(Stmt {
                kind: StmtKind::Barrier,
                span: start..self.prev_end(),
            });
        }
        let (word, sp) = self.ident("a statement")?;
        let kind = match word.as_str() {
            "if" => return self.if_stmt(start),
            "for" => return self.for_stmt(start),
            "cudaGraphLaunch" => return self.graph_stmt(start),
            k if KERNELS.contains(&k) => self.launch(k, sp)?,
            "cudaEventRecord" => {
                self.expect("(", "after cudaEventRecord")?;
                let event = self.event()?;
                self.expect(",", "after the event")?;
                let stream = self.stream()?;
                self.expect(")", "after the stream")?;
                StmtKind::Record { event, stream }
            }
            "cudaStreamWaitEvent" => {
                self.expect("(", "after cudaStreamWaitEvent")?;
                let stream = self.stream()?;
                self.expect(",", "after the stream")?;
                let event = self.event()?;
                if self.eat_sym(",") {
                    match self.peek() {
                        Some(Tok::Num(0)) => self.at += 1,
                        _ => return err(self.span(), "the flags of cudaStreamWaitEvent: 0"),
                    }
                }
                self.expect(")", "after the event")?;
                StmtKind::Wait { stream, event }
            }
            "cudaMemcpyPeerAsync" => self.copy_call()?,
            "cudaStreamSynchronize" => {
                self.expect("(", "after cudaStreamSynchronize")?;
                let s = self.stream()?;
                self.expect(")", "after the stream")?;
                StmtKind::StreamSync(s)
            }
            "cudaDeviceSynchronize" => {
                self.expect("(", "after cudaDeviceSynchronize")?;
                self.expect(")", "cudaDeviceSynchronize takes no arguments")?;
                StmtKind::DeviceSync
            }
            "int" => {
                let (name, nsp) = self.ident("a name")?;
                if VARS.contains(&name.as_str()) || self.loops.contains(&name) {
                    return err(nsp, format!("`{name}` is taken: choose another name"));
                }
                self.declare(&name, &nsp, "a number")?;
                self.expect("=", "after the name: `int name = value;`")?;
                let e = self.expr()?;
                self.loops.push(name.clone());
                StmtKind::Let(name, e)
            }
            "cudaSetDevice" => {
                self.expect("(", "after cudaSetDevice")?;
                let e = self.expr()?;
                self.expect(")", "after the device")?;
                StmtKind::SetDevice(e)
            }
            "cudaEventCreate" | "cudaEventCreateWithFlags" | "cudaEventDestroy" => self.event_life(&word)?,
            "ncclGroupStart" | "ncclGroupEnd" | "ncclSend" | "ncclRecv" => self.nccl_call(&word)?,
            "cuStreamWriteValue32" | "cuStreamWaitValue32" => self.flag_call(&word)?,
            other => {
                return err(
                    sp,
                    format!(
                        "unknown call `{other}` (kernels: {}; cudaEventRecord, cudaStreamWaitEvent, \
                         cudaMemcpyPeerAsync, cudaStreamSynchronize, cudaDeviceSynchronize, \
                         cudaSetDevice, cudaEventCreate, cudaEventDestroy, cudaGraphLaunch, \
                         cuStreamWriteValue32, cuStreamWaitValue32, ncclGroupStart, ncclGroupEnd, \
                         ncclSend, ncclRecv, #pragma omp barrier, if, for)",
                        KERNELS.join(", ")
                    ),
                );
            }
        };
        self.expect(";", "after the call")?;
        Ok(Stmt {
            kind,
            span: start..self.prev_end(),
        })
    }

    /// `if (cond) … else …`, after `if`.
    fn if_stmt(&mut self, start: usize) -> Result<Stmt, SyntaxError> {
        self.expect("(", "after `if`")?;
        let c = self.expr()?;
        self.expect(")", "after the condition")?;
        let then = self.body()?;
        let otherwise = if self.eat_ident("else") {
            self.body()?
        } else {
            Vec::new()
        };
        Ok(Stmt {
            kind: StmtKind::If(c, then, otherwise),
            span: start..self.prev_end(),
        })
    }

    /// `for (t = a; t < b; t++) …`, after `for`.
    fn for_stmt(&mut self, start: usize) -> Result<Stmt, SyntaxError> {
        self.expect("(", "after `for`")?;
        self.eat_ident("int");
        let (v, vsp) = self.ident("the loop's variable")?;
        if VARS.contains(&v.as_str()) || self.loops.contains(&v) {
            return err(vsp, format!("`{v}` is taken: name the loop's variable otherwise"));
        }
        self.declare(&v, &vsp, "the loop's variable")?;
        self.expect("=", "after the loop's variable")?;
        let from = self.expr()?;
        self.expect(";", "after the loop's start")?;
        let (v2, v2sp) = self.ident("the loop's variable")?;
        if v2 != v {
            return err(v2sp, format!("the loop's condition must test `{v}`"));
        }
        self.expect("<", "in the loop's condition: `var < end`")?;
        let to = self.expr()?;
        self.expect(";", "after the loop's condition")?;
        let (v3, v3sp) = self.ident("the loop's variable")?;
        if v3 != v {
            return err(v3sp, format!("the loop must count `{v}++`"));
        }
        self.expect("++", "after the loop's variable")?;
        self.expect(")", "to close the loop's header")?;
        self.loops.push(v.clone());
        let body = self.body();
        self.loops.pop();
        Ok(Stmt {
            kind: StmtKind::For(v, from, to, body?),
            span: start..self.prev_end(),
        })
    }

    /// `cudaGraphLaunch(stream) { launches }`, after its name.
    fn graph_stmt(&mut self, start: usize) -> Result<Stmt, SyntaxError> {
        self.expect("(", "after cudaGraphLaunch")?;
        let s = self.stream()?;
        self.expect(")", "after the stream")?;
        let body = self.block()?;
        if let Some(bad) = first_non_launch(&body) {
            return err(bad, "a graph holds kernel launches only");
        }
        Ok(Stmt {
            kind: StmtKind::Graph(s, body),
            span: start..self.prev_end(),
        })
    }

    /// `cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice, cells, stream)`, after its name.
    fn copy_call(&mut self) -> Result<StmtKind, SyntaxError> {
        self.expect("(", "after cudaMemcpyPeerAsync")?;
        let dst = self.cell_ptr()?;
        self.expect(
            ",",
            "after the destination: (dst, dstDevice, src, srcDevice, cells, stream)",
        )?;
        let dst_device = self.expr()?;
        self.expect(",", "after the destination device")?;
        let src = self.cell_ptr()?;
        self.expect(",", "after the source")?;
        let src_device = self.expr()?;
        self.expect(",", "after the source device")?;
        let count = self.expr()?;
        self.expect(",", "after the count of cells")?;
        let stream = self.stream()?;
        self.expect(")", "after the stream")?;
        Ok(StmtKind::Copy {
            dst,
            dst_device,
            src,
            src_device,
            count,
            stream,
        })
    }

    /// `cudaEventCreate(&e[i])`, `cudaEventCreateWithFlags(&e[i], cudaEventDisableTiming)`
    /// or `cudaEventDestroy(e[i])`, after the call's name `word`.
    fn event_life(&mut self, word: &str) -> Result<StmtKind, SyntaxError> {
        self.expect("(", "after the call's name")?;
        if word == "cudaEventDestroy" {
            let event = self.event()?;
            self.expect(")", "after the event")?;
            return Ok(StmtKind::Destroy(event));
        }
        self.expect("&", "before the event: cudaEventCreate(&e[i])")?;
        let event = self.event()?;
        if word == "cudaEventCreateWithFlags" {
            self.expect(",", "after the event")?;
            self.fixed_word(
                "cudaEventDisableTiming",
                "the flags: cudaEventDisableTiming (ordering events measure nothing)",
            )?;
        }
        self.expect(")", "after the event")?;
        Ok(StmtKind::Create(event))
    }
}

/// What a family is called (`flag`: flags, else events), bare and with its article.
fn family(flag: bool) -> (&'static str, &'static str) {
    if flag {
        ("flag", "a flag")
    } else {
        ("event", "an event")
    }
}

/// The event families `body` creates.
fn created(body: &[Stmt], out: &mut Vec<String>) {
    for s in body {
        match &s.kind {
            StmtKind::Create(e) if !out.contains(&e.name) => out.push(e.name.clone()),
            StmtKind::If(_, a, b) => {
                created(a, out);
                created(b, out);
            }
            StmtKind::For(_, _, _, b) | StmtKind::Graph(_, b) => created(b, out),
            _ => {}
        }
    }
}

fn first_non_launch(body: &[Stmt]) -> Option<Range<usize>> {
    body.iter().find_map(|s| match &s.kind {
        StmtKind::Launch { .. } => None,
        StmtKind::For(_, _, _, b) => first_non_launch(b),
        _ => Some(s.span.clone()),
    })
}
