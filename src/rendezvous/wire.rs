//! The wire: framed messages (a JSON header and a binary payload), their limits, and the
//! handshake's messages, nonces and MACs (HMAC-SHA256 under the secret, then under a
//! session key with a sequence number per frame).

use anyhow::{Context, Result, anyhow, bail};
use hmac::{Hmac, Mac};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::io::{BufReader, BufWriter, Read, Write};
use std::net::TcpStream;

pub(super) type HmacSha256 = Hmac<Sha256>;

/// One framed, ordered, two-way connection.
pub struct Link {
    reader: BufReader<TcpStream>,
    pub(super) writer: BufWriter<TcpStream>,
    /// After an authenticated handshake: the session's key and frame counters.
    pub(super) session: Option<Session>,
}

pub(super) struct Session {
    key: [u8; 32],
    /// This side's role in the MACs (0: rank 0, 1: another rank).
    me: u8,
    sent: u64,
    received: u64,
}

/// A frame after the handshake larger than this is refused (with a secret, only once
/// the MAC of its lengths is verified).
pub(super) const MAX_FRAME: u64 = 1 << 36;
/// A handshake frame (hello, challenge, proof) with a header larger than this is refused:
/// a hello is a few dozen bytes, and handshake frames carry no payload.
pub const MAX_HELLO: u64 = 4096;
/// Rank 0's verdict carries at most this much (NCCL's unique id is 128 bytes).
pub const MAX_VERDICT: u64 = 1 << 16;
/// At most this many bytes of what a peer sent go into an error or a log line.
pub const ECHO: usize = 200;
pub(super) const PROTOCOL: &str = "haloscope rendezvous v2";

/// How large each part of a frame may be.
#[derive(Clone, Copy)]
pub(super) struct Limits {
    header: u64,
    payload: u64,
}

/// Hello, challenge and proof.
pub(super) const HANDSHAKE: Limits = Limits {
    header: MAX_HELLO,
    payload: 0,
};
/// Rank 0's verdict.
pub(super) const VERDICT: Limits = Limits {
    header: MAX_HELLO,
    payload: MAX_VERDICT,
};
/// A frame after the handshake.
pub(super) const ANY: Limits = Limits {
    header: MAX_FRAME,
    payload: MAX_FRAME,
};

/// What a peer sent, for an error or a log line: control characters escaped, at most
/// [`ECHO`] bytes of it, and how long it was when cut.
pub fn quote(text: &str) -> String {
    let mut out = String::new();
    for (i, c) in text.char_indices() {
        let e: String = if c == '"' || c == '\'' {
            c.to_string()
        } else {
            c.escape_debug().collect()
        };
        if out.len() + e.len() > ECHO {
            return format!("{out}… ({} bytes in all, {} shown)", text.len(), i);
        }
        out.push_str(&e);
    }
    out
}

#[derive(Serialize, Deserialize)]
pub(super) struct Hello {
    pub(super) protocol: String,
    pub(super) rank: usize,
    pub(super) size: usize,
    /// Hex: the connecting rank's fresh nonce.
    pub(super) nonce: String,
}

#[derive(Serialize, Deserialize)]
pub(super) struct Challenge {
    pub(super) nonce: String,
    /// Rank 0's proof that it holds the secret (`None`: no secret).
    pub(super) proof: Option<String>,
}

#[derive(Serialize, Deserialize)]
pub(super) struct Proof {
    pub(super) proof: Option<String>,
}

/// Rank 0's last word of a handshake: welcome (the payload is the shared bytes) or why not.
#[derive(Serialize, Deserialize)]
pub(super) enum Verdict {
    Welcome,
    Refused(String),
}

pub(super) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(super) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

pub(super) fn nonce() -> Result<[u8; 32]> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| anyhow!("no randomness for the rendezvous: {e}"))?;
    Ok(b)
}

pub(super) fn mac(key: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    for p in parts {
        m.update(&(p.len() as u64).to_le_bytes());
        m.update(p);
    }
    m
}

/// What a side proves: `role` ("rank 0" or "rank"), both nonces and who connects.
pub(super) fn proof(secret: &[u8], role: &str, nc: &[u8], ns: &[u8], rank: usize, size: usize) -> HmacSha256 {
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
pub(super) fn nonce_of(text: &str) -> Option<Vec<u8>> {
    unhex(text).filter(|n| n.len() == 32)
}

pub(super) fn session_key(secret: &[u8], nc: &[u8], ns: &[u8]) -> [u8; 32] {
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
    pub(super) fn new(s: TcpStream) -> Result<Link> {
        s.set_nodelay(true)?;
        Ok(Link {
            reader: BufReader::new(s.try_clone()?),
            writer: BufWriter::new(s),
            session: None,
        })
    }

    /// From here on every frame carries a MAC under the session key of `secret` and both
    /// nonces; `me` is this side's role (0: rank 0, 1: another rank).
    pub(super) fn start_session(&mut self, secret: &[u8], nc: &[u8], ns: &[u8], me: u8) {
        self.session = Some(Session {
            key: session_key(secret, nc, ns),
            me,
            sent: 0,
            received: 0,
        });
    }

    pub(super) fn stream(&self) -> &TcpStream {
        self.reader.get_ref()
    }

    /// Sends `header` and `payload` (with the session's MACs after the handshake).
    pub fn send<T: Serialize>(&mut self, header: &T, payload: &[u8]) -> Result<()> {
        let bytes = encode(header, payload, self.session.as_mut())?;
        self.writer.write_all(&bytes)?;
        self.writer.flush().context("sending to another rank")
    }

    /// The next frame (its MACs checked after the handshake).
    pub fn recv<T: DeserializeOwned>(&mut self) -> Result<(T, Vec<u8>)> {
        self.recv_at_most(ANY)
    }

    /// The next frame, refused before anything is read past its lengths when they are
    /// larger than `limits` or (after the handshake) their MAC does not match.
    pub(super) fn recv_at_most<T: DeserializeOwned>(&mut self, limits: Limits) -> Result<(T, Vec<u8>)> {
        let mut lengths = [0u8; 16];
        self.read_exact(&mut lengths)?;
        if self.session.is_some() {
            let mut tag = [0u8; 32];
            self.read_exact(&mut tag)?;
            let s = self.session.as_ref().expect("a session");
            lengths_mac(s, 1 - s.me, s.received, &lengths)
                .verify_slice(&tag)
                .map_err(|_| anyhow!("a frame whose MAC does not match: not from this run's ranks"))?;
        }
        let (hl, pl) = within(&lengths, limits)?;
        let h = self.body(hl)?;
        let payload = self.body(pl)?;
        if let Some(s) = self.session.as_mut() {
            let mut tag = [0u8; 32];
            self.reader
                .read_exact(&mut tag)
                .context("the other rank closed the connection")?;
            frame_mac(s, 1 - s.me, s.received, &h, &payload)
                .verify_slice(&tag)
                .map_err(|_| anyhow!("a frame whose MAC does not match: not from this run's ranks"))?;
            s.received += 1;
        }
        Ok((parse(&h)?, payload))
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<()> {
        self.reader
            .read_exact(buf)
            .context("the other rank closed the connection")
    }

    /// `len` bytes (already within their limit), read as they arrive.
    fn body(&mut self, len: u64) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        buf.try_reserve(len.min(1 << 16) as usize)?;
        (&mut self.reader).take(len).read_to_end(&mut buf)?;
        if buf.len() as u64 != len {
            bail!("the other rank closed the connection within a frame");
        }
        Ok(buf)
    }
}

/// A frame on the wire: the header's and the payload's lengths (and, in a session, their
/// MAC, so that no length is believed before it is verified), the header (JSON), the
/// payload (and, in a session, the MAC of both under the frame's sequence number).
pub(super) fn encode<T: Serialize>(
    header: &T,
    payload: &[u8],
    session: Option<&mut Session>,
) -> Result<Vec<u8>> {
    let h = serde_json::to_vec(header)?;
    let mut out = Vec::with_capacity(16 + 64 + h.len() + payload.len());
    out.extend_from_slice(&(h.len() as u64).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    if let Some(s) = &session {
        out.extend_from_slice(&lengths_mac(s, s.me, s.sent, &out[..16]).finalize().into_bytes());
    }
    out.extend_from_slice(&h);
    out.extend_from_slice(payload);
    if let Some(s) = session {
        out.extend_from_slice(&frame_mac(s, s.me, s.sent, &h, payload).finalize().into_bytes());
        s.sent += 1;
    }
    Ok(out)
}

pub(super) fn lengths_mac(s: &Session, from: u8, seq: u64, lengths: &[u8]) -> HmacSha256 {
    mac(&s.key, &[&[from], &seq.to_le_bytes(), b"lengths", lengths])
}

pub(super) fn frame_mac(s: &Session, from: u8, seq: u64, h: &[u8], payload: &[u8]) -> HmacSha256 {
    mac(&s.key, &[&[from], &seq.to_le_bytes(), h, payload])
}

/// A frame's two lengths, refused when larger than `limits`.
pub(super) fn within(lengths: &[u8; 16], limits: Limits) -> Result<(u64, u64)> {
    let hl = u64::from_le_bytes(lengths[..8].try_into().expect("8 bytes"));
    let pl = u64::from_le_bytes(lengths[8..].try_into().expect("8 bytes"));
    if hl > limits.header || pl > limits.payload {
        bail!(
            "a frame of {hl} + {pl} bytes (at most {} + {} here): not haloscope's",
            limits.header,
            limits.payload
        );
    }
    Ok((hl, pl))
}

/// A frame's header, its error quoting at most [`ECHO`] bytes of it.
pub(super) fn parse<T: DeserializeOwned>(h: &[u8]) -> Result<T> {
    serde_json::from_slice(h).map_err(|e| anyhow!("a message from another rank: {}", quote(&e.to_string())))
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
