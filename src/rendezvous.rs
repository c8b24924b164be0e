//! Rank 0 and the other ranks meeting over TCP: rank 0 listens at the world's rendezvous
//! address, each other rank connects and says who it is, rank 0 answers with the bytes
//! every rank needs (NCCL's unique id). The connection then carries framed messages: a
//! JSON header and a binary payload (fields travel as raw little-endian floats, bit for
//! bit).

use anyhow::{Context, Result, anyhow, bail};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::error::UsageError;
use crate::world::World;

/// One framed, ordered, two-way connection.
pub struct Link {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
}

/// A frame larger than this is refused (a stray connection, not a peer).
const MAX_FRAME: u64 = 1 << 36;

#[derive(serde::Serialize, serde::Deserialize)]
struct Hello {
    rank: usize,
    size: usize,
}

impl Link {
    fn new(s: TcpStream) -> Result<Link> {
        s.set_nodelay(true)?;
        Ok(Link {
            reader: BufReader::new(s.try_clone()?),
            writer: BufWriter::new(s),
        })
    }

    /// Sends `header` and `payload`.
    pub fn send<T: Serialize>(&mut self, header: &T, payload: &[u8]) -> Result<()> {
        let h = serde_json::to_vec(header)?;
        self.writer.write_all(&(h.len() as u64).to_le_bytes())?;
        self.writer.write_all(&h)?;
        self.writer.write_all(&(payload.len() as u64).to_le_bytes())?;
        self.writer.write_all(payload)?;
        self.writer.flush().context("sending to another rank")
    }

    /// The next frame.
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<(T, Vec<u8>)> {
        let h = self.chunk()?;
        let header = serde_json::from_slice(&h).context("a message from another rank")?;
        Ok((header, self.chunk()?))
    }

    fn chunk(&mut self) -> Result<Vec<u8>> {
        let mut len = [0u8; 8];
        self.reader
            .read_exact(&mut len)
            .context("the other rank closed the connection")?;
        let len = u64::from_le_bytes(len);
        if len > MAX_FRAME {
            bail!("a frame of {len} bytes from another rank: not haloscope's");
        }
        let mut buf = vec![0; len as usize];
        self.reader.read_exact(&mut buf)?;
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

/// `file:PATH`: rank 0 listens on a free port and writes `host:port` to PATH (on a file
/// system every rank sees), the others read it there.
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

/// Rank 0's listener: on the port of `host:port`, or on a free port written to the file of
/// `file:PATH` (written whole, then renamed into place).
fn listen(rendezvous: &str) -> Result<TcpListener> {
    if let Some(path) = file_of(rendezvous) {
        let listener = TcpListener::bind(("0.0.0.0", 0))?;
        let at = format!("{}:{}\n", host_name(), listener.local_addr()?.port());
        let part = path.with_extension("part");
        std::fs::write(&part, at)
            .and_then(|()| std::fs::rename(&part, path))
            .map_err(|e| UsageError(format!("rendezvous file {}: cannot write: {e}", path.display())))?;
        return Ok(listener);
    }
    let port = rendezvous
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .ok_or_else(|| UsageError(format!("rendezvous {rendezvous}: not host:port nor file:PATH")))?;
    Ok(TcpListener::bind(("0.0.0.0", port)).map_err(|e| {
        UsageError(format!(
            "rank 0 cannot listen on port {port} (rendezvous {rendezvous}): {e}; pick a free \
             MASTER_PORT (or HALOSCOPE_RENDEZVOUS)"
        ))
    })?)
}

/// Where rank 0 listens: `host:port`, or what its file says.
fn address(rendezvous: &str) -> Result<std::net::SocketAddr> {
    let at = match file_of(rendezvous) {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("reading {}", path.display()))?
            .trim()
            .to_string(),
        None => rendezvous.to_string(),
    };
    at.to_socket_addrs()
        .with_context(|| format!("rendezvous {at}"))?
        .next()
        .ok_or_else(|| anyhow!("rendezvous {at}: no address"))
}

/// Rank 0: listens at the rendezvous address until every other rank has connected
/// (within `timeout`), answers each with `id`; the links by rank (index `rank - 1`).
pub fn lead(world: &World, id: &[u8], timeout: Duration) -> Result<Vec<Link>> {
    let listener = listen(&world.rendezvous)?;
    listener.set_nonblocking(true)?;
    let start = Instant::now();
    let mut links: Vec<Option<Link>> = (1..world.size).map(|_| None).collect();
    while links.iter().any(Option::is_none) {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                s.set_read_timeout(Some(timeout))?;
                let mut link = Link::new(s)?;
                let (hello, _): (Hello, _) = link.recv()?;
                if hello.size != world.size || hello.rank == 0 || hello.rank >= world.size {
                    bail!(
                        "rank {} of {} connected, but this is a world of {}: were all ranks \
                         launched together?",
                        hello.rank,
                        hello.size,
                        world.size
                    );
                }
                link.send(&(), id)?;
                link.reader.get_ref().set_read_timeout(None)?;
                links[hello.rank - 1] = Some(link);
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
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e).context("accepting another rank"),
        }
    }
    Ok(links.into_iter().flatten().collect())
}

/// Any other rank: connects to rank 0 (retrying until `timeout`: rank 0 may start
/// later), says who it is, receives the shared bytes.
pub fn join(world: &World, timeout: Duration) -> Result<(Link, Vec<u8>)> {
    let start = Instant::now();
    let s = loop {
        // A file is read again at each try: rank 0 may write it later.
        let tried = address(&world.rendezvous).and_then(|addr| {
            TcpStream::connect_timeout(&addr, Duration::from_secs(1))
                .with_context(|| format!("connecting to {addr}"))
        });
        match tried {
            Ok(s) => break s,
            Err(e) if start.elapsed() > timeout => {
                bail!(
                    "rank {} could not reach rank 0 at {} within {} s: {e:#}",
                    world.rank,
                    world.rendezvous,
                    timeout.as_secs()
                )
            }
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let mut link = Link::new(s)?;
    link.send(
        &Hello {
            rank: world.rank,
            size: world.size,
        },
        &[],
    )?;
    let ((), id) = link.recv()?;
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
        assert!(
            written
                .trim()
                .rsplit_once(':')
                .is_some_and(|(_, p)| p.parse::<u16>().is_ok()),
            "{written}"
        );
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
}
