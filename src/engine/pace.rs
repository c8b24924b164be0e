//! How many steps a frame may cover: where the steps between two frames take longer than a
//! frame's time (a large 2D grid, a slow machine), fewer steps between frames keep the UI
//! near 30 frames a second.

use std::time::Duration;

/// The cap on steps between frames after a frame that covered `steps`, `cycle` after the
/// one before (the steps run and the frame built): shrunk in proportion when the cycle
/// took more than 50 ms, so that frames come about 30 a second; doubled when it took less
/// than 30 ms (the cap, not the frame's time, ended it); none while paused.
pub(super) fn steps_per_frame(cap: u64, steps: u64, cycle: Duration, running: bool) -> u64 {
    let ms = cycle.as_secs_f64() * 1e3;
    if !running {
        u64::MAX
    } else if ms > 50.0 && steps > 0 {
        ((steps as f64 * 33.0 / ms) as u64).max(1)
    } else if ms < 30.0 {
        cap.saturating_mul(2)
    } else {
        cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_cycles_take_fewer_steps_and_short_ones_grow_back() {
        let ms = Duration::from_millis;
        assert_eq!(steps_per_frame(u64::MAX, 30, ms(99), true), 10);
        assert_eq!(steps_per_frame(5, 5, ms(40), true), 5);
        assert_eq!(steps_per_frame(5, 5, ms(20), true), 10);
        assert_eq!(steps_per_frame(1, 1, ms(500), true), 1);
        assert_eq!(steps_per_frame(4, 0, ms(100), false), u64::MAX);
        assert_eq!(steps_per_frame(u64::MAX, 100_000, ms(1), true), u64::MAX);
    }
}
