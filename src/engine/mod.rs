//! The engine thread: owns the runtime and the reference run, obeys a control channel, and
//! publishes the latest [`Picture`] for the UI. It never waits for the UI: a frame replaces
//! the previous one if the UI has not taken it yet.

use anyhow::Result;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, bounded, unbounded};

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::decomp::Reference;
use crate::geometry::Coefficients;
use crate::memory::OutOfMemory;
use crate::program::{Mode, Program, ProgramFile};
use crate::runtime::{MicroView, OpError, Runtime, RuntimeChoice, start};
use crate::scenario::Scenario;
use crate::snapshot::Partial;
use crate::trace::TraceRecord;

mod follow;
mod goal;
mod inspect;
mod pace;
mod parts;
mod picture;
mod plot;
mod to_goal;
use follow::Follower;
pub use goal::{Goal, GoalState, REACHED};
use parts::{Code, Comparison, Pacing, Shown};
pub use picture::{CellInfo, CodePart, CopyHistory, Picture, PlotPart, RunPart, TracePart};

/// A frame's time: about 30 frames a second.
const FRAME: Duration = Duration::from_millis(33);

/// What the UI can ask of the engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Control {
    TogglePause,
    /// Run exactly one more step, then pause.
    Step,
    /// Issue exactly one more API call, then pause.
    MicroStep,
    /// Switch ordering mode, continuing from the current fields.
    SetMode(Mode),
    /// Back to step 0 in the current mode.
    Reset,
    /// Steps per second; `None`: as fast as possible.
    SetSpeed(Option<f64>),
    /// Number of screen columns the field plot has.
    Columns(usize),
    /// Text rows the field plot has (a 2D grid's heat map fits them).
    Rows(usize),
    /// Inspect this global cell in every frame (`None`: stop).
    Inspect(Option<usize>),
    /// Run (at the current speed) until the goal is met or missed, then pause.
    RunUntil(Goal),
    /// Run this program file from the next step boundary, on the current fields (a file
    /// that does not fit the decomposition is said in the frame; the run goes on).
    SetFile(Arc<ProgramFile>),
    /// A program file that could not be read, in one line (the run goes on).
    FileError(String),
    Quit,
}

/// Starting point of an engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub scenario: Scenario,
    pub mode: Mode,
    /// A program file to run instead of `mode` (until a mode is chosen).
    pub file: Option<Arc<ProgramFile>>,
    pub runtime: RuntimeChoice,
    pub running: bool,
    pub speed: Option<f64>,
    pub columns: usize,
    /// Text rows of the field plot (a 2D heat map fits them).
    pub rows: usize,
    /// Test-only: make a device thread panic at this step.
    pub inject_panic: Option<u64>,
}

/// Handle to the engine thread.
pub struct Engine {
    control: Sender<Control>,
    /// A message arrives here whenever a new frame is waiting.
    pub ping: Receiver<()>,
    mailbox: Arc<Mutex<Option<Box<Picture>>>>,
    handle: Option<JoinHandle<()>>,
}

impl Engine {
    /// Starts an engine on a new runtime; a runtime that cannot start (no GPU) shows its
    /// error in the first frame. Use [`Engine::start_with`] to report it before the UI.
    /// Fails only when the reference's memory cannot be allocated.
    pub fn start(cfg: EngineConfig) -> Result<Engine, OutOfMemory> {
        // A file that does not fit is said in the first frame, over the mode's program.
        let (program, started) = match crate::program::build_for(cfg.mode, cfg.file.as_deref(), &cfg.scenario)
        {
            Ok(p) => {
                let p = Arc::new(p);
                let started = start(&cfg.runtime, &cfg.scenario, p.clone(), true);
                (p, started)
            }
            Err(e) => {
                let p = cfg.mode.program(&cfg.scenario.ranges()).on(&cfg.scenario);
                (Arc::new(p), Err(e.into()))
            }
        };
        match started {
            Ok(b) => Engine::start_with(cfg, program, b),
            Err(e) => {
                let mut core = Core::new(cfg, program, Box::new(Placeholder))?;
                core.fail(e);
                Ok(Engine::spawn(core))
            }
        }
    }

    /// Starts an engine on `backend`, created by [`start`] for `cfg` and `program`.
    pub fn start_with(
        cfg: EngineConfig,
        program: Arc<Program>,
        backend: Box<dyn Runtime>,
    ) -> Result<Engine, OutOfMemory> {
        let mut core = Core::new(cfg, program, backend)?;
        core.advance_to(0); // the setup calls (event creation)
        Ok(Engine::spawn(core))
    }

    fn spawn(mut core: Core) -> Engine {
        let (control, control_rx) = unbounded();
        let (ping_tx, ping) = bounded(1);
        let mailbox = Arc::new(Mutex::new(None));
        let slot = mailbox.clone();
        let handle = std::thread::Builder::new()
            .name("engine".into())
            .spawn(move || {
                core.run(control_rx, |frame| {
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(frame));
                    let _ = ping_tx.try_send(());
                });
            })
            .expect("spawn the engine thread");
        Engine {
            control,
            ping,
            mailbox,
            handle: Some(handle),
        }
    }

    pub fn send(&self, c: Control) {
        let _ = self.control.send(c);
    }

    /// The newest frame, if one arrived since the last call.
    pub fn take_frame(&self) -> Option<Box<Picture>> {
        self.mailbox.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.control.send(Control::Quit);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The engine's own state (lives on the engine thread).
struct Core {
    cfg: EngineConfig,
    backend: Box<dyn Runtime>,
    code: Code,
    cmp: Comparison,
    pacing: Pacing,
    shown: Shown,
    error: Option<OpError>,
    failure: Option<String>,
    /// Where the run was sent, and how far it has come.
    goal: Option<GoalState>,
}

impl Core {
    fn new(cfg: EngineConfig, program: Arc<Program>, backend: Box<dyn Runtime>) -> Result<Core, OutOfMemory> {
        let s = &cfg.scenario;
        let coefficients = Coefficients::new(s)?;
        let hazards = crate::hazard::check_grouped(s, &program).map(Arc::new);
        Ok(Core {
            code: Code {
                mode: cfg.mode,
                hazards: (program.clone(), hazards),
                program,
                file: cfg.file.clone(),
                refusal: None,
                refused_mode: None,
            },
            cmp: Comparison {
                reference: Follower::new(Reference::new(s, &coefficients)?),
                last_max_diff: Some(0.0),
                inherited: false,
                last_first_diff: None,
                first_diff_seen: Vec::new(),
                inspect: None,
            },
            pacing: Pacing {
                running: cfg.running,
                resume: false,
                speed: cfg.speed,
                step_time: Duration::ZERO,
                rate_mark: (Instant::now(), 0, 0.0),
                step_us: 0.0,
                steps_per_s: 0.0,
            },
            shown: Shown {
                columns: cfg.columns.max(1),
                rows: cfg.rows.max(1),
                copies: vec![Default::default(); s.split.len()],
                scale: 1e-3,
            },
            backend,
            error: None,
            failure: None,
            goal: None,
            cfg,
        })
    }

    fn step(&self) -> u64 {
        self.backend.step()
    }

    fn stopped(&self) -> bool {
        self.error.is_some() || self.failure.is_some()
    }

    fn run(&mut self, control: Receiver<Control>, mut publish: impl FnMut(Picture)) {
        // When the last frame began to be built: the next is out 33 ms later.
        let mut last_start = Instant::now();
        publish(self.frame());
        // What building the last frame took (the reference catching up, the reduction):
        // the runtime's slice shrinks by it; and on a grid whose frames take longer than a
        // frame's time, fewer steps a frame, so that frames keep coming about 30 a second.
        let mut frame_cost = Duration::ZERO;
        let (mut per_frame, mut published_at) = (u64::MAX, 0u64);
        let mut pace = (Instant::now(), self.step());
        loop {
            // Wait for a control message: briefly while running, for ever while paused.
            let timeout = if self.pacing.running && !self.stopped() {
                self.pacing
                    .speed
                    .map_or(Duration::ZERO, |sp| Duration::from_secs_f64((1.0 / sp).min(0.05)))
            } else {
                Duration::from_secs(3600)
            };
            let (mut changed, mut capped) = (false, false);
            let first = match control.recv_timeout(timeout) {
                Ok(c) => Some(c),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            for c in first.into_iter().chain(control.try_iter()) {
                if c == Control::Quit {
                    return;
                }
                self.control(c);
                changed = true;
                pace = (Instant::now(), self.step());
            }
            if self.pacing.running && !self.stopped() {
                // Steps due at this speed, at most ~20 ms of work per batch.
                let now = self.step();
                let due = match self.pacing.speed {
                    Some(sp) => (pace.1 + (pace.0.elapsed().as_secs_f64() * sp) as u64).saturating_sub(now),
                    None => u64::MAX,
                }
                .min(per_frame.saturating_sub(now.saturating_sub(published_at)));
                // Capped: the frame is due now.
                capped = self.pacing.speed.is_none() && due == 0;
                changed |= capped;
                // Steps until the next frame must begin, none that would make it late
                // (at least one a frame, however long a step takes).
                let left = FRAME.saturating_sub(last_start.elapsed() + frame_cost);
                let late = left <= self.pacing.step_time && now > published_at;
                changed |= late;
                if due > 0 && !late {
                    let slice = left.clamp(Duration::from_millis(2), Duration::from_millis(20));
                    match self.goal {
                        Some(GoalState::Running(g)) => self.advance_goal(g, due, slice),
                        _ => self.advance_timed(due, slice),
                    }
                    changed = true;
                }
            }
            let left = FRAME.saturating_sub(last_start.elapsed() + frame_cost);
            if changed && (left <= self.pacing.step_time || !self.pacing.running || capped) {
                let t = Instant::now();
                publish(self.frame());
                frame_cost = t.elapsed();
                let steps = self.step().saturating_sub(published_at);
                let cycle = last_start.elapsed();
                per_frame = pace::steps_per_frame(per_frame, steps, cycle, self.pacing.running);
                (last_start, published_at) = (t, self.step());
            }
        }
    }

    fn control(&mut self, c: Control) {
        match c {
            Control::TogglePause => self.pacing.running = !self.pacing.running && !self.stopped(),
            Control::Step => {
                self.pacing.running = false;
                if !self.stopped() {
                    let target = self.step() + 1;
                    self.advance_to(target);
                }
            }
            Control::MicroStep => {
                self.pacing.running = false;
                if !self.stopped() {
                    // A micro-step the runtime cannot make (across processes) is refused, not
                    // a failure: the run goes on.
                    match self.backend.micro_step() {
                        Err(e) if e.downcast_ref::<crate::error::UsageError>().is_some() => {
                            self.code.refusal = Some(format!("{e:#}"));
                        }
                        r => self.check(r),
                    }
                    self.collect_copies();
                }
            }
            Control::SetMode(m) => self.switch_mode(m),
            Control::SetFile(f) => self.switch_file(f),
            Control::FileError(e) => self.code.refusal = Some(e),
            Control::Reset => self.reset(self.code.mode, self.code.file.clone()),
            Control::SetSpeed(s) => self.pacing.speed = s,
            Control::Columns(c) => self.shown.columns = c.max(1),
            Control::Rows(r) => self.shown.rows = r.max(1),
            Control::Inspect(c) => self.cmp.inspect = c.filter(|&k| k < self.cfg.scenario.total_cells()),
            Control::RunUntil(g) => {
                self.goal = Some(GoalState::Running(g));
                self.pacing.running = !self.stopped();
                if self.stopped() {
                    self.goal = Some(GoalState::Failed(g, self.step()));
                }
            }
            Control::Quit => {}
        }
    }

    /// Back to step 0 running `mode`, or `file` when there is one.
    fn reset(&mut self, mode: Mode, file: Option<Arc<ProgramFile>>) {
        if let Some(w) = crate::world::process().world {
            self.pacing.running = false;
            self.code.refusal = Some(format!(
                "across processes the {} ranks started together, and starting again needs them \
                 all: quit (q) and launch again",
                w.size
            ));
            return;
        }
        let keep = (
            self.pacing.running,
            self.pacing.speed,
            self.shown.columns,
            self.shown.rows,
            self.cmp.inspect,
        );
        let mut cfg = self.cfg.clone();
        cfg.mode = mode;
        cfg.file = file;
        // The old runtime goes first: a GPU's memory is not held twice.
        self.backend = Box::new(Placeholder);
        let made = crate::program::build_for(mode, cfg.file.as_deref(), &cfg.scenario)
            .map_err(anyhow::Error::from)
            .and_then(|p| {
                let program = Arc::new(p);
                let b = start(&cfg.runtime, &cfg.scenario, program.clone(), true)?;
                Ok(Core::new(cfg, program, b)?)
            });
        match made {
            Ok(core) => {
                *self = core;
                (
                    self.pacing.running,
                    self.pacing.speed,
                    self.shown.columns,
                    self.shown.rows,
                    self.cmp.inspect,
                ) = keep;
                self.advance_to(0);
            }
            Err(e) => {
                // The old run's error is over; this one is what stands now.
                self.error = None;
                let what = self.cfg.runtime.name();
                self.fail(e.context(format!("starting the {what} runtime again")));
            }
        }
    }

    /// Continues from the current fields under another mode (from step 0 after a failure).
    fn switch_mode(&mut self, mode: Mode) {
        let program = mode.program(&self.cfg.scenario.ranges()).on(&self.cfg.scenario);
        self.switch_program(mode, None, program);
    }

    /// Continues from the current fields under a program file; one that does not fit the
    /// decomposition is said in the frame, and the current program goes on.
    fn switch_file(&mut self, file: Arc<ProgramFile>) {
        match file.instantiate(&self.cfg.scenario.ranges()) {
            Ok(program) => {
                self.code.refusal = None;
                let program = program.on(&self.cfg.scenario);
                self.switch_program(self.code.mode, Some(file), program);
            }
            Err(e) => self.code.refusal = Some(e.to_string()),
        }
    }

    /// Continues from the current fields under `program` (from step 0 after a failure).
    fn switch_program(&mut self, mode: Mode, file: Option<Arc<ProgramFile>>, program: Program) {
        // A program this runtime cannot run is refused here, the current one going on.
        if let Some(why) = self.backend.refuses(&program) {
            self.code.refusal = Some(why);
            self.code.refused_mode = Some(mode);
            return;
        }
        (self.code.refusal, self.code.refused_mode) = (None, None);
        if self.stopped() {
            // From step 0; running on if the failure stopped a running run.
            let resume = self.pacing.resume;
            self.reset(mode, file);
            self.pacing.running |= resume && !self.stopped();
            return;
        }
        // Finish the step in progress under the old program.
        let target = self.backend.next_boundary();
        self.advance_to(target);
        if self.stopped() {
            return self.reset(mode, file);
        }
        let program = Arc::new(program);
        self.cmp.inherited |= self.cmp.last_max_diff.is_some_and(|d| d != 0.0);
        let r = self.backend.set_program(program.clone());
        self.code.program = program;
        self.code.mode = mode;
        self.code.file = file;
        // A new program may start a new clock.
        self.pacing.rate_mark = (Instant::now(), self.step(), self.backend.clock_us());
        self.check(r);
    }

    fn fail(&mut self, e: anyhow::Error) {
        self.pacing.resume = self.pacing.running;
        self.pacing.running = false;
        match e.downcast::<OpError>() {
            Ok(op) => self.error = Some(op),
            Err(e) => {
                let n = self.code.findings(&self.cfg.scenario).map_or(0, |h| h.len());
                let check = crate::program::check_args(self.code.mode, self.code.file.as_deref());
                self.failure = Some(crate::decomp::blame_races(&format!("{e:#}"), n, &check));
            }
        }
    }

    fn check(&mut self, r: Result<()>) {
        if let Err(e) = r {
            self.fail(e);
        }
    }

    /// Runs until `steps` steps are complete, every thread stopping there.
    fn advance_to(&mut self, steps: u64) {
        if let Some(at) = self.cfg.inject_panic
            && steps >= at
        {
            self.backend.inject_panic(0);
        }
        let r = self.backend.run_to(steps);
        self.check(r);
        self.collect_copies();
    }

    /// Up to `steps` steps, in batches, for at most `budget` of real time; then every
    /// thread stops at the next step boundary (as after a `cudaDeviceSynchronize`) so the
    /// frame compares whole steps. Between batches the threads run on undisturbed.
    fn advance_timed(&mut self, steps: u64, budget: Duration) {
        let t0 = Instant::now();
        let mut done = 0;
        while done < steps && !self.stopped() {
            // A batch fills what is left of the budget at the last batch's time per step:
            // few batches, since observing a step copies the state where threads ran past
            // it; none that would overrun it. (Controls are read between slices.)
            let left = budget.saturating_sub(t0.elapsed()).as_secs_f64();
            let per_step = self.pacing.step_time.as_secs_f64();
            if left <= 0.0 || (done > 0 && left < per_step) {
                break;
            }
            let batch = if per_step > 0.0 {
                ((left / per_step) as u64).clamp(1, 1 << 16)
            } else {
                1
            };
            let n = batch.min(steps - done);
            let target = self.step() + n;
            if let Some(at) = self.cfg.inject_panic
                && target >= at
            {
                self.backend.inject_panic(0);
            }
            // The reference steps on in its thread while the batch runs (a run that fails
            // short of the target has no comparison to make).
            if self.compares() {
                self.cmp.reference.follow(target);
            }
            let (t, before) = (Instant::now(), self.step());
            let r = self.backend.run_batch(target);
            self.check(r);
            self.collect_copies();
            // A program of rounds completes whole rounds: count the steps it ran, not the
            // ones asked for (small batches under load would otherwise run `steps` rounds).
            let ran = self.step().saturating_sub(before).max(n);
            done += ran;
            self.pacing.step_time = t.elapsed() / u32::try_from(ran).unwrap_or(u32::MAX);
        }
        if !self.stopped() {
            let boundary = self.backend.next_boundary();
            self.advance_to(boundary);
        }
    }

    fn collect_copies(&mut self) {
        let copies = &mut self.shown.copies;
        self.backend.drain_copies(&mut |src, dst, bytes, us| {
            let dir = usize::from(src > dst);
            copies[dst][dir].push(us, bytes);
        });
    }

    fn frame(&mut self) -> Picture {
        let step = self.step();
        let boundary = self.backend.at_boundary();
        // The reference follows the run to every step boundary.
        let compare = self.compares();
        let reference = self.reference_now(compare);
        let (edges, (columns, max_diff, first_diff), finite) = self.reduce_fields(reference.as_ref());

        if reference.is_some() {
            self.cmp.last_max_diff = Some(max_diff);
            self.cmp.last_first_diff = first_diff;
            if self.cmp.first_diff_seen.len() != columns.len() {
                self.cmp.first_diff_seen = vec![None; columns.len()];
            }
            for (seen, c) in self.cmp.first_diff_seen.iter_mut().zip(&columns) {
                if c.diff > 0.0 && seen.is_none() {
                    *seen = Some(step);
                }
            }
        } else if !compare {
            self.cmp.last_max_diff = None;
        }
        for c in &columns {
            let m = c.ex.0.abs().max(c.ex.1.abs()).max(c.hy.0.abs()).max(c.hy.1.abs());
            if m.is_finite() {
                self.shown.scale = self.shown.scale.max(m);
            }
        }
        // A run that blew up stops here, saying where: it is never "bit-identical". (Where
        // the reduction saw every value finite, there is nothing to look for: a value
        // that stopped being a number does not become one again.)
        if boundary
            && self.failure.is_none()
            && !finite
            && let Some(why) = self.backend.non_finite()
        {
            self.pacing.running = false;
            self.failure = Some(format!("{why}; r starts again"));
        }
        // Rates since the previous frame.
        let (t, st, clock) = self.pacing.rate_mark;
        let h = self.backend.clock_us();
        if step > st {
            self.pacing.step_us = (h - clock) / (step - st) as f64;
            self.pacing.steps_per_s = (step - st) as f64 / t.elapsed().as_secs_f64().max(1e-9);
        }
        // Paused (a goal reached, a step taken): no rate, not the last one's, which no later
        // frame would replace.
        if !self.pacing.running {
            self.pacing.steps_per_s = 0.0;
        }
        self.pacing.rate_mark = (Instant::now(), step, h);
        let (timeline, timeline_step) = self.backend.timeline();
        // Queues and events matter when paused (micro-stepping), not while running.
        let mut micro = self.backend.micro(!self.pacing.running);
        if boundary {
            micro.next = None;
        }
        let inspected = self.inspected(step, &edges, &timeline);
        let run = self.run_part(step);
        let plot = PlotPart {
            columns,
            heat: edges.heat(),
            size: (self.shown.columns, self.shown.rows),
            scale: self.shown.scale,
            max_diff: if boundary { self.cmp.last_max_diff } else { None },
            first_diff: self.cmp.last_first_diff,
            inspected,
        };
        let trace = TracePart {
            records: timeline,
            step: timeline_step,
            copies: self.shown.copies.clone(),
        };
        let code = self.code_part(micro);
        Picture {
            run,
            plot,
            trace,
            code,
        }
    }

    /// The run's part of a picture at step `step`.
    fn run_part(&self, step: u64) -> RunPart {
        let s = &self.cfg.scenario;
        RunPart {
            scenario: s.name.clone(),
            runtime: self.backend.name(),
            clock_modelled: self.backend.clock_is_modelled(),
            cells: s.cells,
            split: s.split.clone(),
            grid: crate::geometry::Grid::of(s),
            step,
            running: self.pacing.running,
            speed: self.pacing.speed,
            step_us: self.pacing.step_us,
            steps_per_s: self.pacing.steps_per_s,
            notes: self.backend.notes(),
            error: self.error.clone(),
            failure: self.failure.clone(),
            goal: self.goal,
            inherited_diff: self.cmp.inherited,
        }
    }

    /// The program's part of a picture, with where each thread stands (`micro`).
    fn code_part(&mut self, micro: MicroView) -> CodePart {
        CodePart {
            mode: self.code.mode,
            program: self.code.program.clone(),
            file: self.code.file.clone(),
            micro,
            hazards: self.code.findings(&self.cfg.scenario),
            refusal: self.code.refusal.clone(),
            refused_mode: self.code.refused_mode,
        }
    }
}

/// Stands in for a runtime while the next one is created.
struct Placeholder;

impl Runtime for Placeholder {
    fn name(&self) -> &'static str {
        "none"
    }
    fn step(&self) -> u64 {
        0
    }
    fn at_boundary(&self) -> bool {
        true
    }
    fn run_batch(&mut self, _: u64) -> Result<()> {
        Err(anyhow::anyhow!("no runtime"))
    }
    fn run_to(&mut self, _: u64) -> Result<()> {
        Err(anyhow::anyhow!("no runtime"))
    }
    fn next_boundary(&self) -> u64 {
        0
    }
    fn micro_step(&mut self) -> Result<()> {
        Err(anyhow::anyhow!("no runtime"))
    }
    fn set_program(&mut self, _: Arc<Program>) -> Result<()> {
        Err(anyhow::anyhow!("no runtime"))
    }
    fn fields(&mut self) -> Result<crate::decomp::Gathered> {
        Err(anyhow::anyhow!("no runtime"))
    }
    fn reduce(
        &mut self,
        _: &Arc<crate::snapshot::Edges>,
        _: Option<&crate::decomp::Reference>,
    ) -> Result<Vec<Partial>> {
        Ok(Vec::new())
    }
    fn drain_copies(&mut self, _: &mut dyn FnMut(usize, usize, usize, f64)) {}
    fn timeline(&self) -> (Vec<TraceRecord>, Option<u64>) {
        (Vec::new(), None)
    }
    fn clock_us(&self) -> f64 {
        0.0
    }
    fn micro(&mut self, _: bool) -> MicroView {
        MicroView::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(mode: Mode) -> Engine {
        Engine::start(EngineConfig {
            file: None,
            scenario: crate::scenario::load(None).unwrap(),
            mode,
            runtime: RuntimeChoice::Sim { jitter: None },
            running: false,
            speed: None,
            columns: 80,
            rows: 12,
            inject_panic: None,
        })
        .unwrap()
    }

    /// Waits for a frame satisfying `ok`.
    fn wait_for(e: &Engine, ok: impl Fn(&Picture) -> bool) -> Box<Picture> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let _ = e.ping.recv_timeout(Duration::from_millis(50));
            if let Some(f) = e.take_frame()
                && ok(&f)
            {
                return f;
            }
            assert!(Instant::now() < deadline, "no matching frame");
        }
    }

    #[test]
    fn step_advances_one_step_and_keeps_the_reference_identical() {
        let e = engine(Mode::Events);
        wait_for(&e, |f| f.run.step == 0);
        e.send(Control::Step);
        let f = wait_for(&e, |f| f.run.step == 1);
        assert_eq!(f.plot.max_diff, Some(0.0));
        assert!(!f.run.running);
        assert_eq!(f.plot.columns.len(), 80);
        assert!(f.trace.records.iter().all(|r| r.step == Some(0)));
    }

    #[test]
    fn micro_step_issues_one_call_and_names_the_next() {
        let e = engine(Mode::Events);
        wait_for(&e, |f| f.run.step == 0);
        e.send(Control::MicroStep);
        let f = wait_for(&e, |f| f.code.micro.next.is_some());
        assert_eq!(f.plot.max_diff, None, "no comparison in the middle of a step");
        // After one call of thread 0's setup, the next call is thread 0's or 1's first.
        let (t, pc) = f.code.micro.next.unwrap();
        assert!(t < 4 && pc < 20);
    }

    #[test]
    fn the_inspector_shows_a_cell_its_reference_when_it_first_differed_and_its_writer() {
        let e = engine(Mode::NoWait);
        e.send(Control::Inspect(Some(500)));
        e.send(Control::TogglePause);
        // no-wait diverges at the boundary (cell 500) within 100 steps.
        let f = wait_for(&e, |f| {
            f.run.step > 150
                && f.plot
                    .inspected
                    .as_ref()
                    .is_some_and(|i| i.first_seen_diff.is_some())
        });
        let info = f.plot.inspected.unwrap();
        assert_eq!((info.cell, info.device), (500, 1));
        assert!(info.first_seen_diff.unwrap() <= f.run.step);
        let w = info
            .written_by
            .expect("a kernel or copy wrote it in the shown steps");
        assert!(w.contains("thread 1") || w.contains("copy"), "{w}");
        e.send(Control::Inspect(None));
        wait_for(&e, |f| f.plot.inspected.is_none());
    }

    #[test]
    fn switching_mode_continues_from_the_current_step() {
        let e = engine(Mode::Events);
        e.send(Control::TogglePause);
        let f = wait_for(&e, |f| f.run.step > 150);
        e.send(Control::SetMode(Mode::NoWait));
        e.send(Control::TogglePause);
        let g = wait_for(&e, |g| g.code.mode == Mode::NoWait && !g.run.running);
        assert!(g.run.step >= f.run.step, "the step count goes on");
        e.send(Control::TogglePause);
        let h = wait_for(&e, |h| {
            h.run.step > g.run.step + 100 && h.plot.max_diff.is_some_and(|d| d > 0.0)
        });
        assert!(h.plot.first_diff.is_some());
    }

    #[test]
    fn an_edited_file_swaps_the_program_at_a_step_boundary_on_the_same_fields() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mine.halo");
        let load = |text: &str| {
            std::fs::write(&path, text).unwrap();
            Arc::new(ProgramFile::load(&path).unwrap())
        };
        let e = engine(Mode::Events);
        e.send(Control::SetFile(load(Mode::Events.source())));
        for _ in 0..700 {
            e.send(Control::Step);
        }
        let f = wait_for(&e, |f| f.run.step == 700);
        assert_eq!((f.program_name(), f.plot.max_diff), ("events", Some(0.0)));
        // The file edited into overlap: the next step runs it, from step 700's fields.
        e.send(Control::SetFile(load(
            &Mode::Overlap
                .source()
                .replace("program overlap;", "program mine;"),
        )));
        e.send(Control::Step);
        let g = wait_for(&e, |g| g.run.step == 701);
        assert_eq!(g.program_name(), "mine");
        assert_eq!(g.code.program.stream_names, vec!["compute", "copy"]);
        assert_eq!(g.plot.max_diff, Some(0.0), "the fields carried over, bit for bit");
        // Edited into a file that does not parse: said, and the run goes on with "mine".
        e.send(Control::FileError("mine.halo:3:1: unknown call `oops`".into()));
        e.send(Control::Step);
        let h = wait_for(&e, |h| h.run.step == 702);
        assert_eq!(h.program_name(), "mine");
        assert!(h.code.refusal.as_deref().is_some_and(|m| m.contains("oops")));
        // Edited into no-wait: the race shows once the pulse reaches a boundary.
        e.send(Control::SetFile(load(Mode::NoWait.source())));
        e.send(Control::TogglePause);
        let k = wait_for(&e, |k| k.plot.max_diff.is_some_and(|d| d > 0.0));
        assert_eq!(k.program_name(), "no-wait");
        assert!(k.code.refusal.is_none());
    }

    #[test]
    fn switching_between_correct_modes_stays_bit_identical() {
        // The pulse's early tail is tiny but not zero: a source seeing the wrong step
        // after the switch shows here.
        let e = engine(Mode::Events);
        for _ in 0..3 {
            e.send(Control::Step);
        }
        e.send(Control::SetMode(Mode::HostSync));
        for _ in 0..5 {
            e.send(Control::Step);
        }
        let f = wait_for(&e, |f| f.run.step == 8 && f.code.mode == Mode::HostSync);
        assert_eq!(f.plot.max_diff, Some(0.0));
    }

    #[test]
    fn the_modelled_time_per_step_goes_on_after_a_mode_switch() {
        // The new program's clock starts at 0: shown as is, the first steps after the
        // switch would take "0.0 µs".
        let e = engine(Mode::Events);
        for _ in 0..40 {
            e.send(Control::Step);
        }
        wait_for(&e, |f| f.run.step == 40);
        e.send(Control::SetMode(Mode::HostSync));
        e.send(Control::Step);
        let f = wait_for(&e, |f| f.run.step == 41 && f.code.mode == Mode::HostSync);
        assert!(
            f.run.step_us > 1.0,
            "{} µs per step after the switch",
            f.run.step_us
        );
    }

    #[test]
    fn modes_of_rounds_step_a_whole_round_and_continue_any_run_bit_identically() {
        // From step 3 under events, the fused mode's rounds start at 3: 19, 35.
        let e = engine(Mode::Events);
        for _ in 0..3 {
            e.send(Control::Step);
        }
        e.send(Control::SetMode(Mode::Fused));
        e.send(Control::Step);
        let f = wait_for(&e, |f| f.code.mode == Mode::Fused && f.run.step == 19);
        assert_eq!(f.plot.max_diff, Some(0.0));
        e.send(Control::SetMode(Mode::Graph));
        e.send(Control::Step);
        let g = wait_for(&e, |f| f.code.mode == Mode::Graph && f.run.step == 35);
        assert_eq!(g.plot.max_diff, Some(0.0));
        assert!(
            g.trace.records.iter().all(|r| r.step == Some(19)),
            "one round's calls"
        );
        // Micro-steps issue one call; the round finishes at its end.
        e.send(Control::MicroStep);
        wait_for(&e, |f| f.code.micro.next.is_some());
        e.send(Control::Step);
        let h = wait_for(&e, |f| f.run.step == 51);
        assert_eq!(h.plot.max_diff, Some(0.0));
    }

    fn core(mode: Mode, jitter: Option<u64>) -> Core {
        let cfg = EngineConfig {
            file: None,
            scenario: crate::scenario::load(None).unwrap(),
            mode,
            runtime: RuntimeChoice::Sim { jitter },
            running: false,
            speed: None,
            columns: 97,
            rows: 12,
            inject_panic: None,
        };
        let program = Arc::new(mode.program(&cfg.scenario.ranges()));
        let backend = start(&cfg.runtime, &cfg.scenario, program.clone(), true).unwrap();
        let mut c = Core::new(cfg, program, backend).unwrap();
        c.advance_to(0);
        c
    }

    /// What a frame at a step boundary shows of the run.
    fn seen(c: &mut Core) -> String {
        let f = c.frame();
        assert!(f.plot.max_diff.is_some(), "a frame at a step boundary compares");
        let last: Vec<String> = c
            .shown
            .copies
            .iter()
            .flatten()
            .map(|h| format!("{:?}", h.recent_us))
            .collect();
        format!(
            "step {} diff {:?} first {:?}\ncolumns {:?}\ntimeline {:?}\ncopies {last:?}",
            f.run.step, f.plot.max_diff, f.plot.first_diff, f.plot.columns, f.trace.records
        )
    }

    #[test]
    fn any_correct_mode_continues_a_run_mid_way_bit_identically() {
        // At step 100 the pulse has crossed device boundaries: a halo cell the old mode
        // never kept fresh (a wide halo after a one-cell mode) would show.
        for to in Mode::all().iter().copied().filter(|m| m.is_correct()) {
            let mut c = core(Mode::Push, None);
            c.advance_to(100);
            c.control(Control::SetMode(to));
            let at = c.step();
            c.advance_to(at + 40);
            assert_eq!(
                c.frame().plot.max_diff,
                Some(0.0),
                "push → {} at step 100",
                to.name()
            );
        }
    }

    #[test]
    fn a_timed_advance_counts_the_steps_a_round_ran_not_the_ones_asked_for() {
        // wide-halo runs rounds of 16 steps: asked for 5 in batches of 1 (a step takes the
        // whole budget), it runs one round.
        let mut c = core(Mode::WideHalo, None);
        c.pacing.step_time = Duration::from_secs(10);
        c.advance_timed(5, Duration::from_secs(10));
        assert_eq!(c.step(), 16);
    }

    #[test]
    fn the_ui_shows_the_same_run_at_step_n_however_it_was_paced() {
        for mode in [Mode::HaloOverwrite, Mode::NoWait, Mode::Overlap, Mode::WideHalo] {
            for jitter in [None, Some(4)] {
                let target = 64;
                let mut once = core(mode, jitter);
                once.advance_to(target);
                let expect = seen(&mut once);
                // Steps, micro-steps, running in batches and frames in between, in a mix.
                let mut mixed = core(mode, jitter);
                let mut i = 0;
                while mixed.step() < target - 16 {
                    match i % 4 {
                        0 => mixed.control(Control::Step),
                        1 => (0..3).for_each(|_| mixed.control(Control::MicroStep)),
                        2 => mixed.advance_timed(5, Duration::from_secs(1)),
                        _ => {
                            let _ = mixed.frame();
                        }
                    }
                    i += 1;
                }
                mixed.advance_to(target);
                assert_eq!(seen(&mut mixed), expect, "{} jitter {jitter:?}", mode.name());
            }
        }
    }

    /// A runtime that fails the way a GPU can: the call at `fail_at` steps is refused.
    struct Refusing {
        step: u64,
        fail_at: u64,
    }

    impl Runtime for Refusing {
        fn name(&self) -> &'static str {
            "cuda"
        }
        fn step(&self) -> u64 {
            self.step
        }
        fn at_boundary(&self) -> bool {
            true
        }
        fn run_batch(&mut self, steps: u64) -> Result<()> {
            self.run_to(steps)
        }
        fn run_to(&mut self, steps: u64) -> Result<()> {
            if steps > self.fail_at {
                self.step = self.fail_at;
                return Err(OpError {
                    step: Some(self.fail_at),
                    thread: 1,
                    op_index: 4,
                    call: "cudaMemcpyPeerAsync(…)".into(),
                    error: "an illegal memory access was encountered".into(),
                    why: "cuMemcpyPeerAsync returned CUDA_ERROR_ILLEGAL_ADDRESS, code 700".into(),
                }
                .into());
            }
            self.step = steps;
            Ok(())
        }
        fn next_boundary(&self) -> u64 {
            self.step
        }
        fn micro_step(&mut self) -> Result<()> {
            // As the cuda runtime across processes answers.
            Err(crate::error::UsageError("micro-stepping needs one process".into()).into())
        }
        fn set_program(&mut self, _: Arc<Program>) -> Result<()> {
            Ok(())
        }
        fn refuses(&self, p: &Program) -> Option<String> {
            (p.name == "nccl").then(|| "NCCL refuses two ranks on one GPU".to_string())
        }
        fn fields(&mut self) -> Result<crate::decomp::Gathered> {
            Ok(crate::decomp::Gathered::default())
        }
        fn reduce(
            &mut self,
            _: &Arc<crate::snapshot::Edges>,
            _: Option<&crate::decomp::Reference>,
        ) -> Result<Vec<Partial>> {
            Ok(Vec::new())
        }
        fn drain_copies(&mut self, each: &mut dyn FnMut(usize, usize, usize, f64)) {
            each(0, 1, 4, 5.5);
        }
        fn timeline(&self) -> (Vec<TraceRecord>, Option<u64>) {
            (Vec::new(), None)
        }
        fn clock_us(&self) -> f64 {
            10.0 * self.step as f64
        }
        fn micro(&mut self, _: bool) -> MicroView {
            MicroView {
                next: Some((1, 2)),
                positions: vec![Some(0), Some(2)],
                ..MicroView::default()
            }
        }
        fn notes(&self) -> Vec<String> {
            vec!["dev0 on GPU 0; peers: dev1 direct".into()]
        }
    }

    #[test]
    fn a_runtime_failure_stops_the_run_and_the_frame_names_the_call() {
        let cfg = EngineConfig {
            file: None,
            scenario: crate::scenario::load(None).unwrap(),
            mode: Mode::Events,
            runtime: RuntimeChoice::Sim { jitter: None },
            running: false,
            speed: None,
            columns: 40,
            rows: 12,
            inject_panic: None,
        };
        let program = Arc::new(cfg.mode.program(&cfg.scenario.ranges()));
        let e = Engine::start_with(cfg, program, Box::new(Refusing { step: 0, fail_at: 3 })).unwrap();
        e.send(Control::Step);
        let f = wait_for(&e, |f| f.run.step == 1);
        assert_eq!((f.run.runtime, f.plot.max_diff), ("cuda", Some(0.0)));
        assert_eq!(f.run.notes, vec!["dev0 on GPU 0; peers: dev1 direct".to_string()]);
        assert_eq!(
            f.trace.copies[1][0].recent_us.back(),
            Some(&5.5),
            "copy times reach the Transfers panel"
        );
        assert_eq!(f.code.micro.next, None, "no next call at a step boundary");
        assert!(
            (f.run.step_us - 10.0).abs() < 1e-9,
            "µs per step from the runtime's clock"
        );
        // A micro-step the runtime refuses is said, and the run is not stopped by it.
        e.send(Control::MicroStep);
        e.send(Control::Step);
        let r = wait_for(&e, |r| r.run.step == 2);
        assert!(
            r.code
                .refusal
                .as_deref()
                .is_some_and(|m| m.contains("one process"))
        );
        assert!(r.run.error.is_none() && r.run.failure.is_none());
        // A mode the runtime cannot run is refused before the switch: the run goes on.
        e.send(Control::SetMode(Mode::Nccl));
        e.send(Control::Step);
        let s = wait_for(&e, |s| s.run.step == 3 && s.code.refused_mode.is_some());
        assert_eq!(
            (s.code.mode, s.code.refused_mode),
            (Mode::Events, Some(Mode::Nccl))
        );
        assert!(
            s.code
                .refusal
                .as_deref()
                .is_some_and(|m| m.contains("two ranks on one GPU"))
        );
        assert!(s.run.error.is_none() && s.run.failure.is_none());
        e.send(Control::TogglePause);
        let g = wait_for(&e, |g| g.run.error.is_some());
        assert!(!g.run.running, "a failure stops the run");
        assert_eq!(g.run.step, 3);
        let err = g.run.error.unwrap();
        assert_eq!((err.thread, err.op_index), (1, 4));
        // Stopped: space does not start it again.
        e.send(Control::TogglePause);
        e.send(Control::Step);
        let h = wait_for(&e, |h| h.run.error.is_some());
        assert!(!h.run.running && h.run.step == 3);
    }

    #[test]
    fn cross_device_record_reports_the_failing_call_and_reset_recovers() {
        let e = engine(Mode::CrossDeviceRecord);
        e.send(Control::Step);
        let f = wait_for(&e, |f| f.run.error.is_some());
        let err = f.run.error.unwrap();
        assert_eq!((err.thread, err.op_index), (0, 1));
        assert!(err.error.contains("invalid resource handle"));
        e.send(Control::SetMode(Mode::Events));
        e.send(Control::Step);
        let g = wait_for(&e, |g| g.code.mode == Mode::Events && g.run.step == 1);
        assert!(g.run.error.is_none());
    }
}
