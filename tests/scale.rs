//! A step's work grows linearly with the number of devices: counted, not timed.

use haloscope::program::Mode;
use haloscope::runtime::sim::SimRuntime;
use haloscope::scenario;

/// Scheduler work per step and device, over 40 steps of `mode` on `n` devices.
fn work_per_device_step(mode: Mode, n: usize) -> f64 {
    let s = scenario::load(None).unwrap().with_devices(n).unwrap();
    let mut rt = SimRuntime::new(&s, mode.program(&s.ranges()), None).unwrap();
    rt.scheduler.set_sink(Box::new(|_| {}), 40);
    for k in 1..=4 {
        rt.observe(10 * k).unwrap();
    }
    rt.scheduler.work as f64 / (40.0 * n as f64)
}

#[test]
fn scheduling_work_per_step_is_linear_in_the_number_of_devices() {
    for mode in [Mode::Events, Mode::HaloOverwrite, Mode::WaitBeforeRecord] {
        let small = work_per_device_step(mode, 25);
        let large = work_per_device_step(mode, 800);
        eprintln!("{}: {small:.1} → {large:.1} per device and step", mode.name());
        assert!(
            large < 1.5 * small,
            "{}: {small:.1} per device and step on 25 devices, {large:.1} on 800",
            mode.name()
        );
    }
}
