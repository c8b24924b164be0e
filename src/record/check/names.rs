//! What a recording's numbers stand for, as a learner reads them: a CUDA error code's name,
//! a kernel's name from its mangled symbol; the texts of the calls made while the names
//! stay the same.

use super::super::format::Call;

/// A CUDA runtime error's name (`cudaError_t`, as `driver_types.h` numbers them; the driver's
/// `CUresult` shares the codes a recording shows), for the codes a recorded call returns
/// that a student meets; `None` for the rest.
pub fn error_name(rc: i64) -> Option<&'static str> {
    Some(match rc {
        1 => "cudaErrorInvalidValue",
        2 => "cudaErrorMemoryAllocation",
        3 => "cudaErrorInitializationError",
        4 => "cudaErrorCudartUnloading",
        9 => "cudaErrorInvalidConfiguration",
        12 => "cudaErrorInvalidPitchValue",
        13 => "cudaErrorInvalidSymbol",
        17 => "cudaErrorInvalidDevicePointer",
        21 => "cudaErrorInvalidMemcpyDirection",
        35 => "cudaErrorInsufficientDriver",
        98 => "cudaErrorInvalidDeviceFunction",
        100 => "cudaErrorNoDevice",
        101 => "cudaErrorInvalidDevice",
        200 => "cudaErrorInvalidKernelImage",
        201 => "cudaErrorDeviceUninitialized",
        209 => "cudaErrorNoKernelImageForDevice",
        217 => "cudaErrorPeerAccessUnsupported",
        400 => "cudaErrorInvalidResourceHandle",
        401 => "cudaErrorIllegalState",
        500 => "cudaErrorSymbolNotFound",
        600 => "cudaErrorNotReady",
        700 => "cudaErrorIllegalAddress",
        701 => "cudaErrorLaunchOutOfResources",
        702 => "cudaErrorLaunchTimeout",
        704 => "cudaErrorPeerAccessAlreadyEnabled",
        705 => "cudaErrorPeerAccessNotEnabled",
        709 => "cudaErrorContextIsDestroyed",
        710 => "cudaErrorAssert",
        716 => "cudaErrorMisalignedAddress",
        719 => "cudaErrorLaunchFailure",
        800 => "cudaErrorNotPermitted",
        801 => "cudaErrorNotSupported",
        900 => "cudaErrorStreamCaptureUnsupported",
        901 => "cudaErrorStreamCaptureInvalidated",
        906 => "cudaErrorStreamCaptureImplicit",
        907 => "cudaErrorCapturedEvent",
        908 => "cudaErrorStreamCaptureWrongThread",
        999 => "cudaErrorUnknown",
        _ => return None,
    })
}

/// `error N (its name)`, or `error N` where haloscope has no name for it.
pub fn error_text(rc: i64) -> String {
    match error_name(rc) {
        Some(name) => format!("error {rc} ({name})"),
        None => format!("error {rc}"),
    }
}

/// A kernel's name from its symbol: `_Z8update_hPfS_ii` → `update_h` (the identifier of an
/// Itanium-mangled name; other symbols as they are).
pub fn kernel_name(symbol: &str) -> String {
    let Some(rest) = symbol.strip_prefix("_Z") else {
        return symbol.to_string();
    };
    let rest = rest.strip_prefix('N').unwrap_or(rest);
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let name = rest[..digits]
        .parse::<usize>()
        .ok()
        .and_then(|n| rest.get(digits..digits.checked_add(n)?));
    name.unwrap_or(symbol).to_string()
}

/// The calls that never name a handle anew: a call's text made after them is the text made
/// before.
pub(super) fn steady(name: &str) -> bool {
    matches!(
        name,
        "launch"
            | "memcpy"
            | "memcpy_async"
            | "memcpy_peer"
            | "memcpy_peer_async"
            | "memset"
            | "memset_async"
            | "record"
            | "wait"
            | "mark"
            | "device_sync"
            | "stream_sync"
            | "event_sync"
            | "event_query"
            | "stream_query"
            | "flag_wait"
            | "flag_write"
            | "host_acquire"
            | "host_release"
            | "setdev"
            | "graph_launch"
    )
}

/// The texts of calls made since the names last changed, by the call's shape (its name,
/// thread, device, return code and keys): a program's loop makes the same calls again and
/// again, each named alike until a call may name a handle anew ([`steady`]), which empties
/// it. The host's own calls are not kept (their objects are named as they are replayed).
#[derive(Default)]
pub(super) struct TextCache {
    by_hash: foldhash::HashMap<u64, Vec<(Call, String)>>,
    len: usize,
    /// The streams the replay knew when the texts were made: a steady call that first names
    /// a stream (the legacy stream, one made before the recording) makes it known, and
    /// renames it.
    streams: usize,
}

/// The most texts kept: a recording whose calls all differ makes each once anyway.
const CACHED: usize = 1 << 14;

impl TextCache {
    fn hash(c: &Call) -> u64 {
        use std::hash::{BuildHasher, Hash, Hasher};
        let mut h = foldhash::fast::FixedState::default().build_hasher();
        (c.name.as_ref(), c.thread, c.device, c.rc).hash(&mut h);
        for (k, v) in c.keys.iter() {
            (k, v).hash(&mut h);
        }
        h.finish()
    }

    fn same(a: &Call, b: &Call) -> bool {
        a.name == b.name && a.thread == b.thread && a.device == b.device && a.rc == b.rc && a.keys == b.keys
    }

    /// The text of a call of `c`'s shape made since the names last changed (`streams`: how
    /// many streams the replay knows now).
    pub(super) fn get(&self, c: &Call, streams: usize) -> Option<String> {
        if streams != self.streams {
            return None;
        }
        let v = self.by_hash.get(&Self::hash(c))?;
        v.iter().find(|(k, _)| Self::same(k, c)).map(|(_, t)| t.clone())
    }

    /// Keeps `text` as the text of calls of `c`'s shape (not the host's own).
    pub(super) fn keep(&mut self, c: &Call, text: &str, streams: usize) {
        if c.name.starts_with("host_") {
            return;
        }
        if self.len >= CACHED || streams != self.streams {
            self.clear();
            self.streams = streams;
        }
        self.len += 1;
        let h = Self::hash(c);
        self.by_hash
            .entry(h)
            .or_default()
            .push((c.clone(), text.to_string()));
    }

    pub(super) fn clear(&mut self) {
        self.by_hash.clear();
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_mangled_kernel_symbol_reads_as_its_name() {
        assert_eq!(super::kernel_name("_Z8update_hPfS_ii"), "update_h");
        assert_eq!(super::kernel_name("jacobi_kernel"), "jacobi_kernel");
        // A length that ends inside a character, or past the end: the symbol as it is.
        assert_eq!(super::kernel_name("_Z2\u{e9}x"), "\u{e9}");
        assert_eq!(super::kernel_name("_Z1\u{e9}"), "_Z1\u{e9}");
        assert_eq!(super::kernel_name("_Z99k"), "_Z99k");
        assert_eq!(
            super::kernel_name("_Z99999999999999999999999k"),
            "_Z99999999999999999999999k"
        );
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_as_a_symbol_give_a_part_of_it(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
            mangled in proptest::bool::ANY,
        ) {
            let mut b = if mangled { b"_Z".to_vec() } else { Vec::new() };
            b.extend_from_slice(&bytes);
            let symbol = String::from_utf8_lossy(&b);
            let name = super::kernel_name(&symbol);
            proptest::prop_assert!(symbol.contains(&name));
        }
    }
}
