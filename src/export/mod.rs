//! `haloscope program export MODE|FILE --cuda --out DIR`: a program as a standalone CUDA
//! C++ program (`main.cu` from [`cuda`], `halo.cuh`, the kernels haloscope's cuda runtime
//! loads, the scenario's data as haloscope computed it, a README) that builds with nvcc
//! and gives haloscope's fields bit for bit.

mod assets;
pub mod cuda;
pub mod safe;
mod skeleton;

use anyhow::Result;
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;

use rustix::fs::{Mode as FileMode, OFlags};
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::decomp::{DeviceState, place_sources};
use crate::error::UsageError;
use crate::geometry::{Coefficients, Grid};
use crate::physics::EndCondition;
use crate::program::{Mode, ProgramFile};
use crate::scenario::{Injection, Scenario};

pub use assets::ACCESS;
use assets::HALO_CUH;

pub use cuda::{BUILD, BUILD_NOTES, BUILD_PIP_NCCL, build_line};

/// The most bytes of source values an export writes (`data/sources.npy`).
pub const MAX_SOURCE_TABLE: u64 = 256 << 20;

/// What to export.
#[derive(Debug, Clone)]
pub struct Request {
    /// A mode's name or a program file.
    pub program: String,
    pub scenario: Option<String>,
    pub devices: Option<usize>,
    pub steps: Option<u64>,
    pub gpus: Option<String>,
    pub out: PathBuf,
}

impl Request {
    /// The command that makes this export, in canonical form (no `--out`: the files'
    /// folder), for the headers of what it writes.
    pub fn command(&self) -> String {
        let mut c = format!(
            "haloscope program export {} --cuda{}",
            self.program,
            self.run_options()
        );
        if let Some(g) = &self.gpus {
            let _ = write!(c, " --gpus {g}");
        }
        c
    }

    /// ` --scenario S --devices N --steps N`, those given: what a run and an export share.
    fn run_options(&self) -> String {
        let mut c = String::new();
        if let Some(s) = &self.scenario {
            let _ = write!(c, " --scenario {s}");
        }
        if let Some(n) = self.devices {
            let _ = write!(c, " --devices {n}");
        }
        if let Some(n) = self.steps {
            let _ = write!(c, " --steps {n}");
        }
        c
    }

    /// The headless run that gives the same fields, dumped into `theirs/`.
    pub fn headless_command(&self) -> String {
        let program = match builtin(&self.program) {
            Some(m) => format!("--mode {}", m.name()),
            None => format!("--program {}", self.program),
        };
        format!(
            "haloscope --headless {program}{} --dump-fields theirs",
            self.run_options()
        )
    }
}

/// The export command of the program file at `path` for a run on `devices` devices of
/// `scenario` (the default one if none) for `steps` steps; `None` where it cannot export
/// (a file that does not parse).
pub fn command_for(path: &Path, (scenario, devices, steps): (Option<&str>, usize, u64)) -> Option<String> {
    ProgramFile::load(path).ok()?;
    let stem = path.file_stem()?.to_string_lossy();
    let r = Request {
        program: path.display().to_string(),
        scenario: scenario.map(String::from),
        devices: Some(devices),
        steps: Some(steps),
        gpus: None,
        out: PathBuf::from(format!("{stem}-cuda")),
    };
    Some(format!("{} --out {}", r.command(), r.out.display()))
}

/// The built-in mode `spec` names, unless a file of that name exists.
fn builtin(spec: &str) -> Option<Mode> {
    Mode::from_name(spec).filter(|_| !Path::new(spec).exists())
}

/// The program of `spec`: a built-in mode's file (unless a file of that name exists), or
/// a program file.
pub fn program_of(spec: &str) -> Result<ProgramFile> {
    if let Some(m) = builtin(spec) {
        return Ok(ProgramFile::parse(
            Path::new(&format!("assets/programs/{}.halo", m.name())),
            m.source().to_string(),
        )?);
    }
    if !Path::new(spec).exists() {
        let modes: Vec<&str> = Mode::all().iter().map(|m| m.name()).collect();
        return Err(UsageError(format!(
            "{spec}: neither a mode ({}) nor a program file",
            modes.join(", ")
        ))
        .into());
    }
    Ok(ProgramFile::load(Path::new(spec))?)
}

/// The scenario of `r`: its devices and steps, rounded up to whole rounds of `k` steps.
fn scenario_of(r: &Request) -> Result<Scenario> {
    let mut s = crate::scenario::load(r.scenario.as_deref())?;
    if let Some(n) = r.devices {
        s = s.with_devices(n)?;
    }
    if let Some(steps) = r.steps {
        if steps == 0 {
            return Err(UsageError("--steps 0: give at least 1".into()).into());
        }
        s.steps = steps;
    }
    Ok(s)
}

/// What an export is made of: the program, the scenario (its steps whole rounds) and the
/// GPU of each device.
pub struct Plan {
    pub file: ProgramFile,
    pub scenario: Scenario,
    pub gpus: Vec<i32>,
}

/// The plan of `r`, or why it cannot be exported.
pub fn plan(r: &Request) -> Result<Plan> {
    let file = program_of(&r.program)?;
    let mut s = scenario_of(r)?;
    let ranges = s.ranges();
    let program = file.instantiate(&ranges)?;
    s.steps = crate::headless::whole_steps(s.steps, program.steps_per_round, &file.name)?;
    let gpus = match &r.gpus {
        Some(list) => crate::plan::parse_gpus(list)?,
        None => (0..ranges.len() as i32).collect(),
    };
    if gpus.len() != ranges.len() {
        return Err(UsageError(format!(
            "--gpus {}: {} GPUs for {} devices (give one per device; several may be the same GPU)",
            r.gpus.as_deref().unwrap_or(""),
            gpus.len(),
            ranges.len()
        ))
        .into());
    }
    if cuda::uses_nccl(&file.source().step)
        && let Some((a, b)) =
            (0..gpus.len()).find_map(|b| (0..b).find(|&a| gpus[a] == gpus[b]).map(|a| (a, b)))
    {
        return Err(UsageError(format!(
            "--gpus {}: devices {a} and {b} are both on GPU {}; {} sends NCCL messages and NCCL \
             refuses two ranks on one GPU: give each device its own GPU (as the default does)",
            r.gpus.as_deref().unwrap_or(""),
            gpus[b],
            file.name
        ))
        .into());
    }
    // Every step's source values travel as data: a bound on what that file may take.
    let table = s.steps.saturating_mul(s.sources.len() as u64).saturating_mul(4);
    if table > MAX_SOURCE_TABLE {
        return Err(UsageError(format!(
            "--steps {}: the export writes every step's value of each of the {} source(s): {} MiB, \
             more than the {} MiB it allows; export fewer steps",
            s.steps,
            s.sources.len(),
            table >> 20,
            MAX_SOURCE_TABLE >> 20
        ))
        .into());
    }
    Ok(Plan {
        file,
        scenario: s,
        gpus,
    })
}

/// `main.cu` of the plan.
pub fn main_text(p: &Plan, command: &str) -> String {
    let keeps = keeps::Keeps::new(&p.file, &p.scenario);
    let unit = cuda::Unit {
        name: &p.file.name,
        text: &p.file.text,
        src: p.file.source(),
        gpus: &p.gpus,
        command,
        keeps: &|at| keeps.at(at),
        plane: Grid::of(&p.scenario).export_kernels() == "2d",
    };
    let main = cuda::main_cu(&unit);
    let files = support_files(&main, &p.scenario);
    only_used_constants(&main, &files)
}

/// `main` without the kernels' constants (`#define TILE_2D_X 54`) that neither it nor the
/// files written beside it use: a 1D program carries no 2D tile, a two-kernel one no fused
/// pass's.
fn only_used_constants(main: &str, files: &[(String, String)]) -> String {
    let constants: Vec<&str> = crate::kernels::defines()
        .iter()
        .map(|(k, _)| *k)
        .chain(["SHARED_2D"])
        .collect();
    fn defined<'a>(line: &'a str, constants: &[&str]) -> Option<&'a str> {
        let name = line.strip_prefix("#define ")?.split_whitespace().next()?;
        constants.contains(&name).then_some(name)
    }
    let defined = |line: &str| defined(line, &constants).map(str::to_string);
    let uses = |name: String| {
        let rest = main.lines().filter(|l| defined(l).as_ref() != Some(&name));
        rest.chain(files.iter().flat_map(|(_, t)| t.lines()))
            .any(|l| cuda::names_word(l, &name))
    };
    let mut out = String::with_capacity(main.len());
    for line in main.lines() {
        if defined(line).is_none_or(uses) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Writes the export of `r` and says what it wrote and how to build and run it.
pub fn export(r: &Request) -> Result<()> {
    let p = plan(r)?;
    let command = r.command();
    let out = &r.out;
    let shown = safe::escape(&out.display().to_string());
    let dir = OutDir::fresh(out)?;
    let main = main_text(&p, &command);
    let (file, s, gpus) = (&p.file, &p.scenario, &p.gpus);
    let ranges = s.ranges();
    let nccl = cuda::uses_nccl(&file.source().step);
    let text = readme(&file.name, s, (gpus, nccl), (&command, &r.headless_command()));
    let written = write_all(&dir, &main, s, &ranges)
        .and_then(|n| dir.write("README.md", text.as_bytes()).map(|_| n + 1))
        .map_err(|e| UsageError(format!("--out {shown}: cannot write: {e}")))?;
    eprintln!(
        "wrote {shown} ({}: {} on {} devices, {}, {} steps; {written} files)\n\nbuild and run it on a GPU:\n  cd {shown}\n  {}\n  ./halo\n\nit writes its fields to fields/, as `haloscope --headless --dump-fields` does",
        safe::escape(&file.name),
        safe::escape(&s.name),
        ranges.len(),
        Grid::of(s).extent(s.cells),
        s.steps,
        build_line(nccl)
    );
    Ok(())
}

mod keeps;

/// The `--out` folder, open: every file of the export is created in it (or its `kernels/`
/// and `data/`) through the folder's descriptor, new (`O_EXCL`), never through a link
/// (`O_NOFOLLOW`).
struct OutDir {
    fd: OwnedFd,
}

impl OutDir {
    /// `dir` created (private to the user but readable), or, where it exists, opened and
    /// refused unless it is a real folder (not a link), the user's own, not writable by
    /// the group or others (they could replace what the export writes) and empty.
    fn fresh(dir: &Path) -> Result<OutDir> {
        let shown = safe::escape(&dir.display().to_string());
        let refuse = |why: String| -> anyhow::Error { UsageError(format!("--out {shown}: {why}")).into() };
        let existed = match std::fs::symlink_metadata(dir) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(refuse(
                    "is a symbolic link: give a real folder (a link could be turned elsewhere)".into(),
                ));
            }
            Ok(m) if !m.is_dir() => return Err(refuse("exists and is not a folder".into())),
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                    std::fs::create_dir_all(parent)
                        .map_err(|e| refuse(format!("cannot create its parent folder: {e}")))?;
                }
                std::fs::DirBuilder::new()
                    .mode(0o755)
                    .create(dir)
                    .map_err(|e| refuse(format!("cannot create it: {e}")))?;
                false
            }
            Err(e) => return Err(refuse(format!("cannot look at it: {e}"))),
        };
        let fd = rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            FileMode::empty(),
        )
        .map_err(|e| refuse(format!("cannot open it as a folder (not following links): {e}")))?;
        if existed {
            let st = rustix::fs::fstat(&fd).map_err(|e| refuse(format!("cannot look at it: {e}")))?;
            let me = rustix::process::geteuid().as_raw();
            if st.st_uid != me {
                return Err(refuse(format!(
                    "the folder is owned by user {}, not by you ({me}): give a folder of your own",
                    st.st_uid
                )));
            }
            let mode = st.st_mode & 0o7777;
            if mode & 0o022 != 0 {
                return Err(refuse(format!(
                    "the folder is writable by {} (mode {mode:o}): another user could replace the \
                     export's files; `chmod go-w` it or give a new one",
                    if mode & 0o020 != 0 { "its group" } else { "others" }
                )));
            }
            let mut entries =
                rustix::fs::Dir::read_from(&fd).map_err(|e| refuse(format!("cannot list it: {e}")))?;
            let any = entries.find(|e| match e {
                Ok(e) => ![&b"."[..], b".."].contains(&e.file_name().to_bytes()),
                Err(_) => true,
            });
            if any.is_some() {
                return Err(refuse(
                    "the folder exists and is not empty (nothing is overwritten: give a new one)".into(),
                ));
            }
        }
        Ok(OutDir { fd })
    }

    /// A new file `name` (a path of plain names below the folder, `data/x.npy`) holding
    /// `bytes`.
    fn write(&self, name: &str, bytes: &[u8]) -> std::io::Result<()> {
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            FileMode::from_raw_mode(0o644),
        )?;
        std::fs::File::from(fd).write_all(bytes)
    }

    /// A new folder `name` below it.
    fn mkdir(&self, name: &str) -> std::io::Result<()> {
        Ok(rustix::fs::mkdirat(
            &self.fd,
            name,
            FileMode::from_raw_mode(0o755),
        )?)
    }
}

/// Every file but the README; how many.
fn write_all(out: &OutDir, main: &str, s: &Scenario, ranges: &[Range<usize>]) -> std::io::Result<usize> {
    out.mkdir("kernels")?;
    out.mkdir("data")?;
    out.write("main.cu", main.as_bytes())?;
    let files = support_files(main, s);
    for (path, text) in &files {
        out.write(path, text.as_bytes())?;
    }
    Ok(1 + files.len() + write_data(out, s, ranges)?)
}

/// The files an export writes beside `main` (its path in the export, its text): halo.cuh,
/// the parts of it the program uses, the kernel files those need, and kernels/access.txt.
pub fn support_files(main: &str, s: &Scenario) -> Vec<(String, String)> {
    let have = parts(main, s);
    let mut files = vec![("halo.cuh".to_string(), assets::kept(HALO_CUH, &have))];
    for (name, text) in assets::kernels_kept(&have) {
        files.push((format!("kernels/{name}"), text.to_string()));
    }
    files.push(("kernels/access.txt".into(), ACCESS.to_string()));
    files
}

/// The parts of halo.cuh a program uses, as its `main.cu` shows them: the grid's kernels,
/// the fused passes where it launches one, the flags where it loads the driver's calls.
pub fn parts(main: &str, s: &Scenario) -> Vec<&'static str> {
    let mut have = vec![Grid::of(s).export_kernels()];
    if main.contains("launch::fused_") {
        have.push("fused");
    }
    if main.contains("load_driver();") {
        have.push("flags");
    }
    have
}

fn bits(x: f32) -> String {
    format!("0x{:08x}", x.to_bits())
}

/// The scenario as `halo.cuh` reads it: `scenario.txt` (integers, and floats as their
/// bits), the sources' value in every step, each device's coefficients, the 2D Mur rows.
fn write_data(out: &OutDir, s: &Scenario, ranges: &[Range<usize>]) -> std::io::Result<usize> {
    let c = Coefficients::new(s).map_err(std::io::Error::other)?;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "# {}: {}\n# written by haloscope for the export beside it: halo.cuh reads it at start",
        safe::escape(&s.name),
        safe::escape(&s.description)
    );
    let grid = Grid::of(s);
    let _ = writeln!(t, "grid {}", grid.export_shape());
    let _ = writeln!(t, "cells {}\nsteps {}\nch {}", s.cells, s.steps, bits(c.ch));
    for (side, b, mur) in [("left", s.left, c.mur_left), ("right", s.right, c.mur_right)] {
        let _ = match EndCondition::new(b, mur) {
            EndCondition::Pec => writeln!(t, "end {side} pec"),
            EndCondition::Mur(m) => writeln!(t, "end {side} mur {}", bits(m)),
        };
    }
    for (d, r) in ranges.iter().enumerate() {
        let _ = writeln!(t, "device {d} {} {}", r.start, r.end);
    }
    let placed = place_sources(s, 0..s.cells, 0);
    for (_, p) in &placed {
        let hard = if p.injection == Injection::Hard {
            "hard"
        } else {
            "soft"
        };
        let _ = writeln!(
            t,
            "source {} {} {} {hard}",
            p.position, p.columns.start, p.columns.end
        );
    }
    out.write("data/scenario.txt", t.as_bytes())?;
    let mut files = 1;
    if !placed.is_empty() {
        let values: Vec<f32> = (0..s.steps)
            .flat_map(|step| placed.iter().map(move |(_, p)| p.value(step)))
            .collect();
        let npy = crate::npy::encode_f32_shaped(&values, &[s.steps as usize, placed.len()]);
        out.write("data/sources.npy", &npy)?;
        files += 1;
    }
    // The end rows' Mur coefficients (a 2D grid's per column; on a line the ends' own).
    let mur = [c.mur_rows.0.clone(), c.mur_rows.1.clone()].concat();
    out.write(
        "data/mur.npy",
        &crate::npy::encode_f32_shaped(&mur, &[2, grid.per_slice()]),
    )?;
    files += 1;
    for (d, r) in ranges.iter().enumerate() {
        let (ca, cb) = DeviceState::new(d, r.clone(), s, &c)
            .map_err(std::io::Error::other)?
            .coefficient_arrays();
        out.write(
            &format!("data/dev{d}.ca.npy"),
            &crate::npy::encode_f32_shaped(&ca, &[ca.len()]),
        )?;
        out.write(
            &format!("data/dev{d}.cb.npy"),
            &crate::npy::encode_f32_shaped(&cb, &[cb.len()]),
        )?;
        files += 2;
    }
    Ok(files)
}

fn readme(
    name: &str,
    s: &Scenario,
    (gpus, nccl): (&[i32], bool),
    (command, headless): (&str, &str),
) -> String {
    // The name, the command (a path) and the scenario's name are text from outside.
    let (name, command, headless) = (safe::escape(name), safe::escape(command), safe::escape(headless));
    let list: Vec<String> = gpus.iter().map(|g| g.to_string()).collect();
    let same: Vec<String> = gpus.iter().map(|_| "0".to_string()).collect();
    let (build, other) = if nccl {
        (
            format!(
                "    {}\n\nWith NCCL from pip (`nvidia-nccl-cu13`), tell nvcc where it is:\n\n    \
                 NCCL=$(python3 -c 'import nvidia.nccl as m; print(m.__path__[0])')\n    \
                 {BUILD_PIP_NCCL}",
                build_line(true)
            ),
            format!(
                "./halo --gpus {}   # any distinct GPUs: NCCL refuses two ranks on one GPU",
                list.join(",")
            ),
        )
    } else {
        (
            format!("    {BUILD}\n\n{}", BUILD_NOTES.concat()),
            format!("./halo --gpus {}   # every device on GPU 0", same.join(",")),
        )
    };
    let files: Vec<String> = Grid::of(s)
        .components()
        .iter()
        .map(|c| format!("\"{}.npy\"", c.name.to_lowercase()))
        .collect();
    format!(
        "# {name} on {} ({} devices), as CUDA C++\n\n\
         Exported by haloscope: `{command}`\n\n\
         ## Build (CUDA 12 or later)\n\n{build}\n\n\
         `--fmad=false` keeps every multiply and add rounded on its own, as haloscope's CPU \
         and its cuda runtime do; never add `--use_fast_math`.\n\n\
         ## Run\n\n    ./halo                      # GPUs {}\n    {other}\n\n\
         It runs {} steps, prints the time per step and writes the final fields to `fields/` \
         (`--out DIR` for another folder), with the names and layout of `haloscope --headless \
         --dump-fields`. haloscope's, to compare with:\n\n    {headless}\n\nand with numpy:\n\n\
         ```python\nimport numpy as np\nfor f in ({}):\n    a, b = np.load(f\"fields/{{f}}\"), np.load(f\"theirs/{{f}}\")\n    print(f, np.array_equal(a.view(np.uint32), b.view(np.uint32)))\n```\n\n\
         ## What is here\n\n\
         - `main.cu`: the program, one OpenMP host thread per device, its step in its own words;\n\
         - `halo.cuh`: the data, each device's memory, the kernels' launches over the cells \
         haloscope's cuda runtime launches them over, checked calls, `.npy` files;\n\
         - `kernels/`: haloscope's CUDA kernels, unchanged, and `access.txt`: what each reads and \
         writes, in terms of its parameters;\n\
         - `data/`: the scenario as haloscope computed it — `scenario.txt` (the split, the ends, \
         the sources; floats as their bits), `sources.npy` (each source's value in every step), \
         `devN.ca.npy` / `devN.cb.npy` (each device's coefficients, halos included), `mur.npy` \
         (the Mur coefficients of the two end rows, per column).\n",
        safe::escape(&s.name),
        gpus.len(),
        list.join(","),
        s.steps,
        files.join(", "),
    )
}
