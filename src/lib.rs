//! haloscope: watch a multi-GPU 1D FDTD simulation and learn CUDA stream/event ordering
//! from it. See the README and DESIGN.md for the architecture.
#![deny(unsafe_code)]

pub mod access;
pub mod bench;
pub mod cli;
pub mod constants;
pub mod cost;
pub mod decomp;
pub mod dispatch;
pub mod engine;
pub mod error;
pub mod exercise;
pub mod export;
pub mod fused;
pub mod geometry;
pub mod hazard;
pub mod headless;
pub mod kernels;
pub mod memory;
pub mod npy;
pub mod out;
pub mod physics;
pub mod plan;
pub mod program;
pub mod record;
pub mod rendezvous;
pub mod runtime;
pub mod scenario;
pub mod snapshot;
pub mod stats;

pub mod tour;
pub mod trace;
pub mod tui;
pub mod wheels;
pub mod world;
