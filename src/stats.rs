//! Bounded statistics: what a long run keeps of its copy times.

use std::collections::VecDeque;

/// The latest `cap` samples of a quantity: memory does not grow with the run. Medians are
/// of the window, and say so.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    samples: VecDeque<f64>,
    cap: usize,
}

impl Window {
    /// Samples a median is taken over at most.
    pub const CAP: usize = 4096;

    pub fn new(cap: usize) -> Window {
        Window {
            samples: VecDeque::with_capacity(cap.min(Self::CAP)),
            cap: cap.max(1),
        }
    }

    pub fn push(&mut self, x: f64) {
        if self.samples.len() == self.cap {
            self.samples.pop_front();
        }
        self.samples.push_back(x);
    }

    pub fn clear(&mut self) {
        self.samples.clear();
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &f64> {
        self.samples.iter()
    }

    /// Median of the window; `None` when empty.
    pub fn median(&self) -> Option<f64> {
        let v: Vec<f64> = self.samples.iter().copied().collect();
        median(&v)
    }
}

impl Default for Window {
    fn default() -> Self {
        Window::new(Self::CAP)
    }
}

/// Median of a sample; `None` when empty.
pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_keeps_the_latest_samples() {
        let mut w = Window::new(3);
        for x in [9.0, 1.0, 2.0, 3.0] {
            w.push(x);
        }
        assert_eq!(w.len(), 3);
        assert_eq!(w.median(), Some(2.0));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, 4.0]), Some(2.5));
    }
}
