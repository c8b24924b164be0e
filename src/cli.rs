//! Command-line arguments.

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

pub use crate::program::Mode;

/// `--mode` and `--modes`: any mode by name, each listed in `--help` with its summary
/// (the core's `Mode` knows nothing of clap).
fn mode_parser() -> impl clap::builder::TypedValueParser<Value = Mode> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(
        Mode::all()
            .iter()
            .map(|m| PossibleValue::new(m.name()).help(m.summary())),
    )
    .map(|name| Mode::from_name(&name).expect("a listed mode"))
}

/// Which runtime executes the step programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    /// Virtual GPUs on the CPU: deterministic, needs no GPU.
    #[default]
    Sim,
    /// Real GPUs through CUDA (needs the `cuda` cargo feature).
    Cuda,
}

impl RuntimeKind {
    pub fn name(self) -> &'static str {
        match self {
            RuntimeKind::Sim => "sim",
            RuntimeKind::Cuda => "cuda",
        }
    }
}

/// How a screen is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Format {
    /// Characters only.
    #[default]
    Text,
    /// Characters with ANSI colour codes (for `cat` in a terminal).
    Ansi,
    /// A standalone HTML page: a `<pre>` with coloured spans.
    Html,
    /// A standalone SVG image: one text line per row, background rectangles.
    Svg,
    /// An asciinema v2 recording of a --screen script: the first screen, then one frame
    /// per key pressed (plays in asciinema-player and `asciinema play`).
    Cast,
    /// An animated SVG of the same frames (CSS, no scripts): plays in a browser.
    AnimatedSvg,
}

impl Format {
    /// The file extension.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Text => "txt",
            Format::Ansi => "ans",
            Format::Html => "html",
            Format::Svg | Format::AnimatedSvg => "svg",
            Format::Cast => "cast",
        }
    }
}

const EXAMPLES: &str = "\
Examples:
  haloscope                                   the UI on the default scenario (pulse, 4 devices)
  haloscope --mode no-wait --paused           start paused in a broken mode; n steps, . micro-steps
  haloscope --headless --scenario fresnel     a built-in scenario, no UI, print a summary
  haloscope --scenario radiate                a 2D grid (TMz) in slabs of rows, as a heat map
                                              (also lens, box; [grid] nx, ny in your own)
  haloscope --headless --scenario my.toml --devices 8 --steps 5000 --json
  haloscope --headless --dump-fields out/     also write out/ex.npy and out/hy.npy
  haloscope --headless --mode no-wait --trace t.json
                                              a broken ordering; open t.json in Perfetto
  haloscope --headless --mode overlap --jitter 7
                                              perturbed durations: still bit-identical
  haloscope --paused --screen \"n n . .\"       the UI off-screen: press keys, print the screen
  haloscope --list                            list built-in scenarios and modes
  haloscope check --mode no-wait              the program's races, whatever the timing, with fixes
  haloscope tour                              a guided tour through the nine rules (t: next stop)
  haloscope program export events -o mine.halo
                                              a mode as a program file to edit; run it with
  haloscope --program mine.halo               --program (e in the UI opens it in $EDITOR)
  haloscope exercise 7                        fix a broken program; judged at every save
  haloscope bench --runtime sim               throughput table, sim runtime vs a plain loop
  haloscope bench --tui                       what the UI costs, and one frame's render time
  haloscope bench --contention                the sim alone and beside two busy processes
  haloscope bench --checker                   check --recording: calls/s and peak memory
  haloscope bench --recording FILE --viewer   the same on your own recording, and the
                                              viewer's time to its first frame
  haloscope --runtime cuda --gpus 0,1         the UI on two real GPUs
  haloscope --headless --runtime cuda --gpus 0,0,1,1
                                              real GPUs, two logical devices per GPU
  haloscope --headless --runtime cuda --mode nccl --gpus 0,1
                                              NCCL's send and receive, one rank per GPU
  torchrun --nproc-per-node 2 --no-python haloscope --runtime cuda --mode nccl-overlap
                                              one process per GPU (or mpirun, srun: see README)
  haloscope bench --runtime cuda              GPU roofline, links, modes, weak scaling
                                              (cuda: a build with --features cuda; see the README)

In the UI: space pause/resume, n one step, . one API call, m/M mode, p pick a mode,
+/- speed, r reset, tab/z focus/zoom a panel, 1-9 focus a device (0: every thread),
l lesson, h hazards, t tour, ? help, q quit.

Built-in scenarios: pulse (default), fresnel, cavity, uneven, race; in 2D radiate, lens, box.
A scenario file is TOML; see the README for every field. Keys can be rebound in
~/.config/haloscope/keymap.toml.";

/// Watch a 1D or 2D FDTD simulation split across devices, and learn how the halo exchange
/// between them must be ordered.
#[derive(Debug, Parser)]
#[command(name = "haloscope", version, after_help = EXAMPLES)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub run: RunArgs,
}

impl Cli {
    /// Whether the command prints JSON (`--json` on a run, `check` or `bench`).
    /// Whether this run asks for the cuda runtime.
    pub fn wants_cuda(&self) -> bool {
        let kind = match &self.command {
            None => self.run.runtime,
            Some(Command::Bench(b)) => b.runtime,
            Some(Command::Tour(t)) => t.runtime,
            Some(_) => return false,
        };
        kind == RuntimeKind::Cuda
    }

    pub fn wants_json(&self) -> bool {
        match &self.command {
            None => self.run.json,
            Some(Command::Check(c)) => c.json,
            Some(Command::Bench(b)) => b.json,
            Some(_) => false,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Measure throughput: the runtime against a plain single-loop CPU stepper, in one run.
    Bench(BenchArgs),
    /// Check a mode's program for hazards: every pair of conflicting accesses it leaves
    /// unordered, whatever the timing (exit 1 when there are any); or, with --recording, a
    /// real CUDA program's recorded calls (`haloscope record`).
    Check(CheckArgs),
    /// A guided tour in the UI: each stop sets scenario, devices and mode, runs to a moment
    /// worth seeing, pauses there and says what to look at. t or Enter moves on, T or
    /// Backspace goes back; every other key works as always (n, ., h, z, i, l, q).
    Tour(TourArgs),
    /// Step programs as files: `program export MODE` writes a built-in mode in the program
    /// language (the README describes it), to edit and run with `--program FILE`.
    Program(ProgramArgs),
    /// Exercises: a broken program to fix. Without N, the list; with N, the broken program
    /// copied to a working file (kept if it exists), the task, and a judgement of the
    /// file each time it is saved: solved when the hazard checker finds nothing and the run
    /// is bit-identical to the reference.
    Exercise(ExerciseArgs),
    /// Record a real CUDA program's stream and event calls (through CUPTI, loaded by CUDA
    /// itself), to check with `haloscope check --recording FILE`.
    #[command(after_help = RECORD_HELP)]
    Record(RecordArgs),
}

const RECORD_HELP: &str = "Examples:
  haloscope record -- ./halo --gpus 0,0
  haloscope record --out seed.recording -- ./seed
  haloscope check --recording seed.recording
  haloscope --recording seed.recording          the recording in the UI

The program runs as always (its output, its exit status); CUDA loads haloscope's recorder
into it through CUDA_INJECTION64_PATH, and the recorder writes each ordering call (devices,
streams, events, records, waits, launches with their arguments, copies, memsets,
synchronisations, allocations, stream captures and graph launches, NVTX marks) with its host
thread and sequence numbers, about 30 bytes each; a writer thread of its own writes them out.
Each CUDA process writes its own file, NAME.<pid>.recording (mode 0600, created new: never
an existing file or link); when one process recorded, it is renamed to --out, and with
several (a launcher, `sh -c 'a & b'`, a fork) they stay by process, each listed with its
call count.
The host's own synchronisation is recorded too (the recorder is also preloaded, LD_PRELOAD):
pthread mutexes, condition variables, semaphores, barriers, thread starts and joins, and GCC's
OpenMP (parallel regions, barriers, critical sections, locks), so that `check` sees the order
they make; --no-host-sync leaves them out. Futexes, atomics, C++20 barriers, LLVM's libomp and
statically linked runtimes are not seen.
Kernel footprints: where NVIDIA's Compute Sanitizer API (the toolkit's compute-sanitizer
folder, or pip install nvidia-cuda-sanitizer-api) and nvcc are found, each kernel's bytes
read, written and updated atomically are measured on the GPU (the first launch of each
kernel, shape and argument values; --footprints all: every launch), so that `check` needs no
annotation; --no-footprints records through CUPTI (NVTX marks kept).
Mark each step with an NVTX range named \"step\" and findings say their step. CUPTI comes from
NVIDIA's wheel (pip install nvidia-cuda-cupti) or the toolkit; --cupti says where.";

/// `record --footprints`: which launches are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Footprints {
    /// The first launch of each signature (kernel, grid, block, argument values); later
    /// launches with the same signature reuse its footprint.
    First,
    /// Every launch.
    All,
}

/// `check --model`: the best model of a kernel's bytes to use (each launch gets the best it
/// has up to this one), to compare what each one finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KernelModel {
    /// The footprint measured on the GPU (`record` with footprints), else the annotation,
    /// else the whole allocations.
    Measured,
    /// The annotation (--annotations), else the whole allocations: measured footprints unused.
    Annotated,
    /// Every allocation a kernel's pointer arguments point into, read and written.
    Conservative,
}

/// Options of `haloscope record`.
#[derive(Debug, Args, Clone)]
pub struct RecordArgs {
    /// The recording file (default: COMMAND.recording; never overwritten). Several CUDA
    /// processes: one file each, NAME.<pid>.recording beside it.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// libcupti.so, or its folder (default: HALOSCOPE_CUPTI, NVIDIA's wheels, the toolkit).
    #[arg(long, value_name = "PATH")]
    pub cupti: Option<PathBuf>,
    /// Stop recording after N calls (the program runs on); the file says so.
    #[arg(long, value_name = "N", default_value_t = 50_000_000)]
    pub max_calls: u64,
    /// Record only CUDA calls, not the host's own synchronisation (no LD_PRELOAD).
    #[arg(long)]
    pub no_host_sync: bool,
    /// Measure which bytes each kernel launch reads and writes, on the GPU (the Compute
    /// Sanitizer API; nvcc builds its patch once): `first`, the first launch of each
    /// kernel, shape and argument values (later ones reuse it; the default when the
    /// Sanitizer API and nvcc are found and --cupti is not given), or `all`, every launch
    /// (slower).
    #[arg(long, value_enum, value_name = "WHICH", conflicts_with = "no_footprints")]
    pub footprints: Option<Footprints>,
    /// Measure no footprints (recorded through CUPTI, NVTX marks kept): `check` takes each
    /// kernel to read and write all its pointers' allocations, or what --annotations says.
    #[arg(long)]
    pub no_footprints: bool,
    /// libsanitizer-public.so, or its folder (default: HALOSCOPE_SANITIZER, NVIDIA's wheel
    /// nvidia-cuda-sanitizer-api, the toolkit's compute-sanitizer folder).
    #[arg(long, value_name = "PATH")]
    pub sanitizer: Option<PathBuf>,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Options of `haloscope exercise`.
#[derive(Debug, Args, Clone)]
pub struct ExerciseArgs {
    /// The exercise's number (see the list).
    #[arg(value_name = "N")]
    pub number: Option<usize>,

    /// The working file (default: ./exercise-N-NAME.halo).
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,

    /// Judge the file once and exit instead of judging every save. Exit status: 0 solved
    /// (and, for an exercise about speed, fast), 1 not yet, 2 a bad number or file.
    #[arg(long)]
    pub once: bool,

    /// With --once: print only the verdict, as one JSON object (solved, correct, fast,
    /// the findings grouped by cause, the run's figures), for a course's grader.
    #[arg(long, requires = "once")]
    pub json: bool,

    /// Show the hint too.
    #[arg(long)]
    pub hint: bool,
}

/// Options of `haloscope program`.
#[derive(Debug, Args, Clone)]
pub struct ProgramArgs {
    #[command(subcommand)]
    pub action: ProgramAction,
}

const EXPORT_HELP: &str = "Examples:
  haloscope program export events > mine.halo
  haloscope program export events --cuda --out events-cuda
  haloscope program export mine.halo --cuda --out mine-cuda --scenario radiate --devices 4 --gpus 0,0,0,0
  cd events-cuda && nvcc -O3 --fmad=false -arch=native -Xcompiler -fopenmp main.cu -o halo && ./halo

The CUDA program writes its fields to fields/ as `haloscope --headless --dump-fields DIR` does
(same scenario, devices and steps): they are equal bit for bit. An NCCL program (nccl,
nccl-overlap, a file with ncclSend/ncclRecv) links NCCL (`… -o halo -lnccl`) and needs one GPU
per device: NCCL refuses two ranks on one GPU.";

#[derive(Debug, Subcommand, Clone)]
pub enum ProgramAction {
    /// Write MODE's program file to standard output (or to --output FILE); with `--cuda
    /// --out DIR`, MODE or a program FILE as a standalone CUDA C++ program.
    #[command(after_help = EXPORT_HELP)]
    Export {
        /// A mode's name (its program file), or with --cuda a program file.
        #[arg(value_name = "MODE|FILE")]
        program: String,
        /// Also list, as comments, the calls each host thread makes on N devices of the
        /// default scenario; with --cuda, split the grid evenly over N devices.
        #[arg(long, value_name = "N")]
        devices: Option<usize>,
        /// Write to FILE instead of standard output (refused if FILE exists).
        #[arg(short, long, value_name = "FILE", conflicts_with = "cuda")]
        output: Option<PathBuf>,
        /// Write a standalone CUDA C++ program into --out DIR: main.cu (host code, one
        /// OpenMP thread per device), halo.cuh, the kernels, the scenario's data, a README
        /// with the nvcc line. It gives haloscope's fields bit for bit.
        #[arg(long, requires = "out")]
        cuda: bool,
        /// The folder for --cuda (made; refused if it exists and is not empty).
        #[arg(long, value_name = "DIR", requires = "cuda")]
        out: Option<PathBuf>,
        /// With --cuda: a built-in scenario name or a scenario TOML file (default: pulse).
        #[arg(short, long, value_name = "NAME|FILE", requires = "cuda")]
        scenario: Option<String>,
        /// With --cuda: steps to run (default: the scenario's `grid.steps`; rounded up to
        /// whole rounds).
        #[arg(long, value_name = "N", requires = "cuda")]
        steps: Option<u64>,
        /// With --cuda: the GPU of each device, `0,0,0,0` for four on GPU 0 (default: one
        /// GPU per device; `./halo --gpus LIST` changes it at run time). NCCL programs:
        /// distinct GPUs only.
        #[arg(long, value_name = "LIST", requires = "cuda")]
        gpus: Option<String>,
    },
}

/// Options of `haloscope tour`.
#[derive(Debug, Args, Clone)]
pub struct TourArgs {
    /// A built-in tour (`rules`: the nine rules, the default) or a tour TOML file (see
    /// assets/tours/rules.toml for every field).
    #[arg(value_name = "NAME|FILE")]
    pub tour: Option<String>,

    /// List the built-in tours and their stops, and exit.
    #[arg(long)]
    pub list: bool,

    /// Runtime the stops run on.
    #[arg(long, value_enum, default_value_t = RuntimeKind::Sim)]
    pub runtime: RuntimeKind,

    /// With `--runtime cuda`: the GPUs the stops' devices are spread over (default: every
    /// visible GPU).
    #[arg(long, value_name = "LIST")]
    pub gpus: Option<String>,

    /// Key bindings file (as for the UI).
    #[arg(long, value_name = "FILE")]
    pub keymap: Option<PathBuf>,

    /// Off-screen, as for the UI: play the tour, press KEYS (each stop is waited for until
    /// it is there), print the final screen.
    #[arg(long, value_name = "KEYS")]
    pub screen: Option<String>,

    /// Format of --screen's output and of screens saved with `s` (cast or animated-svg:
    /// the whole --screen script, a frame per key).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,

    /// Terminal size for --screen, as COLUMNSxROWS.
    #[arg(long, value_name = "WxH", default_value = "160x48", requires = "screen")]
    pub size: String,
}

/// Options of `haloscope check`.
#[derive(Debug, Args, Clone)]
pub struct CheckArgs {
    /// Ordering mode to check.
    #[arg(long, value_parser = mode_parser(), default_value = "events")]
    pub mode: Mode,

    /// Check this program file instead of a mode.
    #[arg(long, value_name = "FILE", conflicts_with = "mode")]
    pub program: Option<PathBuf>,

    /// A built-in scenario name or a path to a scenario TOML file.
    #[arg(short, long, value_name = "NAME|FILE")]
    pub scenario: Option<String>,

    /// Split the grid evenly over N devices.
    #[arg(long, value_name = "N")]
    pub devices: Option<usize>,

    /// Check a recording of a real CUDA program (`haloscope record`) instead of a mode; with
    /// several (one per process), each report headed by its file and process.
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["mode", "program", "scenario", "devices"])]
    pub recording: Vec<PathBuf>,

    /// With --recording: what each kernel reads and writes, in terms of its parameters
    /// (`kernel NAME(params): reads P[a .. b]; writes P[a .. b];`, as an export's
    /// kernels/access.txt); other kernels read and write all their pointers' allocations.
    #[arg(long, value_name = "FILE", requires = "recording")]
    pub annotations: Option<PathBuf>,

    /// With --recording: leave the host's own synchronisation out, as `record --no-host-sync`
    /// would have (barriers, mutexes, joins): the findings that only the host orders come
    /// back — to see what the host's synchronisation is doing.
    #[arg(long, requires = "recording")]
    pub ignore_host_sync: bool,

    /// With --recording: the best model of a kernel's bytes to use — `measured` (the
    /// footprint `record` measured on the GPU, else the annotation, else whole allocations),
    /// `annotated` (measured footprints unused) or `conservative` (every allocation a
    /// kernel's pointers point into, read and written) — to compare what each finds.
    #[arg(
        long,
        value_enum,
        value_name = "MODEL",
        default_value = "measured",
        requires = "recording"
    )]
    pub model: KernelModel,

    /// Print the findings as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// Options of `haloscope bench`.
#[derive(Debug, Args, Clone)]
pub struct BenchArgs {
    /// Runtime to measure.
    #[arg(long, value_enum, default_value_t = RuntimeKind::Sim)]
    pub runtime: RuntimeKind,

    /// GPUs to measure with `--runtime cuda` (default: the first two visible).
    #[arg(long, value_name = "LIST")]
    pub gpus: Option<String>,

    /// Grid sizes in cells (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [65_536usize, 1_048_576, 4_194_304])]
    pub cells: Vec<usize>,

    /// Device counts (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 4])]
    pub devices: Vec<usize>,

    /// Seconds to spend on each measurement (steps are chosen to fill it), above 0 and at
    /// most 3600.
    #[arg(long, default_value_t = 0.5, value_name = "S", value_parser = parse_seconds)]
    pub seconds: f64,

    /// Repetitions of each measurement; the median is reported.
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub repeat: usize,

    /// Print the results as JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// With `--runtime cuda`: only these modes' rows and weak scaling (comma-separated),
    /// with the copy, link and launch figures they are compared with; no interior, strong
    /// scaling, fused-kernel or snapshot rows.
    #[arg(long, value_delimiter = ',', value_name = "MODES", value_parser = mode_parser())]
    pub modes: Option<Vec<Mode>>,

    /// With `--runtime cuda`, instead: 2D grids of N × N cells (comma-separated sizes) —
    /// every correct mode's time per step on one GPU and on all of `--gpus` (strong
    /// scaling), the interior update's bandwidth against the copy bandwidth, and the heat
    /// map's reduction on the GPU against the CPU's.
    #[arg(long, value_delimiter = ',', value_name = "N")]
    pub plane: Option<Vec<usize>>,

    /// With `--tui`: the scenario to measure (a built-in name or a file; default: the
    /// default scenario).
    #[arg(long, value_name = "NAME|FILE")]
    pub scenario: Option<String>,

    /// Instead: the UI's cost. Sim throughput on the default scenario headless vs with the
    /// UI drawing to an off-screen 200×60 terminal, and the time to render one frame.
    #[arg(long)]
    pub tui: bool,

    /// Instead: the hazard checker's time per mode on 8 devices of the default scenario.
    #[arg(long)]
    pub check: bool,

    /// Instead: `check --recording`'s speed and peak memory on ring exchanges of each size
    /// in `--calls` (8 host threads, 24 streams, generated into a temporary folder), then on
    /// each `--recording FILE`, each checked `--repeat` times (the median time).
    #[arg(long)]
    pub checker: bool,

    /// With `--checker`: the ring recordings' sizes in calls (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "N", requires = "checker",
          default_values_t = [1_000_000u64, 10_000_000])]
    pub calls: Vec<u64>,

    /// Instead (or with `--checker`, after its rings): `check --recording`'s speed and peak
    /// memory on this recording (repeatable).
    #[arg(long, value_name = "FILE")]
    pub recording: Vec<PathBuf>,

    /// With `--checker` or `--recording`: the viewer too (`haloscope --recording FILE`), its
    /// time from opening the file to its first frame and its peak memory, once a file. The
    /// viewer reads the whole file before its first frame and keeps about 50 bytes a call.
    #[arg(long)]
    pub viewer: bool,

    /// Instead: the sim on a busy machine. 1D and 2D scenarios at 1, 4 and 7 devices,
    /// each run alone and beside two busy processes (`yes`): wall times, their ratio, and
    /// whether the fields are the same bits.
    #[arg(long)]
    pub contention: bool,
}

/// Options of a run (headless or interactive).
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Run without the UI and print a summary when done.
    #[arg(long)]
    pub headless: bool,

    /// A built-in scenario name or a path to a scenario TOML file.
    #[arg(short, long, value_name = "NAME|FILE")]
    pub scenario: Option<String>,

    /// Number of steps (default: the scenario's `grid.steps`).
    #[arg(long, value_name = "N")]
    pub steps: Option<u64>,

    /// Split the grid evenly over N devices (overrides the scenario's `[devices]`).
    #[arg(long, value_name = "N")]
    pub devices: Option<usize>,

    /// Print the headless summary (or `--list`) as one JSON object on stdout.
    #[arg(long)]
    pub json: bool,

    /// Write the final fields to DIR/ex.npy and DIR/hy.npy (float32, for numpy.load); a
    /// 2D grid's to DIR/ez.npy, DIR/hx.npy and DIR/hy.npy, each of shape (ny, nx).
    #[arg(long, value_name = "DIR")]
    pub dump_fields: Option<PathBuf>,

    /// Skip the single-domain reference run (no max |Δ| is reported).
    #[arg(long)]
    pub no_reference: bool,

    /// Ordering mode: how the halo copies are ordered (see --list for each lesson).
    #[arg(long, value_parser = mode_parser(), default_value = "events")]
    pub mode: Mode,

    /// Run this program file instead of a mode (`haloscope program export MODE` writes any
    /// mode as one to start from; the README describes the language).
    #[arg(long, value_name = "FILE", conflicts_with = "mode")]
    pub program: Option<PathBuf>,

    /// Runtime executing the step program: `sim` (virtual GPUs on the CPU) or `cuda`.
    #[arg(long, value_enum, default_value_t = RuntimeKind::Sim)]
    pub runtime: RuntimeKind,

    /// Physical GPU of each logical device for `--runtime cuda`: `0,1` (one per GPU),
    /// `0,0,1,1` (two per GPU), `0,0,0,0` (four on one GPU). Default: one device per
    /// visible GPU.
    #[arg(long, value_name = "LIST")]
    pub gpus: Option<String>,

    /// With `--runtime cuda` and an NCCL mode: seconds without progress (no call issued, no
    /// NCCL call completed) after which the run is called hung, the calls each rank waits
    /// in are named and the communicators aborted. The same for a program that waits on
    /// flags (`fused-flags`): its last flag waits are named and the run stops (exit 1).
    #[arg(long, value_name = "SECONDS", default_value_t = 30.0)]
    pub nccl_timeout: f64,

    /// Compare with the reference every N steps and report the first step at which the run
    /// differs. Default: only at the end. On the sim this only observes the run (it goes on
    /// unchanged); on GPUs the devices synchronise there.
    #[arg(long, value_name = "N")]
    pub check_every: Option<u64>,

    /// Perturb every modelled duration reproducibly with this seed, to explore other
    /// interleavings (sim runtime). The spread is the scenario's `cost.jitter` (default ±50%).
    #[arg(long, value_name = "SEED")]
    pub jitter: Option<u64>,

    /// Write the timeline as Chrome Trace Event JSON (open in Perfetto or chrome://tracing),
    /// streamed to FILE as the run goes: memory stays flat, and a run cut short (by any
    /// signal) leaves valid JSON. The sim writes its modelled times; the cuda runtime times
    /// every kept call on the GPU (an event before and after it on its stream).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,

    /// With --trace: only steps A..B (A included, B not), e.g. 1000..1010.
    #[arg(long, value_name = "A..B", value_parser = parse_step_range, requires = "trace",
          conflicts_with = "trace_last")]
    pub trace_steps: Option<std::ops::Range<u64>>,

    /// With --trace: only the last N steps of the run (kept in memory until the end).
    #[arg(long, value_name = "N", requires = "trace", value_parser = clap::value_parser!(u64).range(1..))]
    pub trace_last: Option<u64>,

    /// Key bindings file for the UI (default: ~/.config/haloscope/keymap.toml if present).
    #[arg(long, value_name = "FILE", conflicts_with = "headless")]
    pub keymap: Option<PathBuf>,

    /// Start the UI paused (space runs, n steps, . issues one API call).
    #[arg(long, conflicts_with = "headless")]
    pub paused: bool,

    /// Run the UI off-screen, no terminal needed: press KEYS in order (key names as in the
    /// keymap, separated by spaces; `wait:MS` lets the run go on for MS milliseconds),
    /// then print the final screen as text. For docs, slides and scripted checks, e.g.
    /// --screen "n n . . ." (two steps, then three API calls).
    #[arg(long, value_name = "KEYS", conflicts_with = "headless")]
    pub screen: Option<String>,

    /// Format of --screen's output and of screens saved with `s` in the UI: text, ansi
    /// (colours for a terminal), html or svg (for slides); cast or animated-svg for the
    /// whole --screen script, a frame per key.
    #[arg(long, value_enum, default_value_t = Format::Text, conflicts_with = "headless")]
    pub format: Format,

    /// Terminal size for --screen, as COLUMNSxROWS.
    #[arg(
        long,
        value_name = "WxH",
        default_value = "160x48",
        requires = "screen",
        conflicts_with = "headless"
    )]
    pub size: String,

    /// Open a real CUDA program's recording (`haloscope record`) in the UI: each host
    /// thread's calls as CUDA code, the streams' work in issue order, the findings of
    /// `haloscope check --recording` marked in both threads; `.` walks the calls. Several
    /// files (one per process): Tab and Shift-Tab switch between them.
    #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with_all = ["headless", "program", "scenario", "runtime"])]
    pub recording: Vec<PathBuf>,

    /// With --recording: what each kernel reads and writes (as for `check --recording`).
    #[arg(long, value_name = "FILE", requires = "recording")]
    pub annotations: Option<PathBuf>,

    /// Test hook: make a device thread panic at this step.
    #[arg(long, hide = true, value_name = "STEP")]
    pub inject_panic: Option<u64>,

    /// List the built-in scenarios and ordering modes, and exit.
    #[arg(long)]
    pub list: bool,
}

/// `A..B` with A < B.
fn parse_step_range(s: &str) -> Result<std::ops::Range<u64>, String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("`{s}` is not a step range: write A..B, e.g. 1000..1010"))?;
    let num = |x: &str| {
        x.trim()
            .parse::<u64>()
            .map_err(|_| format!("`{x}` in `{s}` is not a step number"))
    };
    let (a, b) = (num(a)?, num(b)?);
    if a >= b {
        return Err(format!("`{s}` is empty: A must be below B"));
    }
    Ok(a..b)
}

/// A number of seconds in (0, 3600].
fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number of seconds"))?;
    if v > 0.0 && v <= 3600.0 {
        Ok(v)
    } else {
        Err(format!("{v} seconds: give a number above 0 and at most 3600"))
    }
}
