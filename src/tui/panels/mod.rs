//! One file per panel (each a `title` and a `render`) and per overlay.

mod common;
pub mod fields;
pub mod hazards;
pub mod heat;
pub mod help;
pub mod inspector;
pub mod lesson;
pub mod picker;
pub mod program;
pub mod status;
pub mod streams;
pub mod threads;
pub mod timeline;
pub mod tour;
pub mod transfers;

pub(crate) use common::{COPY_COLOR, EVENT_COLOR, KERNEL_COLOR, Look, SYNC_COLOR, block, centered, fit};
