//! The sim runtime: the scheduler and the compute for one scenario and one program.

use std::collections::HashMap;
use std::sync::Arc;

use super::compute::*;
use super::scheduler::*;
use super::state::*;
use crate::decomp::{DeviceState, Domain, Field, HALO};
use crate::geometry::Coefficients;
use crate::geometry::Grid;
use crate::program::Program;
use crate::scenario::Scenario;
use crate::snapshot::Partial;

/// Devices that own fewer cells than this on average run on the calling thread (see
/// [`Inline`]); larger ones on a thread each. A device thread hands halos to its
/// neighbours several times a step, and on a busy machine each hand-off waits for a
/// scheduler slice (milliseconds): only a device with milliseconds of work between
/// hand-offs gains from a thread of its own (`bench --contention` measures it).
pub const THREADS_FROM_CELLS_PER_DEVICE: usize = 1 << 20;

/// Whether the sim computes `s` on a thread per device: `HALOSCOPE_SIM_THREADS=on` or
/// `off` decides, else the cells per device ([`THREADS_FROM_CELLS_PER_DEVICE`]).
pub fn threaded(s: &Scenario) -> bool {
    match std::env::var("HALOSCOPE_SIM_THREADS").as_deref() {
        Ok("on") => true,
        Ok("off") => false,
        _ => s.total_cells() / s.split.len().max(1) >= THREADS_FROM_CELLS_PER_DEVICE,
    }
}

/// The sim runtime: scheduler + executor for one scenario and one program.
///
/// The host threads' loop is unbounded; a run is looked at with [`SimRuntime::observe`],
/// which never changes it: the state after `N` steps is the effects of the calls of the
/// steps before `N`, in the order of the run (see DESIGN.md, "Observation").
pub struct SimRuntime {
    pub scheduler: Scheduler,
    pub(super) compute: Compute,
    /// Per device: the latest step whose call has changed its memory.
    pub(super) frontier: Vec<Option<u64>>,
    /// Steps (this scheduler's numbering) from which every round boundary is kept for
    /// observation: the latest observation.
    pub(super) floor: u64,
    /// What queries read.
    pub(super) view: View,
    /// Owned cells (1D) or rows (2D) of each device, and cells per row.
    split: Vec<usize>,
    grid: Grid,
}

impl SimRuntime {
    /// Small devices are computed on the calling thread, large ones by one thread each
    /// ([`threaded`]).
    pub fn new(s: &Scenario, program: Program, jitter_seed: Option<u64>) -> anyhow::Result<Self> {
        Self::with_threads(s, program, jitter_seed, threaded(s))
    }

    /// As [`SimRuntime::new`], choosing device threads (`true`) or the calling thread.
    pub fn with_threads(
        s: &Scenario,
        program: Program,
        jitter_seed: Option<u64>,
        threads: bool,
    ) -> anyhow::Result<Self> {
        let states = Domain::new(s, &Coefficients::new(s)?)?.devices;
        Self::from_states_with(s, states, program, jitter_seed, 0, threads)
    }

    /// Continues from `states` (e.g. after switching mode), numbering steps from `base`.
    pub fn from_states(
        s: &Scenario,
        states: Vec<DeviceState>,
        program: Program,
        jitter_seed: Option<u64>,
        base: u64,
    ) -> anyhow::Result<Self> {
        Self::from_states_with(s, states, program, jitter_seed, base, threaded(s))
    }

    pub(super) fn from_states_with(
        s: &Scenario,
        states: Vec<DeviceState>,
        program: Program,
        jitter_seed: Option<u64>,
        base: u64,
        threads: bool,
    ) -> anyhow::Result<Self> {
        let mut scheduler =
            Scheduler::new(program, s.cost.clone(), s.split.clone(), jitter_seed).on(Grid::of(s));
        scheduler.set_base_step(base);
        let n = states.len();
        let compute = if threads {
            Compute::Threads(Executor::from_states(states)?)
        } else {
            Compute::Inline(Inline {
                slots: states.into_iter().map(Slot::new).collect(),
                stash: HashMap::new(),
            })
        };
        Ok(SimRuntime {
            scheduler,
            compute,
            frontier: vec![None; n],
            floor: 0,
            view: View::At(0),
            split: s.split.clone(),
            grid: Grid::of(s),
        })
    }

    /// The step (absolute) the queries describe; `None` mid-step after micro-steps.
    pub fn observed_step(&self) -> Option<u64> {
        match self.view {
            View::At(m) => Some(m + self.scheduler.base_step()),
            View::Live => None,
        }
    }

    /// Makes the state after `steps` steps (absolute; rounded up to a round's end) what
    /// the queries read, issuing and applying as much of the unbounded run as that needs.
    /// Every round boundary from there on stays observable until a later observation.
    pub fn observe(&mut self, steps: u64) -> anyhow::Result<()> {
        let base = self.scheduler.base_step();
        let k = self.scheduler.round();
        let rel = steps.saturating_sub(base).div_ceil(k).saturating_mul(k);
        anyhow::ensure!(
            rel >= self.floor,
            "step {steps} cannot be observed any more (observed: {}; rounds of {k} from {base})",
            self.floor + base
        );
        if rel != self.floor {
            self.floor = rel;
            self.drop_below(rel)?;
        }
        // In batches: effects are applied and records handed on as the run goes, so
        // memory does not grow with the distance to the next observation.
        while !self.scheduler.issue_until_at_most(rel, 4096)? {
            self.settle()?;
            self.scheduler.flush_sink();
        }
        while !self.scheduler.complete_below(rel) {
            let before = self.scheduler.trace_issued();
            self.scheduler.issue_past_effects_below(rel)?;
            self.settle()?;
            anyhow::ensure!(
                self.scheduler.complete_below(rel) || self.scheduler.trace_issued() > before,
                "step {steps} cannot be reached: no host thread can issue a call"
            );
        }
        self.settle()?;
        self.scheduler.flush_sink();
        match &mut self.compute {
            Compute::Threads(x) => (0..x.commands.len()).try_for_each(|d| x.send(d, Command::Settle(rel)))?,
            Compute::Inline(i) => i.slots.iter_mut().for_each(|s| s.settle_fork(rel)),
        }
        self.view = View::At(rel);
        Ok(())
    }

    /// As [`SimRuntime::observe`].
    pub fn run_until(&mut self, steps: u64) -> anyhow::Result<()> {
        self.observe(steps)
    }

    pub(super) fn drop_below(&mut self, m: u64) -> anyhow::Result<()> {
        match &mut self.compute {
            Compute::Threads(x) => (0..x.commands.len()).try_for_each(|d| x.send(d, Command::DropBelow(m))),
            Compute::Inline(i) => {
                i.slots.iter_mut().for_each(|s| s.drop_below(m));
                Ok(())
            }
        }
    }

    /// Issues the next call in simulated time (micro-step); the queries then read memory
    /// as it is.
    pub fn issue_one(&mut self) -> anyhow::Result<Option<usize>> {
        let t = self.scheduler.issue_one()?;
        self.settle()?;
        self.view = View::Live;
        Ok(t)
    }

    /// Applies every effect that no future call can precede, forking each device's state
    /// at the round boundaries at or above the floor that its effects pass.
    pub(super) fn settle(&mut self) -> anyhow::Result<()> {
        let effects = self.scheduler.ready_effects();
        if effects.is_empty() {
            return Ok(());
        }
        let n = self.frontier.len();
        let k = self.scheduler.round();
        let mut items: Vec<(usize, Item)> = Vec::new();
        for (at, e) in effects {
            let changes = match e {
                Effect::Kernel { device, .. } => Some(device),
                Effect::CopyWrite { dst, .. } => Some(dst),
                Effect::CopyRead { .. } => None,
            };
            if let Some(d) = changes
                && self.frontier[d].is_none_or(|f| at > f)
            {
                // Boundaries m with frontier < m <= at, m >= floor: at most a few.
                let from = self.frontier[d].map_or(0, |f| f + 1).max(self.floor);
                let first = from.div_ceil(k) * k;
                let mut m = first;
                while m <= at && m < first + 64 * k {
                    items.push((d, Item::Fork(m)));
                    m += k;
                }
                self.frontier[d] = Some(at);
            }
            let d = match e {
                Effect::Kernel { device, .. } => device,
                Effect::CopyRead { src, .. } => src,
                Effect::CopyWrite { dst, .. } => dst,
            };
            items.push((d, Item::Effect(at, e)));
        }
        match &mut self.compute {
            Compute::Threads(x) => {
                let mut per: Vec<Vec<Item>> = vec![Vec::new(); n];
                for (d, item) in items {
                    per[d].push(item);
                }
                x.apply(per)
            }
            Compute::Inline(i) => {
                i.apply(items);
                Ok(())
            }
        }
    }

    /// Turns the cache-blocked fused step off (`false`) or on: the results are the same
    /// bits either way; tests compare the two. (Inline grids are small: never fused.)
    pub fn set_fusion(&mut self, on: bool) {
        if let Compute::Threads(x) = &mut self.compute {
            x.fuse = on;
        }
    }

    pub(super) fn devices(&self) -> usize {
        self.frontier.len()
    }

    /// A copy of every device's state, as the queries see it.
    pub fn states(&self) -> anyhow::Result<Vec<DeviceState>> {
        let v = self.view;
        match &self.compute {
            Compute::Threads(x) => x.ask_all(|tx| Command::State(v, tx)),
            Compute::Inline(i) => Ok(i.slots.iter().map(|s| s.view(v).fork()).collect()),
        }
    }

    /// The fields reduced to the screen cells of `edges`, compared with `reference`.
    pub fn reduce(
        &self,
        edges: &Arc<crate::snapshot::Edges>,
        reference: Option<&crate::decomp::Reference>,
    ) -> anyhow::Result<Vec<Partial>> {
        let v = self.view;
        match &self.compute {
            Compute::Threads(x) => x.ask_all(|tx| Command::Reduce(v, edges.clone(), reference.cloned(), tx)),
            Compute::Inline(i) => {
                let r = reference.map(|r| r.fields());
                Ok(i.slots
                    .iter()
                    .map(|s| reduce_state(s.view(v), r, edges))
                    .collect())
            }
        }
    }

    /// Where the run stopped being numbers: `(step, field, global cell, value)`, the step
    /// being the number of steps after which it was first seen. Every step's last kernel
    /// is checked as it runs; the state the queries read is scanned too.
    pub fn non_finite(&self) -> anyhow::Result<Option<Blowup>> {
        let v = self.view;
        let found: Vec<_> = match &self.compute {
            Compute::Threads(x) => x.ask_all(|tx| Command::NonFinite(v, tx))?,
            Compute::Inline(i) => i.slots.iter().map(|s| (non_finite(s.view(v)), s.blown)).collect(),
        };
        let base = self.scheduler.base_step();
        let seen = self.observed_step().unwrap_or(base + self.floor);
        // A step's blow-up counts once that step is observed.
        let during = found
            .iter()
            .filter_map(|(_, b)| *b)
            .filter(|&(s, ..)| s < seen)
            .min_by_key(|&(s, _, k, _)| (s, k))
            .map(|(s, f, k, x)| (s + 1, f, k, x));
        let now = found
            .iter()
            .filter_map(|(n, _)| *n)
            .min_by_key(|&(_, k, _)| k)
            .map(|(f, k, x)| (seen, f, k, x));
        Ok(during.or(now))
    }

    /// Test-only: makes the compute of device `d` panic (in its thread, or inline).
    pub fn inject_panic(&self, d: usize) {
        match &self.compute {
            Compute::Threads(x) => {
                let _ = x.commands[d].send(Command::Panic);
            }
            Compute::Inline(_) => panic!("injected panic in the compute of dev{d} (--inject-panic)"),
        }
    }

    /// Device `d`'s local array of `f`, halos included (`decomp::HALO` cells each side).
    pub fn device_local(&self, d: usize, f: Field) -> anyhow::Result<Vec<f32>> {
        let v = self.view;
        match &self.compute {
            Compute::Threads(x) => x.ask(d, |tx| Command::Gather(v, f, tx)),
            Compute::Inline(i) => Ok(i.slots[d].view(v).field(f).to_vec()),
        }
    }

    /// The owned cells of every device, in order, as the queries see them.
    pub fn fields(&self) -> anyhow::Result<crate::decomp::Gathered> {
        let mut g = crate::decomp::Gathered::default();
        for d in 0..self.devices() {
            for (f, out) in [(Field::E, &mut g.e), (Field::H, &mut g.h)] {
                let v = self.device_local(d, f)?;
                // Floats per slice of this field.
                let w = self.grid.width(f);
                debug_assert_eq!(v.len(), (self.split[d] + 2 * HALO) * w);
                let owned = &v[HALO * w..v.len() - HALO * w];
                crate::memory::grow(out, owned.len(), "the gathered fields")?;
                out.extend_from_slice(owned);
            }
        }
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decomp::Kernel;
    use std::collections::BinaryHeap;

    /// A device of the 16-cell test grid, owning cells 0..8 (a source at cell 3).
    fn device() -> DeviceState {
        let s = crate::scenario::parse(
            "[grid]\ncells = 16\ncourant = 1.0\n[devices]\ncount = 2\n[[sources]]\nkind = \"sinusoid\"\nposition = 3\nperiod = 5.0\n",
            "test",
        )
        .unwrap();
        Domain::new(&s, &Coefficients::new(&s).unwrap())
            .unwrap()
            .devices
            .remove(0)
    }

    fn bits(s: &DeviceState) -> Vec<u32> {
        [Field::E, Field::H]
            .iter()
            .flat_map(|f| s.field(*f).iter().map(|x| x.to_bits()))
            .collect()
    }

    #[test]
    fn a_fork_holds_exactly_the_effects_of_earlier_calls_in_run_order() {
        // Step 0 runs; step 1's copies land early (into a halo, and into a cell a late
        // step-0 kernel writes); step-0 effects arrive late; step 1's kernel runs.
        let mut start = device();
        let wave: Vec<f32> = (0..8)
            .map(|i| 0.1 * i as f32 * if i % 2 == 0 { 1.0 } else { -0.5 })
            .collect();
        start.write(Field::H, 0, &wave);
        start.write(Field::E, 0, &wave);
        let mut slot = Slot::new(start.fork());
        let mut expect = start;
        let k = |st: &mut DeviceState, kernel, step| st.run(kernel, &(0..8), step);
        k(&mut slot.real, Kernel::UpdateH, 0);
        k(&mut expect, Kernel::UpdateH, 0);
        slot.fork_at(1);
        slot.write(1, Field::E, 8, &[0.25]); // halo, step 1: not in the fork
        slot.write(1, Field::E, 5, &[9.0]); // owned cell, step 1: not in the fork
        slot.write(0, Field::H, 0, &[0.5]); // late, step 0: in the fork
        expect.write(Field::H, 0, &[0.5]);
        slot.kernel(0, Kernel::UpdateE, &(0..8), 0); // late: writes cell 5 again
        k(&mut expect, Kernel::UpdateE, 0);
        slot.write(0, Field::E, 8, &[0.75]); // late halo write after step 1's
        expect.write(Field::E, 8, &[0.75]);
        slot.kernel(1, Kernel::UpdateH, &(0..8), 1); // step 1 on the device
        slot.settle_fork(1);
        assert_eq!(bits(slot.view(View::At(1))), bits(&expect));
        // A fork that never became a state of its own is derived from the memory.
        let mut slot = Slot::new(device());
        let mut expect = device();
        slot.fork_at(2);
        slot.write(2, Field::E, 8, &[0.25]);
        slot.write(1, Field::E, 8, &[0.5]);
        expect.write(Field::E, 8, &[0.5]);
        slot.write(3, Field::H, 0, &[1.5]);
        slot.settle_fork(2);
        assert_eq!(bits(slot.view(View::At(2))), bits(&expect));
        assert!(
            slot.journal.is_empty(),
            "the journal is let go once no fork needs it"
        );
    }

    #[test]
    fn a_state_that_is_not_finite_is_found_at_the_observation() {
        let s = crate::scenario::load(None).unwrap();
        let mut states = Domain::new(&s, &Coefficients::new(&s).unwrap()).unwrap().devices;
        states[2].write(Field::H, 1100, &[f32::INFINITY]);
        for threads in [false, true] {
            let p = crate::program::Mode::Events.program(&s.ranges());
            let mut rt = SimRuntime::from_states_with(&s, states.clone(), p, None, 0, threads).unwrap();
            rt.observe(3).unwrap();
            let (step, _, k, v) = rt.non_finite().unwrap().expect("found");
            assert_eq!(step, 1, "seen after the first step");
            assert!(
                (1098..=1102).contains(&k),
                "the blow-up spreads from cell 1100: {k}"
            );
            assert!(!v.is_finite());
        }
        let p = crate::program::Mode::Events.program(&s.ranges());
        let mut rt = SimRuntime::new(&s, p, None).unwrap();
        rt.observe(3).unwrap();
        assert_eq!(rt.non_finite().unwrap(), None);
    }

    #[test]
    fn pending_effects_pop_earliest_first_then_in_issue_order() {
        let mut h = BinaryHeap::new();
        let e = |d| Effect::Kernel {
            device: d,
            kernel: Kernel::UpdateH,
            cells: 0..1,
            step: 0,
        };
        h.push(Pending {
            time: 2.0,
            at: 0,
            seq: 0,
            sub: 0,
            effect: e(0),
        });
        h.push(Pending {
            time: 1.0,
            at: 0,
            seq: 5,
            sub: 0,
            effect: e(1),
        });
        h.push(Pending {
            time: 1.0,
            at: 0,
            seq: 3,
            sub: 0,
            effect: e(2),
        });
        let order: Vec<u64> = std::iter::from_fn(|| h.pop().map(|p| p.seq)).collect();
        assert_eq!(order, vec![3, 5, 0]);
    }
}
