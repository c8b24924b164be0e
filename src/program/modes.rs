//! The ordering modes: each one a program file (`assets/programs/MODE.halo`, embedded and
//! read by the same parser as a user's file). A mode *is* its file: its summary, verdict,
//! place in the list and lesson are the file's header (`src/program/meta.rs`), and the list
//! of files is made by build.rs, so a mode made of existing operations is added by adding
//! its file (and its test, and its line in the README).
//!
//! Geometry used by every mode: device `d` owns global cells `lo..hi`. After `update_h`,
//! `Hy[lo_d − 1]` (the left neighbour's last cell) must reach `d`'s left halo; after
//! `update_e` and the sources, `Ex[hi_d]` (the right neighbour's first cell) must reach
//! `d`'s right halo.

use std::ops::Range;
use std::sync::OnceLock;

use super::lang::{self, Source};
use super::meta::{self, Verdict};
use super::ops::Program;

include!(concat!(env!("OUT_DIR"), "/modes.rs"));

/// An ordering mode, by its file's name: [`Mode::summary`] says what each one is. The
/// named constants are the modes the code and the tests refer to; every mode, named or
/// not, is in [`Mode::all`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mode(&'static str);

impl serde::Serialize for Mode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

/// A mode's file, read once: its header and its parsed program.
struct Entry {
    mode: Mode,
    text: &'static str,
    summary: String,
    verdict: Verdict,
    order: u32,
    lesson: String,
    parsed: Source,
}

/// Every mode's file, in the modes' order (a file that lacks a key or does not parse is
/// a build of haloscope that does not work: the tests load them all).
fn entries() -> &'static [Entry] {
    static ENTRIES: OnceLock<Vec<Entry>> = OnceLock::new();
    ENTRIES.get_or_init(|| {
        let mut all: Vec<Entry> = FILES
            .iter()
            .map(|&(name, text)| {
                let at = |why: String| format!("assets/programs/{name}.halo: {why}");
                let m = meta::header(text)
                    .unwrap_or_else(|(line, why)| panic!("{}", at(format!("line {line}: {why}"))));
                let need = |key: &str| at(format!("the header lacks `{key}`"));
                Entry {
                    mode: Mode(name),
                    text,
                    summary: m.summary.unwrap_or_else(|| panic!("{}", need("summary"))),
                    verdict: m.verdict.unwrap_or_else(|| panic!("{}", need("verdict"))),
                    order: m.order.unwrap_or_else(|| panic!("{}", need("order"))),
                    lesson: m.lesson.unwrap_or_else(|| panic!("{}", need("lesson"))),
                    parsed: lang::parse(text).unwrap_or_else(|e| panic!("{}", at(format!("{e:?}")))),
                }
            })
            .collect();
        all.sort_by_key(|e| (e.order, e.mode.0));
        all
    })
}

#[allow(non_upper_case_globals)]
impl Mode {
    pub const Events: Mode = Mode("events");
    pub const HostSync: Mode = Mode("host-sync");
    pub const Overlap: Mode = Mode("overlap");
    pub const Push: Mode = Mode("push");
    pub const NoWait: Mode = Mode("no-wait");
    pub const WaitBeforeRecord: Mode = Mode("wait-before-record");
    pub const CrossDeviceRecord: Mode = Mode("cross-device-record");
    pub const HaloOverwrite: Mode = Mode("halo-overwrite");
    pub const WriteAfterRead: Mode = Mode("write-after-read");
    pub const WideHalo: Mode = Mode("wide-halo");
    pub const Fused: Mode = Mode("fused");
    pub const FusedPush: Mode = Mode("fused-push");
    pub const FusedFlags: Mode = Mode("fused-flags");
    pub const FusedOverlap: Mode = Mode("fused-overlap");
    pub const FusedP2p: Mode = Mode("fused-p2p");
    pub const Graph: Mode = Mode("graph");
    pub const GraphPush: Mode = Mode("graph-push");
    pub const GraphFlags: Mode = Mode("graph-flags");
    pub const Nccl: Mode = Mode("nccl");
    pub const NcclOverlap: Mode = Mode("nccl-overlap");
    pub const NcclMismatch: Mode = Mode("nccl-mismatch");
}

impl Mode {
    /// Every mode, in its files' `order`.
    pub fn all() -> &'static [Mode] {
        static ALL: OnceLock<Vec<Mode>> = OnceLock::new();
        ALL.get_or_init(|| entries().iter().map(|e| e.mode).collect())
    }

    fn entry(self) -> &'static Entry {
        entries()
            .iter()
            .find(|e| e.mode == self)
            .unwrap_or_else(|| panic!("mode {}: no assets/programs/{}.halo", self.0, self.0))
    }

    pub fn name(self) -> &'static str {
        self.0
    }

    /// The mode's name as typed (`--mode`, scenario files, the UI).
    pub fn from_name(name: &str) -> Option<Mode> {
        Mode::all().iter().copied().find(|m| m.name() == name)
    }

    /// One line: correct or broken, and how (the CLI's help lists it).
    pub fn summary(self) -> &'static str {
        &self.entry().summary
    }

    /// Whether the mode orders every copy correctly (and so must match the reference).
    pub fn is_correct(self) -> bool {
        self.entry().verdict == Verdict::Correct
    }

    /// Whether the mode's program fails with a driver error (it never computes a wrong
    /// value: it stops).
    pub fn fails(self) -> bool {
        self.entry().verdict == Verdict::Fails
    }

    /// Whether the mode's exchange is NCCL messages (`ncclSend` / `ncclRecv`), not peer
    /// copies: on GPUs it needs one GPU per device, and it is the only kind that runs across
    /// processes (the GPU benches run it on their GPU sets without repeats only).
    pub fn uses_nccl(self) -> bool {
        self.program(&[0..64, 64..128]).uses_nccl()
    }

    /// What the mode shows, which rule, what to look at (at most 6 lines).
    pub fn lesson(self) -> &'static str {
        &self.entry().lesson
    }

    /// The mode's program as text (`assets/programs/MODE.halo`, embedded).
    pub fn source(self) -> &'static str {
        self.entry().text
    }

    /// Builds the step program of this mode over devices owning `ranges`: its file,
    /// parsed once, made concrete for `ranges`.
    pub fn program(self, ranges: &[Range<usize>]) -> Program {
        lang::instantiate(&self.entry().parsed, self.name(), ranges)
            .unwrap_or_else(|e| panic!("assets/programs/{}.halo on {ranges:?}: {e:?}", self.name()))
    }
}
