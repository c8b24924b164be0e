//! How many steps a frame may cover: on a grid whose frames cost much of a frame's time
//! (a large 2D grid: the reference catching up, the reduction), fewer steps between frames
//! keep the UI near 30 frames a second.

use std::time::Duration;

/// The cap on steps between frames after a frame that covered `steps` and took `cost` to
/// build: shrunk so that building one takes about 12 ms when it took more than 16 ms,
/// grown back (doubled) when it took less than 6 ms, none while paused.
pub(super) fn steps_per_frame(cap: u64, steps: u64, cost: Duration, running: bool) -> u64 {
    let ms = cost.as_secs_f64() * 1e3;
    if !running {
        u64::MAX
    } else if ms > 16.0 && steps > 0 {
        ((steps as f64 * 12.0 / ms) as u64).max(1)
    } else if ms < 6.0 {
        cap.saturating_mul(2)
    } else {
        cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costly_frames_take_fewer_steps_and_cheap_ones_grow_back() {
        let ms = Duration::from_millis;
        assert_eq!(steps_per_frame(u64::MAX, 15, ms(60), true), 3);
        assert_eq!(steps_per_frame(5, 5, ms(12), true), 5);
        assert_eq!(steps_per_frame(5, 5, ms(4), true), 10);
        assert_eq!(steps_per_frame(1, 1, ms(500), true), 1);
        assert_eq!(steps_per_frame(4, 0, ms(100), false), u64::MAX);
        assert_eq!(steps_per_frame(u64::MAX, 100_000, ms(1), true), u64::MAX);
    }
}
