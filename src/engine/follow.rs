//! The reference run on a thread of its own. It steps while the runtime's devices do, so
//! that a frame finds it caught up (or nearly), instead of stepping it on the engine's
//! thread while the devices wait: on a large 2D grid that was a third of a frame's cost.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::decomp::Reference;

/// Where the reference thread stands. `reference` is `None` while the thread steps it.
struct State {
    reference: Option<Reference>,
    step: u64,
    target: u64,
    quit: bool,
}

type Shared = Arc<(Mutex<State>, Condvar)>;

/// The reference, stepped by its own thread up to the step it is told to follow.
pub(super) struct Follower {
    shared: Shared,
    handle: Option<JoinHandle<()>>,
}

impl Follower {
    pub fn new(reference: Reference) -> Follower {
        let shared: Shared = Arc::new((
            Mutex::new(State {
                reference: Some(reference),
                step: 0,
                target: 0,
                quit: false,
            }),
            Condvar::new(),
        ));
        let theirs = shared.clone();
        // Without a thread (none could be made) the reference steps when it is asked for.
        let handle = std::thread::Builder::new()
            .name("reference".into())
            .spawn(move || run(&theirs))
            .ok();
        Follower { shared, handle }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.shared.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets the reference step on, up to `step`, in the background.
    pub fn follow(&self, step: u64) {
        let mut st = self.lock();
        if step > st.target {
            st.target = step;
            self.shared.1.notify_all();
        }
    }

    /// The reference at `step`, waiting for it to get there; `None` when it is already past
    /// `step` (a run that stopped short of the steps it was followed to).
    pub fn at(&self, step: u64) -> Option<Reference> {
        if self.handle.is_none() {
            let mut st = self.lock();
            let from = st.step;
            if let Some(r) = st.reference.as_mut() {
                for k in from..step {
                    r.step(k);
                }
            }
            st.step = st.step.max(step);
            return (st.step == step).then(|| st.reference.clone()).flatten();
        }
        self.follow(step);
        let mut st = self.lock();
        while st.reference.is_none() || st.step < step {
            st = self.shared.1.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        (st.step == step).then(|| st.reference.clone()).flatten()
    }

    /// The reference if it stands at `step` now (never waits).
    pub fn now(&self, step: u64) -> Option<Reference> {
        let st = self.lock();
        (st.step == step).then(|| st.reference.clone()).flatten()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.lock().quit = true;
        self.shared.1.notify_all();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// The thread: steps the reference (outside the lock) whenever its target is ahead.
fn run(shared: &Shared) {
    let (lock, wake) = (&shared.0, &shared.1);
    let mut st = lock.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        while !st.quit && st.step >= st.target {
            st = wake.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        if st.quit {
            return;
        }
        let (from, to) = (st.step, st.target);
        let Some(mut r) = st.reference.take() else { return };
        drop(st);
        for k in from..to {
            r.step(k);
        }
        st = lock.lock().unwrap_or_else(|e| e.into_inner());
        st.reference = Some(r);
        st.step = to;
        wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_thread_reaches_the_step_asked_and_equals_one_stepped_in_line() {
        let s = crate::scenario::load(None).unwrap();
        let c = crate::geometry::Coefficients::new(&s).unwrap();
        let f = Follower::new(Reference::new(&s, &c).unwrap());
        f.follow(40);
        let at = f.at(57).expect("at 57");
        let mut inline = Reference::new(&s, &c).unwrap();
        for k in 0..57 {
            inline.step(k);
        }
        let bits = |r: &Reference| {
            let (e, h) = r.fields();
            e.iter().chain(h).map(|x| x.to_bits()).collect::<Vec<_>>()
        };
        assert_eq!(bits(&at), bits(&inline));
        assert!(f.now(57).is_some());
        assert!(f.now(56).is_none());
        // Past the step asked: no reference for it.
        assert!(f.at(12).is_none());
    }
}
