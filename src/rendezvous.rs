//! Rank 0 and the other ranks meeting over TCP: rank 0 listens at the world's rendezvous
//! address, each other rank connects and proves who it is, rank 0 answers with the bytes
//! every rank needs (NCCL's unique id). The connection then carries framed messages: a
//! JSON header and a binary payload (fields travel as raw little-endian floats, bit for
//! bit).
//!
//! With a shared secret (`HALOSCOPE_RENDEZVOUS_TOKEN` on every rank, or the random token
//! rank 0 writes beside its address into a `file:` rendezvous, created anew with mode 0600)
//! both sides prove they hold it in a challenge-response handshake: fresh nonces from
//! both, HMAC-SHA256, compared in constant time, the secret never sent. Every frame after
//! the handshake carries a MAC under a session key derived from the secret and both
//! nonces, and a sequence number, so a frame cannot be forged, replayed or reordered.
//! Without a secret rank 0 listens only on the address its variable names (an address of
//! this host) and says once that the rendezvous is unauthenticated. Either way, a stranger
//! cannot break a run: frames before the handshake are at most 4 KiB, handshakes run
//! concurrently (at most [`MAX_HANDSHAKES`] at once) under a short timeout, a bad or
//! stray connection is logged and dropped, and a rank that is already there is refused,
//! not swapped in. NCCL's own bootstrap traffic is NCCL's and is not covered.
//!
//! Hand-written over TCP: the protocol is a dozen lines of framing, and the crates that
//! would bring TLS need certificates every rank would have to be given.

use anyhow::{Context, Result, anyhow, bail};
use hmac::{Hmac, Mac};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use crate::error::UsageError;
use crate::world::World;

type HmacSha256 = Hmac<Sha256>;

/// One framed, ordered, two-way connection.
pub struct Link {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
    /// After an authenticated handshake: the session's key and frame counters.
    session: Option<Session>,
}

struct Session {
    key: [u8; 32],
    /// This side's role in the MACs (0: rank 0, 1: another rank).
    me: u8,
    sent: u64,
    received: u64,
}

/// A frame after the handshake larger than this is refused.
const MAX_FRAME: u64 = 1 << 36;
/// A frame before the handshake larger than this is refused: a hello is a few dozen bytes.
pub const MAX_HELLO: u64 = 4096;
/// Handshakes rank 0 runs at once; connections beyond are dropped at once.
pub const MAX_HANDSHAKES: usize = 16;
/// The shortest `HALOSCOPE_RENDEZVOUS_TOKEN` taken.
const MIN_TOKEN: usize = 16;
const PROTOCOL: &str = "haloscope rendezvous v1";

#[derive(Serialize, Deserialize)]
struct Hello {
    protocol: String,
    rank: usize,
    size: usize,
    /// Hex: the connecting rank's fresh nonce.
    nonce: String,
}

#[derive(Serialize, Deserialize)]
struct Challenge {
    nonce: String,
    /// Rank 0's proof that it holds the secret (`None`: no secret).
    proof: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Proof {
    proof: Option<String>,
}

/// Rank 0's last word of a handshake: welcome (the payload is the shared bytes) or why not.
#[derive(Serialize, Deserialize)]
enum Verdict {
    Welcome,
    Refused(String),
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

fn nonce() -> Result<[u8; 32]> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| anyhow!("no randomness for the rendezvous: {e}"))?;
    Ok(b)
}

fn mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    for p in parts {
        m.update(&(p.len() as u64).to_le_bytes());
        m.update(p);
    }
    m
}

/// What a side proves: `role` ("rank 0" or "rank"), both nonces and who connects.
fn proof(secret: &[u8], role: &str, nc: &[u8], ns: &[u8], rank: usize, size: usize) -> HmacSha256 {
    mac(
        secret,
        &[
            PROTOCOL.as_bytes(),
            role.as_bytes(),
            nc,
            ns,
            &rank.to_le_bytes(),
            &size.to_le_bytes(),
        ],
    )
}

/// The other side's nonce, sent in hex: 32 bytes.
fn nonce_of(text: &str) -> Option<Vec<u8>> {
    unhex(text).filter(|n| n.len() == 32)
}

fn session_key(secret: &[u8], nc: &[u8], ns: &[u8]) -> [u8; 32] {
    mac(secret, &[PROTOCOL.as_bytes(), b"session", nc, ns])
        .finalize()
        .into_bytes()
        .into()
}

impl std::fmt::Debug for Link {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Link({:?})", self.stream().peer_addr().ok())
    }
}

impl Link {
    fn new(s: TcpStream) -> Result<Link> {
        s.set_nodelay(true)?;
        Ok(Link {
            reader: BufReader::new(s.try_clone()?),
            writer: BufWriter::new(s),
            session: None,
        })
    }

    /// From here on every frame carries a MAC under the session key of `secret` and both
    /// nonces; `me` is this side's role (0: rank 0, 1: another rank).
    fn start_session(&mut self, secret: &[u8], nc: &[u8], ns: &[u8], me: u8) {
        self.session = Some(Session {
            key: session_key(secret, nc, ns),
            me,
            sent: 0,
            received: 0,
        });
    }

    fn stream(&self) -> &TcpStream {
        self.reader.get_ref()
    }

    /// Sends `header` and `payload` (with the session's MAC after the handshake).
    pub fn send<T: Serialize>(&mut self, header: &T, payload: &[u8]) -> Result<()> {
        let h = serde_json::to_vec(header)?;
        let (hl, pl) = (
            (h.len() as u64).to_le_bytes(),
            (payload.len() as u64).to_le_bytes(),
        );
        self.writer.write_all(&hl)?;
        self.writer.write_all(&h)?;
        self.writer.write_all(&pl)?;
        self.writer.write_all(payload)?;
        if let Some(s) = self.session.as_mut() {
            let tag = mac(&s.key, &[&[s.me], &s.sent.to_le_bytes(), &h, payload]).finalize();
            s.sent += 1;
            self.writer.write_all(&tag.into_bytes())?;
        }
        self.writer.flush().context("sending to another rank")
    }

    /// The next frame (its MAC checked after the handshake).
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<(T, Vec<u8>)> {
        self.recv_at_most(MAX_FRAME)
    }

    fn recv_at_most<T: DeserializeOwned>(&mut self, limit: u64) -> Result<(T, Vec<u8>)> {
        let h = self.chunk(limit)?;
        let payload = self.chunk(limit)?;
        if let Some(s) = self.session.as_mut() {
            let mut tag = [0u8; 32];
            self.reader
                .read_exact(&mut tag)
                .context("the other rank closed the connection")?;
            mac(&s.key, &[&[1 - s.me], &s.received.to_le_bytes(), &h, &payload])
                .verify_slice(&tag)
                .map_err(|_| anyhow!("a frame whose MAC does not match: not from this run's ranks"))?;
            s.received += 1;
        }
        let header = serde_json::from_slice(&h).context("a message from another rank")?;
        Ok((header, payload))
    }

    /// A length-prefixed chunk of at most `limit` bytes, read as it arrives: a length
    /// prefix alone allocates nothing.
    fn chunk(&mut self, limit: u64) -> Result<Vec<u8>> {
        let mut len = [0u8; 8];
        self.reader
            .read_exact(&mut len)
            .context("the other rank closed the connection")?;
        let len = u64::from_le_bytes(len);
        if len > limit {
            bail!("a frame of {len} bytes (at most {limit} here): not haloscope's");
        }
        let mut buf = Vec::new();
        buf.try_reserve(len.min(1 << 16) as usize)?;
        (&mut self.reader).take(len).read_to_end(&mut buf)?;
        if buf.len() as u64 != len {
            bail!("the other rank closed the connection within a frame");
        }
        Ok(buf)
    }
}

/// Floats as little-endian bytes, and back: bit for bit.
pub fn floats_to_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn bytes_to_floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// `file:PATH`: rank 0 listens on a free port and writes `host:port token` to PATH (on a
/// file system every rank sees), the others read it there.
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
    let addrs: Vec<SocketAddr> = host_port
        .to_socket_addrs()
        .map_err(|e| UsageError(format!("{}: rendezvous {host_port}: {e}", world.rendezvous_var)))?
        .collect();
    if world.spans_hosts
        && let Some(a) = addrs.iter().find(|a| a.ip().is_loopback())
    {
        return Err(UsageError(format!(
            "{}: rendezvous {host_port} resolves to {}, a loopback address, but the ranks run on \
             several hosts and could never reach it: give rank 0's address as the others see it",
            world.rendezvous_var,
            a.ip()
        ))
        .into());
    }
    if addrs.is_empty() {
        return Err(UsageError(format!(
            "{}: rendezvous {host_port}: no address",
            world.rendezvous_var
        ))
        .into());
    }
    Ok(addrs)
}

/// Rank 0's listener and secret: a `file:` rendezvous listens on a free port of every
/// address and writes `host:port token` into a new file (mode 0600); `host:port` listens
/// on every address with a token, else only on `host`'s own address.
fn listen(world: &World, auth: &Auth) -> Result<(TcpListener, Option<Vec<u8>>)> {
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
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .and_then(|mut f| f.write_all(at.as_bytes()))
            .map_err(|e| {
                UsageError(format!(
                    "{}: rendezvous file {}: cannot create it anew: {e} (a file left by an earlier run? remove it)",
                    world.rendezvous_var,
                    path.display()
                ))
            })?;
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
        return Ok((TcpListener::bind(("0.0.0.0", port)).map_err(busy)?, token));
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

/// Where rank 0 listens and its secret: `host:port` (and the token from the environment),
/// or what its file says.
fn address(world: &World, auth: &Auth) -> Result<(Vec<SocketAddr>, Option<Vec<u8>>)> {
    let Some(path) = file_of(&world.rendezvous) else {
        return Ok((resolve(world, &world.rendezvous)?, auth.token.clone()));
    };
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
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

/// Rank 0's side of one handshake: the connecting rank, proven when there is a secret.
fn handshake_lead(s: TcpStream, world: &World, secret: Option<&[u8]>, t: Duration) -> Result<(usize, Link)> {
    s.set_read_timeout(Some(t))?;
    s.set_write_timeout(Some(t))?;
    let mut link = Link::new(s)?;
    let (hello, _): (Hello, _) = link.recv_at_most(MAX_HELLO)?;
    let nc = nonce_of(&hello.nonce).ok_or_else(|| anyhow!("a bad nonce"))?;
    if hello.protocol != PROTOCOL {
        bail!("protocol `{}`, not `{PROTOCOL}`", hello.protocol);
    }
    if hello.size != world.size || hello.rank == 0 || hello.rank >= world.size {
        bail!(
            "it says rank {} of {}, but this is a world of {}: were all ranks launched together?",
            hello.rank,
            hello.size,
            world.size
        );
    }
    let ns = nonce()?;
    let challenge = Challenge {
        nonce: hex(&ns),
        proof: secret.map(|k| {
            hex(&proof(k, "rank 0", &nc, &ns, hello.rank, hello.size)
                .finalize()
                .into_bytes())
        }),
    };
    link.send(&challenge, &[])?;
    let (p, _): (Proof, _) = link.recv_at_most(MAX_HELLO)?;
    if let Some(k) = secret {
        let theirs = p
            .proof
            .as_deref()
            .and_then(unhex)
            .ok_or_else(|| anyhow!("no proof of the token"))?;
        proof(k, "rank", &nc, &ns, hello.rank, hello.size)
            .verify_slice(&theirs)
            .map_err(|_| anyhow!("a wrong proof of the token"))?;
        link.start_session(k, &nc, &ns, 0);
    }
    Ok((hello.rank, link))
}

/// Rank 0: listens at the rendezvous address until every other rank has connected and
/// proven itself (within `timeout`), answers each with `id`; the links by rank (index
/// `rank - 1`). Strangers are logged and dropped; the run goes on.
pub fn lead(world: &World, id: &[u8], timeout: Duration) -> Result<Vec<Link>> {
    lead_with(world, id, timeout, &Auth::from_env()?)
}

/// [`lead`] with the secret and handshake timeout given.
pub fn lead_with(world: &World, id: &[u8], timeout: Duration, auth: &Auth) -> Result<Vec<Link>> {
    let (listener, secret) = listen(world, auth)?;
    let handshake = auth.handshake;
    let secret: Option<Arc<[u8]>> = secret.map(Into::into);
    listener.set_nonblocking(true)?;
    let start = Instant::now();
    let mut links: Vec<Option<Link>> = (1..world.size).map(|_| None).collect();
    let (tx, rx) = crossbeam_channel::unbounded();
    let busy = Arc::new(AtomicUsize::new(0));
    let dropped = |peer: SocketAddr, why: String| {
        eprintln!("rank 0: rendezvous: dropped a connection from {peer}: {why}")
    };
    while links.iter().any(Option::is_none) {
        match listener.accept() {
            Ok((s, peer)) => {
                if busy.load(Ordering::SeqCst) >= MAX_HANDSHAKES {
                    dropped(peer, format!("{MAX_HANDSHAKES} handshakes already under way"));
                    continue;
                }
                busy.fetch_add(1, Ordering::SeqCst);
                let (tx, busy, world, secret) = (tx.clone(), busy.clone(), world.clone(), secret.clone());
                std::thread::spawn(move || {
                    let r = s
                        .set_nonblocking(false)
                        .map_err(anyhow::Error::from)
                        .and_then(|()| handshake_lead(s, &world, secret.as_deref(), handshake));
                    busy.fetch_sub(1, Ordering::SeqCst);
                    let _ = tx.send((peer, r));
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if start.elapsed() > timeout {
                    let missing: Vec<String> = links
                        .iter()
                        .enumerate()
                        .filter(|(_, l)| l.is_none())
                        .map(|(i, _)| (i + 1).to_string())
                        .collect();
                    bail!(
                        "rank 0 waited {} s at {} and rank(s) {} never connected",
                        timeout.as_secs(),
                        world.rendezvous,
                        missing.join(", ")
                    );
                }
                if let Ok(r) = rx.recv_timeout(Duration::from_millis(20)) {
                    admit(r, &mut links, id, &dropped);
                }
            }
            Err(e) => return Err(e).context("accepting another rank"),
        }
        while let Ok(r) = rx.try_recv() {
            admit(r, &mut links, id, &dropped);
        }
    }
    Ok(links.into_iter().flatten().collect())
}

/// A finished handshake: the rank takes its place and gets `id`, unless it is there
/// already (refused, not swapped in) or the handshake failed (dropped).
fn admit(
    (peer, r): (SocketAddr, Result<(usize, Link)>),
    links: &mut [Option<Link>],
    id: &[u8],
    dropped: &dyn Fn(SocketAddr, String),
) {
    match r {
        Ok((rank, mut link)) if links[rank - 1].is_some() => {
            let why = format!("rank {rank} is here already");
            let _ = link.send(&Verdict::Refused(why.clone()), &[]);
            dropped(peer, why);
        }
        Ok((rank, mut link)) => match link.send(&Verdict::Welcome, id) {
            Ok(()) => {
                let _ = link.stream().set_read_timeout(None);
                let _ = link.stream().set_write_timeout(None);
                links[rank - 1] = Some(link);
            }
            Err(e) => dropped(peer, format!("{e:#}")),
        },
        Err(e) => dropped(peer, format!("{e:#}")),
    }
}

/// Any other rank: connects to rank 0 (retrying until `timeout`: rank 0 may start
/// later), proves who it is, makes rank 0 prove it holds the secret too, receives the
/// shared bytes.
pub fn join(world: &World, timeout: Duration) -> Result<(Link, Vec<u8>)> {
    join_with(world, timeout, &Auth::from_env()?)
}

/// [`join`] with the secret and handshake timeout given.
pub fn join_with(world: &World, timeout: Duration, auth: &Auth) -> Result<(Link, Vec<u8>)> {
    let start = Instant::now();
    loop {
        // A file is read again at each try: rank 0 may write it later.
        let tried = address(world, auth).and_then(|(addrs, secret)| {
            let mut last = None;
            for a in &addrs {
                match TcpStream::connect_timeout(a, Duration::from_secs(1)) {
                    Ok(s) => return Ok((s, secret)),
                    Err(e) => last = Some(anyhow::Error::from(e).context(format!("connecting to {a}"))),
                }
            }
            Err(last.unwrap_or_else(|| anyhow!("no address")))
        });
        let e = match tried {
            Ok((s, secret)) => {
                let t = auth.handshake.max(timeout.saturating_sub(start.elapsed()));
                match handshake_join(s, world, secret.as_deref(), t) {
                    Ok(done) => return Ok(done),
                    // Rank 0 closed the connection before its challenge (busy with other
                    // handshakes): try again.
                    Err(Retry(e)) => e,
                    Err(Fatal(e)) => return Err(e),
                }
            }
            Err(e) if e.downcast_ref::<UsageError>().is_some() => return Err(e),
            Err(e) => e,
        };
        if start.elapsed() > timeout {
            bail!(
                "rank {} could not reach rank 0 at {} within {} s: {e:#}",
                world.rank,
                world.rendezvous,
                timeout.as_secs()
            )
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How a rank's handshake failed: worth another try, or not.
enum Failed {
    Retry(anyhow::Error),
    Fatal(anyhow::Error),
}
use Failed::{Fatal, Retry};

/// A rank's side of the handshake on a fresh connection to rank 0.
fn handshake_join(
    s: TcpStream,
    world: &World,
    secret: Option<&[u8]>,
    t: Duration,
) -> Result<(Link, Vec<u8>), Failed> {
    let fatal = |e: anyhow::Error| Fatal(e);
    s.set_read_timeout(Some(t)).map_err(|e| fatal(e.into()))?;
    let mut link = Link::new(s).map_err(fatal)?;
    let nc = nonce().map_err(fatal)?;
    let hello = Hello {
        protocol: PROTOCOL.into(),
        rank: world.rank,
        size: world.size,
        nonce: hex(&nc),
    };
    link.send(&hello, &[]).map_err(Retry)?;
    let stranger = |why: &str| {
        Fatal(anyhow!(
            "rank {}: what answered at {} is not this run's rank 0 ({why})",
            world.rank,
            world.rendezvous
        ))
    };
    let (c, _): (Challenge, _) =
        link.recv_at_most(MAX_HELLO)
            .map_err(|e| match e.downcast_ref::<std::io::Error>() {
                Some(_) => Retry(e),
                None if format!("{e:#}").contains("closed the connection") => Retry(e),
                None => stranger(&format!("{e:#}")),
            })?;
    let ns = nonce_of(&c.nonce).ok_or_else(|| stranger("a bad nonce"))?;
    let mine = match (secret, &c.proof) {
        (Some(k), Some(theirs)) => {
            let theirs = unhex(theirs).ok_or_else(|| stranger("a bad proof"))?;
            proof(k, "rank 0", &nc, &ns, world.rank, world.size)
                .verify_slice(&theirs)
                .map_err(|_| stranger("a wrong proof of the token"))?;
            Some(hex(&proof(k, "rank", &nc, &ns, world.rank, world.size)
                .finalize()
                .into_bytes()))
        }
        (Some(_), None) => return Err(stranger("it gave no proof of the token")),
        (None, Some(_)) => {
            return Err(Fatal(anyhow!(
                "rank {}: rank 0 at {} holds a token and this rank none: set HALOSCOPE_RENDEZVOUS_TOKEN \
                 the same on every rank",
                world.rank,
                world.rendezvous
            )));
        }
        (None, None) => None,
    };
    link.send(&Proof { proof: mine }, &[]).map_err(Fatal)?;
    if let Some(k) = secret {
        link.start_session(k, &nc, &ns, 1);
    }
    let (verdict, id): (Verdict, _) = link.recv().map_err(Fatal)?;
    if let Verdict::Refused(why) = verdict {
        return Err(Fatal(anyhow!("rank 0 refused rank {}: {why}", world.rank)));
    }
    link.stream()
        .set_read_timeout(None)
        .map_err(|e| fatal(e.into()))?;
    Ok((link, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn world(rank: usize, size: usize, port: u16) -> World {
        World {
            rank,
            size,
            local_rank: rank,
            rendezvous: format!("127.0.0.1:{port}"),
            launcher: "env",
            rendezvous_var: "MASTER_ADDR",
            spans_hosts: false,
            size_var: "WORLD_SIZE",
        }
    }

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[test]
    fn ranks_meet_get_the_id_and_exchange_frames_bit_for_bit() {
        let port = free_port();
        let followers: Vec<_> = (1..3)
            .map(|r| {
                std::thread::spawn(move || {
                    let (mut link, id) = join(&world(r, 3, port), Duration::from_secs(20)).unwrap();
                    let (n, payload): (usize, _) = link.recv().unwrap();
                    let v = bytes_to_floats(&payload);
                    link.send(&(n + r), &floats_to_bytes(&v)).unwrap();
                    id
                })
            })
            .collect();
        let mut links = lead(&world(0, 3, port), b"the id", Duration::from_secs(20)).unwrap();
        let odd = [f32::MIN_POSITIVE / 3.0, -0.0, f32::NAN, 1.0e-38, 0.1];
        for (i, l) in links.iter_mut().enumerate() {
            l.send(&(10 * i), &floats_to_bytes(&odd)).unwrap();
        }
        for (i, l) in links.iter_mut().enumerate() {
            let (n, back): (usize, _) = l.recv().unwrap();
            assert_eq!(n, 10 * i + i + 1, "links are ordered by rank");
            let back = bytes_to_floats(&back);
            assert!(back.iter().zip(&odd).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
        for f in followers {
            assert_eq!(f.join().unwrap(), b"the id");
        }
    }

    #[test]
    fn ranks_meet_through_a_file_rank_0_writes() {
        let dir = tempfile::tempdir().unwrap();
        let at = format!("file:{}", dir.path().join("rank0").display());
        let mut w = world(1, 2, 0);
        w.rendezvous = at.clone();
        let follower = std::thread::spawn(move || join(&w, Duration::from_secs(20)).unwrap().1);
        std::thread::sleep(Duration::from_millis(300));
        let mut w0 = world(0, 2, 0);
        w0.rendezvous = at;
        let links = lead(&w0, b"via a file", Duration::from_secs(20)).unwrap();
        assert_eq!(links.len(), 1);
        assert_eq!(follower.join().unwrap(), b"via a file");
        let written = std::fs::read_to_string(dir.path().join("rank0")).unwrap();
        let (at, token) = written.trim().split_once(' ').unwrap();
        assert!(
            at.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()),
            "{written}"
        );
        assert_eq!(token.len(), 64, "a random token of 32 bytes: {written}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("rank0"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "only its owner reads the token");
    }

    #[test]
    fn a_rank_that_never_comes_is_named() {
        let port = free_port();
        let e = lead(&world(0, 3, port), b"", Duration::from_millis(300))
            .err()
            .unwrap();
        assert!(e.to_string().contains("rank(s) 1, 2 never connected"), "{e}");
    }

    #[test]
    fn a_follower_without_rank_0_gives_up_saying_where_it_looked() {
        let port = free_port();
        let e = join(&world(1, 2, port), Duration::from_millis(300))
            .err()
            .unwrap();
        assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
    }

    fn auth(token: Option<&str>) -> Auth {
        Auth {
            token: token.map(|t| t.as_bytes().to_vec()),
            handshake: Duration::from_millis(500),
        }
    }

    const TOKEN: &str = "a secret of the run, 32 chars ok";

    /// Rank 0 of a world of 2 with `auth`, while `knock` runs against its port; then the
    /// real rank 1 joins: the run completes, rank 1 gets the id.
    fn survives(token: Option<&'static str>, knock: impl FnOnce(u16) + Send + 'static) {
        let port = free_port();
        let leader = std::thread::spawn(move || {
            lead_with(
                &world(0, 2, port),
                b"the id",
                Duration::from_secs(20),
                &auth(token),
            )
            .map(|l| l.len())
        });
        std::thread::sleep(Duration::from_millis(200));
        knock(port);
        let (_, id) = join_with(&world(1, 2, port), Duration::from_secs(20), &auth(token)).unwrap();
        assert_eq!(id, b"the id");
        assert_eq!(leader.join().unwrap().unwrap(), 1);
    }

    fn connect(port: u16) -> TcpStream {
        TcpStream::connect(("127.0.0.1", port)).unwrap()
    }

    /// Sends a frame of the given header bytes, as a client would.
    fn frame(s: &mut TcpStream, header: &[u8]) {
        let _ = s.write_all(&(header.len() as u64).to_le_bytes());
        let _ = s.write_all(header);
        let _ = s.write_all(&0u64.to_le_bytes());
    }

    #[test]
    fn strangers_knocking_neither_join_nor_break_the_run() {
        for token in [None, Some(TOKEN)] {
            // The old hello, which used to be handed the id.
            survives(token, |port| {
                let mut s = connect(port);
                frame(&mut s, br#"{"rank":1,"size":2}"#);
                let mut got = Vec::new();
                let _ = s.read_to_end(&mut got);
                assert!(!String::from_utf8_lossy(&got).contains("the id"));
            });
            // A length prefix of 2^36 (it used to be allocated: an abort).
            survives(token, |port| {
                let mut s = connect(port);
                let _ = s.write_all(&(1u64 << 36).to_le_bytes());
            });
            // Garbage, an HTTP request, an early close, rank 99.
            survives(token, |port| {
                let _ = connect(port).write_all(b"\x00\x01garbage garbage garbage");
                let _ = connect(port).write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
                drop(connect(port));
                let mut s = connect(port);
                let hello = format!(
                    r#"{{"protocol":"{PROTOCOL}","rank":99,"size":2,"nonce":"{}"}}"#,
                    "ab".repeat(32)
                );
                frame(&mut s, hello.as_bytes());
            });
            // Idle connections, more than handshakes may run at once: the real rank still
            // gets in (they time out; the handshakes run concurrently).
            survives(token, |port| {
                let idle: Vec<TcpStream> = (0..MAX_HANDSHAKES + 4).map(|_| connect(port)).collect();
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_secs(3));
                    drop(idle);
                });
            });
        }
    }

    #[test]
    fn without_the_token_a_rank_cannot_join_and_a_rank_0_cannot_pose() {
        // A rank with no token or a wrong one is dropped; the real one completes the run.
        survives(Some(TOKEN), |port| {
            let e = join_with(&world(1, 2, port), Duration::from_secs(5), &auth(None)).unwrap_err();
            assert!(e.to_string().contains("holds a token and this rank none"), "{e}");
            let e = join_with(
                &world(1, 2, port),
                Duration::from_secs(5),
                &auth(Some("another secret, 32 characters..")),
            )
            .unwrap_err();
            assert!(e.to_string().contains("a wrong proof of the token"), "{e}");
        });
        // A rank 0 without the token: the rank refuses it, whatever it answers.
        let port = free_port();
        std::thread::spawn(move || {
            lead_with(&world(0, 2, port), b"fake", Duration::from_secs(5), &auth(None))
        });
        std::thread::sleep(Duration::from_millis(200));
        let e = join_with(&world(1, 2, port), Duration::from_secs(5), &auth(Some(TOKEN))).unwrap_err();
        assert!(e.to_string().contains("gave no proof of the token"), "{e}");
    }

    #[test]
    fn a_second_rank_1_is_refused_not_swapped_in() {
        let port = free_port();
        let leader = std::thread::spawn(move || {
            let mut links = lead_with(
                &world(0, 3, port),
                b"id",
                Duration::from_secs(20),
                &auth(Some(TOKEN)),
            )
            .unwrap();
            links[0].send(&"to the first rank 1", &[]).unwrap();
        });
        std::thread::sleep(Duration::from_millis(200));
        let (mut first, _) =
            join_with(&world(1, 3, port), Duration::from_secs(20), &auth(Some(TOKEN))).unwrap();
        let e = join_with(&world(1, 3, port), Duration::from_secs(20), &auth(Some(TOKEN))).unwrap_err();
        assert!(e.to_string().contains("rank 1 is here already"), "{e}");
        let (_third, _) = join_with(&world(2, 3, port), Duration::from_secs(20), &auth(Some(TOKEN))).unwrap();
        leader.join().unwrap();
        let (m, _): (String, _) = first.recv().unwrap();
        assert_eq!(m, "to the first rank 1");
    }

    #[test]
    fn a_frame_changed_on_the_way_is_refused() {
        let port = free_port();
        let leader = std::thread::spawn(move || {
            lead_with(
                &world(0, 2, port),
                b"id",
                Duration::from_secs(20),
                &auth(Some(TOKEN)),
            )
            .unwrap()
        });
        let (mut rank1, _) =
            join_with(&world(1, 2, port), Duration::from_secs(20), &auth(Some(TOKEN))).unwrap();
        let mut links = leader.join().unwrap();
        // One flipped bit of the payload, written past the Link's MAC.
        rank1.send(&1u32, &[1, 2, 3]).unwrap();
        let (_, p): (u32, _) = links[0].recv().unwrap();
        assert_eq!(p, vec![1, 2, 3]);
        let mut raw = rank1.writer.get_ref().try_clone().unwrap();
        let h = b"1";
        raw.write_all(&(h.len() as u64).to_le_bytes()).unwrap();
        raw.write_all(h).unwrap();
        raw.write_all(&3u64.to_le_bytes()).unwrap();
        raw.write_all(&[1, 2, 4]).unwrap();
        raw.write_all(&[0u8; 32]).unwrap();
        let e = links[0].recv::<u32>().unwrap_err();
        assert!(e.to_string().contains("MAC does not match"), "{e}");
    }

    #[test]
    fn a_loopback_rendezvous_across_hosts_is_refused_naming_the_variable() {
        let mut w = world(1, 2, 29500);
        w.rendezvous = "localhost:29500".into();
        w.spans_hosts = true;
        let e = join_with(&w, Duration::from_secs(5), &auth(None)).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("MASTER_ADDR: rendezvous localhost:29500 resolves to"),
            "{e}"
        );
        assert!(e.to_string().contains("loopback"), "{e}");
    }
}
