//! Rank 0's side: one thread polls the listener and every connection in a handshake,
//! none blocking, until every other rank has proven itself and taken the shared bytes.

use anyhow::{Context, Result, anyhow, bail};
use hmac::Mac;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::place::{Auth, listen};
use super::wire::{
    Challenge, HANDSHAKE, Hello, Link, PROTOCOL, Proof, Verdict, encode, hex, nonce, nonce_of, parse, proof,
    quote, unhex, within,
};
use crate::world::World;

/// Connections rank 0 holds in handshakes at once: a newcomer beyond evicts the held one
/// that has shown least (nothing sent, then a partial hello, then a hello), oldest first.
pub const MAX_HANDSHAKES: usize = 256;
/// Connections from one address rank 0 holds in handshakes at once (evicted likewise).
pub const MAX_PER_ADDRESS: usize = 32;
/// Connections rank 0 takes from the kernel's queue between two looks at those it holds.
const ACCEPTS_PER_TICK: usize = 64;
/// A connection that has sent nothing for this long after rank 0 took it is dropped.
pub const FIRST_BYTE: Duration = Duration::from_secs(1);

/// A connection rank 0 holds in a handshake: non-blocking, served by one poll loop, so
/// that no stranger holds a thread or a slot a rank needs.
pub(super) struct Pending {
    pub(super) stream: TcpStream,
    pub(super) peer: SocketAddr,
    pub(super) since: Instant,
    /// The frame being read: what has arrived of it.
    pub(super) buf: Vec<u8>,
    /// Whether any byte has come.
    pub(super) heard: bool,
    /// After the hello: the rank it says it is and both nonces.
    pub(super) hello: Option<(usize, Vec<u8>, [u8; 32])>,
}

impl Pending {
    /// How much it has shown, for eviction: nothing, part of a hello, a whole hello.
    fn shown(&self) -> u8 {
        match (&self.hello, self.heard) {
            (Some(_), _) => 2,
            (None, true) => 1,
            (None, false) => 0,
        }
    }

    /// Reads what has come of the next handshake frame (never past it): its header once
    /// whole. Refused as soon as its lengths are over [`HANDSHAKE`]'s.
    fn frame(&mut self) -> Result<Option<Vec<u8>>> {
        let mut chunk = [0u8; 1024];
        loop {
            let want = if self.buf.len() < 16 {
                16
            } else {
                let (hl, pl) = within(self.buf[..16].try_into().expect("16 bytes"), HANDSHAKE)?;
                (16 + hl + pl) as usize
            };
            if self.buf.len() == want && want > 16 {
                return Ok(Some(self.buf.split_off(16)));
            }
            let n = (want - self.buf.len()).min(chunk.len());
            match self.stream.read(&mut chunk[..n]) {
                Ok(0) => bail!("it closed the connection"),
                Ok(n) => {
                    self.heard = true;
                    self.buf.extend_from_slice(&chunk[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Takes what has come: `Some` once the connecting rank has proven itself (when
    /// there is a secret): its rank and the link, its session started.
    pub(super) fn step(&mut self, world: &World, secret: Option<&[u8]>) -> Result<Option<(usize, Link)>> {
        loop {
            let Some(h) = self.frame()? else {
                return Ok(None);
            };
            self.buf.clear();
            match self.hello.take() {
                None => {
                    let hello: Hello = parse(&h)?;
                    let (rank, nc, ns) = self.challenge(&hello, world, secret)?;
                    self.hello = Some((rank, nc, ns));
                }
                Some((rank, nc, ns)) => {
                    let p: Proof = parse(&h)?;
                    if let Some(k) = secret {
                        let theirs = p
                            .proof
                            .as_deref()
                            .and_then(unhex)
                            .ok_or_else(|| anyhow!("no proof of the token"))?;
                        proof(k, "rank", &nc, &ns, rank, world.size)
                            .verify_slice(&theirs)
                            .map_err(|_| anyhow!("a wrong proof of the token"))?;
                    }
                    self.stream.set_nonblocking(false)?;
                    let mut link = Link::new(self.stream.try_clone()?)?;
                    if let Some(k) = secret {
                        link.start_session(k, &nc, &ns, 0);
                    }
                    return Ok(Some((rank, link)));
                }
            }
        }
    }

    /// Answers a hello with rank 0's nonce (and proof): the rank, both nonces.
    fn challenge(
        &mut self,
        hello: &Hello,
        world: &World,
        secret: Option<&[u8]>,
    ) -> Result<(usize, Vec<u8>, [u8; 32])> {
        if hello.protocol != PROTOCOL {
            bail!("protocol `{}`, not `{PROTOCOL}`", quote(&hello.protocol));
        }
        let nc = nonce_of(&hello.nonce).ok_or_else(|| anyhow!("a bad nonce"))?;
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
        // A few hundred bytes into a fresh connection's empty buffer: written whole or
        // the connection is not a rank's.
        let bytes = encode(&challenge, &[], None)?;
        match self.stream.write(&bytes) {
            Ok(n) if n == bytes.len() => Ok((hello.rank, nc, ns)),
            Ok(_) => bail!("it does not take the challenge"),
            Err(e) => Err(anyhow::Error::from(e).context("sending the challenge")),
        }
    }
}

/// Rank 0's log of the connections it drops: the first few, then only a count.
struct Drops {
    count: usize,
}

impl Drops {
    const SHOWN: usize = 10;

    fn drop(&mut self, peer: SocketAddr, why: &str) {
        self.count += 1;
        if self.count <= Self::SHOWN {
            eprintln!("rank 0: rendezvous: dropped a connection from {peer}: {why}");
        } else if self.count == Self::SHOWN + 1 {
            eprintln!("rank 0: rendezvous: dropping more connections (counted, not shown)");
        }
    }
}

impl std::ops::Drop for Drops {
    fn drop(&mut self) {
        if self.count > Self::SHOWN {
            eprintln!("rank 0: rendezvous: dropped {} connections in all", self.count);
        }
    }
}

/// Rank 0: listens at the rendezvous address until every other rank has connected and
/// proven itself (within `timeout`), answers each with `id`; the links by rank (index
/// `rank - 1`). Strangers are logged and dropped; the run goes on.
pub fn lead(world: &World, id: &[u8], timeout: Duration) -> Result<Vec<Link>> {
    lead_with(world, id, timeout, &Auth::from_env()?)
}

/// [`lead`] with the secret and handshake timeout given.
///
/// One thread polls the listener and every connection in a handshake, none blocking: a
/// connection that sends nothing within [`FIRST_BYTE`] or does not finish within the
/// handshake timeout is dropped, and when [`MAX_HANDSHAKES`] connections (or
/// [`MAX_PER_ADDRESS`] from one address) are held, a newcomer evicts the one that has
/// shown least, oldest first: a rank sends its hello as it connects, so idle or slow
/// strangers never hold the slot it needs.
pub fn lead_with(world: &World, id: &[u8], timeout: Duration, auth: &Auth) -> Result<Vec<Link>> {
    let (listener, secret) = listen(world, auth)?;
    listener.set_nonblocking(true)?;
    let start = Instant::now();
    let mut lobby = Lobby {
        world,
        id,
        auth,
        secret,
        links: (1..world.size).map(|_| None).collect(),
        pending: Vec::new(),
        drops: Drops { count: 0 },
    };
    while lobby.links.iter().any(Option::is_none) {
        if start.elapsed() > timeout {
            let missing: Vec<String> = lobby
                .links
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
        let ready = lobby.poll(&listener)?;
        lobby.serve_held(&ready[1..]);
        if ready[0] {
            lobby.take_newcomers(&listener);
        }
    }
    Ok(lobby.links.into_iter().flatten().collect())
}

/// Rank 0's state while the ranks come: the links so far (index `rank - 1`), the
/// connections in a handshake, the log of those dropped.
struct Lobby<'a> {
    world: &'a World,
    id: &'a [u8],
    auth: &'a Auth,
    secret: Option<Vec<u8>>,
    links: Vec<Option<Link>>,
    pending: Vec<Pending>,
    drops: Drops,
}

impl Lobby<'_> {
    /// Waits (at most a tick) for the listener and the connections held: which are ready,
    /// the listener first.
    fn poll(&self, listener: &TcpListener) -> Result<Vec<bool>> {
        use rustix::event::{PollFd, PollFlags};
        let tick = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 20_000_000,
        };
        let mut fds: Vec<PollFd> = std::iter::once(PollFd::new(listener, PollFlags::IN))
            .chain(self.pending.iter().map(|p| PollFd::new(&p.stream, PollFlags::IN)))
            .collect();
        match rustix::event::poll(&mut fds, Some(&tick)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(std::io::Error::from(e)).context("waiting for the other ranks"),
        }
        Ok(fds.iter().map(|f| !f.revents().is_empty()).collect())
    }

    /// What has come on the connections held, then their deadlines.
    fn serve_held(&mut self, ready: &[bool]) {
        let held = std::mem::take(&mut self.pending);
        for (mut p, ready) in held.into_iter().zip(ready.iter().copied()) {
            let r = if ready {
                p.step(self.world, self.secret.as_deref())
            } else if !p.heard && p.since.elapsed() > FIRST_BYTE {
                Err(anyhow!("nothing sent within {} s", FIRST_BYTE.as_secs_f32()))
            } else if p.since.elapsed() > self.auth.handshake {
                Err(anyhow!(
                    "no handshake within {} s",
                    self.auth.handshake.as_secs_f32()
                ))
            } else {
                Ok(None)
            };
            self.settle(p, r);
        }
    }

    /// A connection after a look at it: held on, admitted or dropped.
    fn settle(&mut self, p: Pending, r: Result<Option<(usize, Link)>>) {
        match r {
            Ok(None) => self.pending.push(p),
            Ok(Some(done)) => admit(
                p.peer,
                done,
                &mut self.links,
                self.id,
                self.auth.handshake,
                &mut self.drops,
            ),
            Err(e) => self.drops.drop(p.peer, &format!("{e:#}")),
        }
    }

    /// Newcomers: a bounded number each tick (strangers that connect again as soon as
    /// they are dropped would keep an unbounded loop here forever, the ranks held
    /// unanswered); the kernel's queue holds the rest until the next tick.
    fn take_newcomers(&mut self, listener: &TcpListener) {
        for _ in 0..ACCEPTS_PER_TICK {
            let (stream, peer) = match listener.accept() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                // A connection reset before it was taken, or out of descriptors: the
                // next tick tries again.
                Err(_) => break,
            };
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            self.make_room_for(peer);
            let mut p = Pending {
                stream,
                peer,
                since: Instant::now(),
                buf: Vec::new(),
                heard: false,
                hello: None,
            };
            // A rank's hello is most often there already.
            let r = p.step(self.world, self.secret.as_deref());
            self.settle(p, r);
        }
    }

    /// When [`MAX_HANDSHAKES`] are held, or [`MAX_PER_ADDRESS`] from `peer`'s address,
    /// evicts the one that has shown least, oldest first.
    fn make_room_for(&mut self, peer: SocketAddr) {
        let from = self.pending.iter().filter(|p| p.peer.ip() == peer.ip()).count();
        let full = self.pending.len() >= MAX_HANDSHAKES;
        if from < MAX_PER_ADDRESS && !full {
            return;
        }
        let victim = self
            .pending
            .iter()
            .enumerate()
            .filter(|(_, p)| full || p.peer.ip() == peer.ip())
            .min_by_key(|(_, p)| (p.shown(), p.since))
            .map(|(i, _)| i)
            .expect("a full table holds one");
        let v = self.pending.remove(victim);
        let why = if full {
            format!("evicted: {MAX_HANDSHAKES} handshakes held")
        } else {
            format!("evicted: {MAX_PER_ADDRESS} handshakes held from {}", peer.ip())
        };
        self.drops.drop(v.peer, &why);
    }
}

/// A finished handshake: the rank takes its place and gets `id`, unless it is there
/// already (refused, not swapped in).
fn admit(
    peer: SocketAddr,
    (rank, mut link): (usize, Link),
    links: &mut [Option<Link>],
    id: &[u8],
    t: Duration,
    drops: &mut Drops,
) {
    if links[rank - 1].is_some() {
        let why = format!("rank {rank} is here already");
        let _ = link.stream().set_write_timeout(Some(t));
        let _ = link.send(&Verdict::Refused(why.clone()), &[]);
        drops.drop(peer, &why);
        return;
    }
    let sent = link
        .stream()
        .set_write_timeout(Some(t))
        .map_err(anyhow::Error::from)
        .and_then(|()| link.send(&Verdict::Welcome, id))
        .and_then(|()| Ok(link.stream().set_write_timeout(None)?));
    match sent {
        Ok(()) => links[rank - 1] = Some(link),
        Err(e) => drops.drop(peer, &format!("{e:#}")),
    }
}
