//! Recorded calls as CUDA code, with haloscope's names for what the handles stand for:
//! `alloc2 + 4096`, `stream1`, `event3`.

use super::super::format::{Call, kernel_args, printable};
use super::super::order::{StreamInfo, StreamKey};
use super::Checker;
use super::names::kernel_name;

impl Checker<'_> {
    fn ptr(&self, v: u64) -> String {
        match self.alloc_of(v) {
            Some(a) if v == a.start => a.name.clone(),
            Some(a) => format!("{} + {}", a.name, v - a.start),
            None if v == 0 => "nullptr".into(),
            None => format!("{v:#x}"),
        }
    }

    pub(super) fn stream_name(&self, c: &Call) -> String {
        let Some(h) = c.opt("stream") else {
            return "?".into();
        };
        self.order
            .streams
            .get(&StreamKey::of(c, h))
            .map_or_else(|| format!("{h:#x}"), |s| s.name.clone())
    }

    /// The stream a call's `stream=` names, where the replay knows it.
    pub(super) fn stream_info(&self, c: &Call) -> Option<&StreamInfo> {
        let h = c.opt("stream")?;
        self.order.streams.get(&StreamKey::of(c, h))
    }

    fn event_name(&self, c: &Call) -> String {
        let Some(e) = c.opt("event") else {
            return "?".into();
        };
        self.events
            .get(&e)
            .map_or_else(|| format!("{e:#x}"), |(d, n, _)| format!("{n} (GPU {d})"))
    }

    fn arg(&self, c: &Call, k: &str) -> String {
        c.opt(k).map_or_else(|| "?".into(), |v| self.ptr(v))
    }

    /// An async call's name suffix and its last argument (`Async`, `, stream1`); nothing for
    /// the synchronous form.
    fn async_parts(&self, c: &Call) -> (&'static str, String) {
        if c.name.ends_with("async") {
            ("Async", format!(", {}", self.stream_name(c)))
        } else {
            ("", String::new())
        }
    }

    /// The call as CUDA code, safe to print: what the recording said (kernel names, marks,
    /// a version 1 file's values) with its control characters escaped.
    pub(super) fn text(&self, c: &Call) -> String {
        let streams = self.order.streams.len();
        if let Some(t) = self.texts_made.borrow().get(c, streams) {
            return t;
        }
        let t = self.code(c);
        let t = match printable(&t) {
            std::borrow::Cow::Borrowed(_) => t,
            std::borrow::Cow::Owned(p) => p,
        };
        self.texts_made.borrow_mut().keep(c, &t, streams);
        t
    }

    /// The call as CUDA code, as recorded.
    fn code(&self, c: &Call) -> String {
        let k = |key: &str| c.keys.get(key).unwrap_or("?").to_string();
        match c.name.as_ref() {
            "host_release" | "host_acquire" => self.host.text(c),
            "setdev" => format!("cudaSetDevice({})", k("to")),
            "malloc" => format!("cudaMalloc(&{}, {})", self.arg(c, "ptr"), k("bytes")),
            "free" => format!("cudaFree({})", self.arg(c, "ptr")),
            "record" => format!("cudaEventRecord({}, {})", self.event_name(c), self.stream_name(c)),
            "wait" => format!(
                "cudaStreamWaitEvent({}, {}, 0)",
                self.stream_name(c),
                self.event_name(c)
            ),
            "launch" => {
                let args: Vec<String> = kernel_args(&k("args")).map_or(vec!["…".into()], |a| {
                    a.iter()
                        .map(|(size, v)| match size {
                            8 if self.alloc_of(*v).is_some() => self.ptr(*v),
                            4 => (*v as u32 as i32).to_string(),
                            _ => v.to_string(),
                        })
                        .collect()
                });
                format!(
                    "{}<<<({}), ({}), 0, {}>>>({})",
                    kernel_name(&k("kernel")),
                    k("grid"),
                    k("block"),
                    self.stream_name(c),
                    args.join(", ")
                )
            }
            "stream_create" => format!(
                "cudaStreamCreateWithFlags(&{}, {})",
                self.stream_name(c),
                k("flags")
            ),
            "event_create" => {
                let e = c.opt("event").unwrap_or(0);
                let name = self.events.get(&e).map_or(k("event"), |(_, n, _)| n.clone());
                format!("cudaEventCreateWithFlags(&{name}, {})", k("flags"))
            }
            "flag_wait" => format!(
                "cuStreamWaitValue32({}, {}, {}, {})",
                self.stream_name(c),
                self.arg(c, "addr"),
                k("value"),
                match c.num("flags").map(|f| f & 3) {
                    Ok(0) => "CU_STREAM_WAIT_VALUE_GEQ",
                    Ok(1) => "CU_STREAM_WAIT_VALUE_EQ",
                    Ok(2) => "CU_STREAM_WAIT_VALUE_AND",
                    _ => "CU_STREAM_WAIT_VALUE_NOR",
                }
            ),
            "flag_write" => format!(
                "cuStreamWriteValue32({}, {}, {}, 0)",
                self.stream_name(c),
                self.arg(c, "addr"),
                k("value")
            ),
            "event_destroy" => format!("cudaEventDestroy({})", self.event_name(c)),
            "stream_destroy" => format!("cudaStreamDestroy({})", self.stream_name(c)),
            "device_sync" => "cudaDeviceSynchronize()".into(),
            "mark" => {
                let f = match c.num("kind") {
                    Ok(1) => "nvtxRangePush",
                    Ok(2) => "nvtxRangeStart",
                    _ => "nvtxMark",
                };
                format!("{f}(\"{}\")", k("text"))
            }
            "stream_sync" => format!("cudaStreamSynchronize({})", self.stream_name(c)),
            "event_sync" => format!("cudaEventSynchronize({})", self.event_name(c)),
            other => self
                .copy_text(c)
                .or_else(|| self.graph_text(c))
                .unwrap_or_else(|| other.to_string()),
        }
    }

    /// A copy's, a memset's or an asynchronous free's call as CUDA code.
    fn copy_text(&self, c: &Call) -> Option<String> {
        let k = |key: &str| c.keys.get(key).unwrap_or("?").to_string();
        Some(match c.name.as_ref() {
            "memcpy_peer" | "memcpy_peer_async" => {
                let (a, s) = self.async_parts(c);
                format!(
                    "cudaMemcpyPeer{a}({}, {}, {}, {}, {}{s})",
                    self.arg(c, "dst"),
                    k("dstdev"),
                    self.arg(c, "src"),
                    k("srcdev"),
                    k("bytes")
                )
            }
            "memcpy" | "memcpy_async" if c.keys.contains_key("height") => {
                let (a, s) = self.async_parts(c);
                let (dst, src) = (self.arg(c, "dst"), self.arg(c, "src"));
                format!(
                    "cudaMemcpy2D{a}({dst}, {}, {src}, {}, {}, {}, {}{s})",
                    k("dpitch"),
                    k("spitch"),
                    k("width"),
                    k("height"),
                    k("kind")
                )
            }
            "memset" | "memset_async" if c.keys.contains_key("height") => {
                let (a, s) = self.async_parts(c);
                let ptr = self.arg(c, "ptr");
                format!(
                    "cudaMemset2D{a}({ptr}, {}, {}, {}, {}{s})",
                    k("pitch"),
                    k("value"),
                    k("width"),
                    k("height")
                )
            }
            "free_async" => format!("cudaFreeAsync({}, {})", self.arg(c, "ptr"), self.stream_name(c)),
            "memcpy" | "memcpy_async" => {
                let (a, s) = self.async_parts(c);
                let (dst, src) = (self.arg(c, "dst"), self.arg(c, "src"));
                format!("cudaMemcpy{a}({dst}, {src}, {}, {}{s})", k("bytes"), k("kind"))
            }
            "memset" | "memset_async" => {
                let (a, s) = self.async_parts(c);
                let ptr = self.arg(c, "ptr");
                format!("cudaMemset{a}({ptr}, {}, {}{s})", k("value"), k("bytes"))
            }
            _ => return None,
        })
    }

    /// A capture's or a graph's call as CUDA code.
    fn graph_text(&self, c: &Call) -> Option<String> {
        let exec = || self.graphs.exec_name(c.opt("exec").unwrap_or(0));
        let graph = || self.graphs.graph_name(c.opt("graph").unwrap_or(0));
        Some(match c.name.as_ref() {
            "capture_begin" => {
                let mode = match c.int("mode") {
                    Ok(0) => "cudaStreamCaptureModeGlobal",
                    Ok(1) => "cudaStreamCaptureModeThreadLocal",
                    Ok(2) => "cudaStreamCaptureModeRelaxed",
                    _ => "…",
                };
                format!("cudaStreamBeginCapture({}, {mode})", self.stream_name(c))
            }
            "capture_end" => format!("cudaStreamEndCapture({}, &{})", self.stream_name(c), graph()),
            "graph_instantiate" => format!("cudaGraphInstantiate(&{}, {}, 0)", exec(), graph()),
            "graph_update" => format!("cudaGraphExecUpdate({}, {}, &info)", exec(), graph()),
            "graph_launch" => format!("cudaGraphLaunch({}, {})", exec(), self.stream_name(c)),
            "graph_destroy" => format!("cudaGraphDestroy({})", graph()),
            "graph_exec_destroy" => format!("cudaGraphExecDestroy({})", exec()),
            _ => return None,
        })
    }
}
