//! Where rank 0 is: the rendezvous address or `file:` rendezvous (written by rank 0
//! anew with mode 0600, read by the others only when it can be rank 0's), the secret and
//! the handshake timeout from the environment, rank 0's listener.

use anyhow::{Context, Result, anyhow};
use rustix::fs::{Mode, OFlags};
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Once;
use std::time::Duration;

use super::wire::{hex, nonce, quote};
use crate::error::UsageError;
use crate::world::World;

/// A `file:` rendezvous file larger than this is refused.
pub const MAX_FILE: u64 = 1 << 16;
/// The shortest `HALOSCOPE_RENDEZVOUS_TOKEN` taken.
const MIN_TOKEN: usize = 16;

/// `file:PATH`: rank 0 listens on a free port and writes `host:port token` to PATH (on a
/// file system every rank sees; created O_EXCL|O_NOFOLLOW, mode 0600), the others read it
/// there ([`read_file_of`]).
fn file_of(rendezvous: &str) -> Option<&std::path::Path> {
    rendezvous.strip_prefix("file:").map(std::path::Path::new)
}

/// This host's name, for the others to reach rank 0 by.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "127.0.0.1".into())
}

/// The rendezvous's secret and handshake timeout: from the environment
/// (`HALOSCOPE_RENDEZVOUS_TOKEN`, `HALOSCOPE_HANDSHAKE_TIMEOUT_MS`), or a test's.
#[derive(Clone)]
pub struct Auth {
    pub token: Option<Vec<u8>>,
    pub handshake: Duration,
}

impl Auth {
    pub fn from_env() -> Result<Auth, UsageError> {
        Ok(Auth {
            token: env_token()?,
            handshake: handshake_timeout(),
        })
    }
}

/// `HALOSCOPE_RENDEZVOUS_TOKEN`, when set.
fn env_token() -> Result<Option<Vec<u8>>, UsageError> {
    match std::env::var("HALOSCOPE_RENDEZVOUS_TOKEN") {
        Ok(t) if t.len() >= MIN_TOKEN => Ok(Some(t.into_bytes())),
        Ok(t) => Err(UsageError(format!(
            "HALOSCOPE_RENDEZVOUS_TOKEN: {} characters; give at least {MIN_TOKEN} (the same on every rank)",
            t.len()
        ))),
        Err(_) => Ok(None),
    }
}

/// How long a handshake may take (`HALOSCOPE_HANDSHAKE_TIMEOUT_MS`, for tests).
fn handshake_timeout() -> Duration {
    let ms = std::env::var("HALOSCOPE_HANDSHAKE_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok());
    Duration::from_millis(ms.unwrap_or(10_000).max(1))
}

/// The rendezvous host's addresses, refused where it is a loopback address while the
/// ranks span hosts (a host that maps its own name to 127.0.1.1).
fn resolve(world: &World, host_port: &str) -> Result<Vec<SocketAddr>> {
    let shown = quote(host_port);
    let addrs: Vec<SocketAddr> = host_port
        .to_socket_addrs()
        .map_err(|e| UsageError(format!("{}: rendezvous {shown}: {e}", world.rendezvous_var)))?
        .collect();
    if world.spans_hosts
        && let Some(a) = addrs.iter().find(|a| a.ip().is_loopback())
    {
        return Err(UsageError(format!(
            "{}: rendezvous {shown} resolves to {}, a loopback address, but the ranks run on \
             several hosts and could never reach it: give rank 0's address as the others see it",
            world.rendezvous_var,
            a.ip()
        ))
        .into());
    }
    if addrs.is_empty() {
        return Err(UsageError(format!(
            "{}: rendezvous {shown}: no address",
            world.rendezvous_var
        ))
        .into());
    }
    Ok(addrs)
}

/// Rank 0's listener and secret: a `file:` rendezvous listens on a free port of every
/// address and writes `host:port token` into a new file (mode 0600); `host:port` listens
/// on every address with a token, else only on `host`'s own address.
pub(super) fn listen(world: &World, auth: &Auth) -> Result<(TcpListener, Option<Vec<u8>>)> {
    let token = auth.token.clone();
    if let Some(path) = file_of(&world.rendezvous) {
        let secret = match token {
            Some(t) => t,
            None => hex(&nonce()?).into_bytes(),
        };
        let listener = TcpListener::bind(("0.0.0.0", 0))?;
        let at = format!(
            "{}:{} {}\n",
            host_name(),
            listener.local_addr()?.port(),
            String::from_utf8_lossy(&secret)
        );
        let (dir, name) = folder_of(path, world.rendezvous_var)?;
        rustix::fs::openat(
            &dir,
            name,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )
        .map_err(std::io::Error::from)
        .and_then(|fd| std::fs::File::from(fd).write_all(at.as_bytes()))
        .map_err(|e| {
            UsageError(format!(
                "{}: rendezvous file {}: cannot create it anew: {e} (a file left by an earlier run? remove it)",
                world.rendezvous_var,
                path.display()
            ))
        })?;
        backlog(&listener)?;
        return Ok((listener, Some(secret)));
    }
    let port = world
        .rendezvous
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .ok_or_else(|| {
            UsageError(format!(
                "{}: rendezvous {}: not host:port nor file:PATH",
                world.rendezvous_var, world.rendezvous
            ))
        })?;
    let busy = |e: std::io::Error| {
        UsageError(format!(
            "rank 0 cannot listen on port {port} (rendezvous {}): {e}; pick a free MASTER_PORT (or \
             HALOSCOPE_RENDEZVOUS)",
            world.rendezvous
        ))
    };
    let addrs = resolve(world, &world.rendezvous)?;
    if token.is_some() {
        let listener = TcpListener::bind(("0.0.0.0", port)).map_err(busy)?;
        backlog(&listener)?;
        return Ok((listener, token));
    }
    // No secret: only the address the variable names, which must be one of this host's.
    let bound = TcpListener::bind(&addrs[..]).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrNotAvailable {
            UsageError(format!(
                "{}: rendezvous {} is not an address of this host (rank 0's): give rank 0's own address",
                world.rendezvous_var, world.rendezvous
            ))
        } else {
            busy(e)
        }
    })?;
    backlog(&bound)?;
    static WARN: Once = Once::new();
    WARN.call_once(|| {
        eprintln!(
            "warning: the rendezvous at {} ({}) is unauthenticated: whoever reaches it can join the \
             run; set HALOSCOPE_RENDEZVOUS_TOKEN (the same secret on every rank) or use \
             HALOSCOPE_RENDEZVOUS=file:PATH",
            world.rendezvous, world.rendezvous_var
        )
    });
    Ok((bound, None))
}

/// A longer queue of connections not yet taken than std's 128, so that a flood of them
/// does not make the kernel drop a rank's.
fn backlog(listener: &TcpListener) -> Result<()> {
    rustix::net::listen(listener, 4096).context("listening for the other ranks")
}

/// The folder of a `file:` rendezvous, opened, and the file's name in it: refused (a
/// [`UsageError`]) when another user could put a file there or take rank 0's away: the
/// folder must be sticky (as /tmp), or be this user's (or root's) and writable by no one
/// else.
fn folder_of<'p>(path: &'p Path, var: &str) -> Result<(std::fs::File, &'p OsStr)> {
    let refuse = |why: String| UsageError(format!("{var}: rendezvous file {}: {why}", path.display()));
    let name = path
        .file_name()
        .ok_or_else(|| refuse("does not end with a file name".into()))?;
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = rustix::fs::open(
        folder,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        refuse(format!(
            "cannot open its folder {}: {}",
            folder.display(),
            std::io::Error::from(e)
        ))
    })?;
    let dir = std::fs::File::from(dir);
    let m = dir.metadata()?;
    let me = rustix::process::geteuid().as_raw();
    if m.mode() & 0o1000 == 0 {
        let who = match m.mode() & 0o022 {
            0 => None,
            0o020 => Some("its group"),
            0o002 => Some("others"),
            _ => Some("its group and others"),
        };
        if let Some(who) = who {
            return Err(refuse(format!(
                "its folder {} is writable by {who} (mode {:o}) and not sticky: another user could \
                 put their own file there; use a folder only you can write",
                folder.display(),
                m.mode() & 0o7777
            ))
            .into());
        }
        if m.uid() != me && m.uid() != 0 {
            return Err(refuse(format!(
                "its folder {} belongs to uid {}, who could put their own file there; use a folder \
                 of yours",
                folder.display(),
                m.uid()
            ))
            .into());
        }
    }
    Ok((dir, name))
}

/// The text of a `file:` rendezvous, read only when it can be rank 0's: a regular file,
/// not a link, this user's, readable and writable by no one else (rank 0 creates it
/// 0600), at most [`MAX_FILE`] bytes, in a folder [`folder_of`] takes. A refusal (a
/// [`UsageError`]) says which it is not; `None`: no file there yet.
fn read_file_of(path: &Path, var: &str) -> Result<Option<String>> {
    let refuse = |why: String| -> anyhow::Error {
        UsageError(format!("{var}: rendezvous file {}: {why}", path.display())).into()
    };
    let (dir, name) = folder_of(path, var)?;
    // Not blocking: a FIFO there opens at once (and is refused below).
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let file = match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
        Ok(fd) => std::fs::File::from(fd),
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => {
            return Err(refuse(
                "a symbolic link, not followed: rank 0 writes a file of its own there".into(),
            ));
        }
        Err(e) => return Err(refuse(format!("cannot open it: {}", std::io::Error::from(e)))),
    };
    let m = file.metadata()?;
    let me = rustix::process::geteuid().as_raw();
    if !m.file_type().is_file() {
        return Err(refuse(format!(
            "not a regular file ({:?}): rank 0 writes a file of its own there",
            m.file_type()
        )));
    }
    if m.uid() != me {
        return Err(refuse(format!(
            "it belongs to uid {}, not to this user (uid {me}): someone else's file, not rank 0's",
            m.uid()
        )));
    }
    if m.mode() & 0o077 != 0 {
        return Err(refuse(format!(
            "mode {:o}: others may read or change it (rank 0 creates it 0600)",
            m.mode() & 0o7777
        )));
    }
    if m.len() > MAX_FILE {
        return Err(refuse(format!("{} bytes (at most {MAX_FILE})", m.len())));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(refuse(format!("more than {MAX_FILE} bytes")));
    }
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| refuse("not text: rank 0 writes `host:port token`".into()))
}

/// Where rank 0 listens and its secret: `host:port` (and the token from the environment),
/// or what its file says.
pub(super) fn address(world: &World, auth: &Auth) -> Result<(Vec<SocketAddr>, Option<Vec<u8>>)> {
    let Some(path) = file_of(&world.rendezvous) else {
        return Ok((resolve(world, &world.rendezvous)?, auth.token.clone()));
    };
    let text = read_file_of(path, world.rendezvous_var)?
        .ok_or_else(|| anyhow!("{} is not there yet", path.display()))?;
    // Rank 0 writes the file in one write ending with a newline: until then, try again.
    let line = text
        .strip_suffix('\n')
        .ok_or_else(|| anyhow!("{} is not written yet", path.display()))?;
    let (at, token) = line
        .split_once(' ')
        .ok_or_else(|| anyhow!("{}: not `host:port token`", path.display()))?;
    let token = match &auth.token {
        Some(t) => t.clone(),
        None => token.as_bytes().to_vec(),
    };
    Ok((resolve(world, at)?, Some(token)))
}
