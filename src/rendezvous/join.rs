//! Any other rank's side: connect to rank 0 (retrying while it starts), prove who it is,
//! make rank 0 prove it holds the secret too, receive the shared bytes.

use anyhow::{Result, anyhow, bail};
use hmac::Mac;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::place::{Auth, address};
use super::wire::{
    Challenge, HANDSHAKE, Hello, Link, PROTOCOL, Proof, VERDICT, Verdict, hex, nonce, nonce_of, proof, quote,
    unhex,
};
use crate::error::UsageError;
use crate::world::World;

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
        std::thread::sleep(Duration::from_millis(20));
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
        link.recv_at_most(HANDSHAKE)
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
    let (verdict, id): (Verdict, _) = link.recv_at_most(VERDICT).map_err(Fatal)?;
    if let Verdict::Refused(why) = verdict {
        return Err(Fatal(anyhow!(
            "rank 0 refused rank {}: {}",
            world.rank,
            quote(&why)
        )));
    }
    link.stream()
        .set_read_timeout(None)
        .map_err(|e| fatal(e.into()))?;
    Ok((link, id))
}
