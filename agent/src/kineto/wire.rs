//! libkineto's IPC fabric messages (the Dynolog daemon protocol), as bytes.
//!
//! One message = one Unix datagram: a 40-byte header — the payload size as a
//! native `size_t` (8 bytes, little-endian on the platforms we run on) and
//! a NUL-padded 32-byte type string — followed by exactly `size` payload
//! bytes. Defined by the public sources of Dynolog
//! (`dynolog/src/ipcfabric/FabricManager.h` `Metadata`, `Utils.h`
//! `LibkinetoContext` / `LibkinetoRequest`) and Kineto
//! (`libkineto/src/IpcFabricConfigClient.cpp`).
//!
//! Requests from a traced process:
//! * `ctxt`: registration, payload `{ i32 gpu, i32 pid, i64 job_id }`; the
//!   daemon answers `ctxt` with an `i32` (the number of processes it knows
//!   for that job);
//! * `req`: config poll, payload `{ i32 type, i32 n, i64 job_id, i32 pids[n] }`
//!   (the process first, then its ancestors; `type` is a bit set, 1 = event
//!   profiler, 2 = activity profiler); the daemon answers `req` with the
//!   on-demand config text (empty: nothing to do).

/// Header size: `size_t size` + `char type[32]`.
pub const HEADER_BYTES: usize = 40;
const TYPE_BYTES: usize = 32;
/// Largest `req` we accept (pids of a deep process tree fit many times).
pub const MAX_DATAGRAM_BYTES: usize = 64 * 1024;
/// Activity-profiler bit of a `req`'s type.
pub const CONFIG_TYPE_ACTIVITIES: i32 = 2;

/// A message from a traced process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Registration.
    Context { gpu: i32, pid: i32, job_id: i64 },
    /// Config poll.
    Request {
        config_type: i32,
        job_id: i64,
        /// The polling process first, then its ancestors.
        pids: Vec<i32>,
    },
}

/// A datagram that is not a message we understand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("datagram of {0} bytes is shorter than the 40-byte header")]
    Short(usize),
    #[error("header says {declared} payload bytes, the datagram has {actual}")]
    SizeMismatch { declared: u64, actual: usize },
    #[error("unknown message type {0:?}")]
    UnknownType(String),
    #[error("{kind} payload of {len} bytes is malformed")]
    Payload { kind: &'static str, len: usize },
}

fn i32_at(b: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn i64_at(b: &[u8], at: usize) -> Option<i64> {
    Some(i64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Parses one datagram.
pub fn parse(datagram: &[u8]) -> Result<Message, WireError> {
    if datagram.len() < HEADER_BYTES {
        return Err(WireError::Short(datagram.len()));
    }
    let declared = u64::from_le_bytes(datagram[..8].try_into().unwrap_or([0; 8]));
    let payload = &datagram[HEADER_BYTES..];
    if declared != payload.len() as u64 {
        return Err(WireError::SizeMismatch {
            declared,
            actual: payload.len(),
        });
    }
    let raw_type = &datagram[8..8 + TYPE_BYTES];
    let end = raw_type.iter().position(|&c| c == 0).unwrap_or(TYPE_BYTES);
    match &raw_type[..end] {
        b"ctxt" => {
            let bad = || WireError::Payload {
                kind: "ctxt",
                len: payload.len(),
            };
            Ok(Message::Context {
                gpu: i32_at(payload, 0).ok_or_else(bad)?,
                pid: i32_at(payload, 4).ok_or_else(bad)?,
                job_id: i64_at(payload, 8).ok_or_else(bad)?,
            })
        }
        b"req" => {
            let bad = || WireError::Payload {
                kind: "req",
                len: payload.len(),
            };
            let config_type = i32_at(payload, 0).ok_or_else(bad)?;
            let n = i32_at(payload, 4).ok_or_else(bad)?;
            let job_id = i64_at(payload, 8).ok_or_else(bad)?;
            let n = usize::try_from(n).map_err(|_| bad())?;
            if payload.len() != 16 + 4 * n || n == 0 {
                return Err(bad());
            }
            let pids = (0..n)
                .map(|i| i32_at(payload, 16 + 4 * i).ok_or_else(bad))
                .collect::<Result<_, _>>()?;
            Ok(Message::Request {
                config_type,
                job_id,
                pids,
            })
        }
        other => Err(WireError::UnknownType(
            String::from_utf8_lossy(other).into_owned(),
        )),
    }
}

/// One reply datagram of type `kind` carrying `payload`.
pub fn encode(kind: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let mut t = [0u8; TYPE_BYTES];
    let k = kind.as_bytes();
    let n = k.len().min(TYPE_BYTES - 1);
    t[..n].copy_from_slice(&k[..n]);
    out.extend_from_slice(&t);
    out.extend_from_slice(payload);
    out
}

/// The reply to a registration: the job's process count.
pub fn context_reply(processes: i32) -> Vec<u8> {
    encode("ctxt", &processes.to_le_bytes())
}

/// The reply to a config poll: the config text (empty: nothing to do).
pub fn request_reply(config: &str) -> Vec<u8> {
    encode("req", config.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(config_type: i32, job: i64, pids: &[i32]) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&config_type.to_le_bytes());
        p.extend_from_slice(&(pids.len() as i32).to_le_bytes());
        p.extend_from_slice(&job.to_le_bytes());
        for pid in pids {
            p.extend_from_slice(&pid.to_le_bytes());
        }
        encode("req", &p)
    }

    #[test]
    fn parses_what_libkineto_sends() {
        let d = request(3, 42, &[100, 50, 1]);
        assert_eq!(d.len(), 40 + 16 + 12);
        assert_eq!(
            parse(&d),
            Ok(Message::Request {
                config_type: 3,
                job_id: 42,
                pids: vec![100, 50, 1]
            })
        );
        let mut c = Vec::new();
        c.extend_from_slice(&0i32.to_le_bytes());
        c.extend_from_slice(&77i32.to_le_bytes());
        c.extend_from_slice(&0i64.to_le_bytes());
        assert_eq!(
            parse(&encode("ctxt", &c)),
            Ok(Message::Context {
                gpu: 0,
                pid: 77,
                job_id: 0
            })
        );
    }

    #[test]
    fn replies_have_the_header_and_exact_payload() {
        let r = request_reply("ACTIVITIES_ITERATIONS=2");
        assert_eq!(&r[..8], &23u64.to_le_bytes());
        assert_eq!(&r[8..11], b"req");
        assert!(r[11..40].iter().all(|&b| b == 0));
        assert_eq!(&r[40..], b"ACTIVITIES_ITERATIONS=2");
        assert_eq!(context_reply(3)[40..], 3i32.to_le_bytes());
    }

    #[test]
    fn bad_datagrams_are_named_errors() {
        assert_eq!(parse(&[0u8; 10]), Err(WireError::Short(10)));
        let mut d = request(2, 1, &[5]);
        d.pop();
        assert!(matches!(parse(&d), Err(WireError::SizeMismatch { .. })));
        assert!(matches!(
            parse(&encode("nope", b"")),
            Err(WireError::UnknownType(t)) if t == "nope"
        ));
        // n says 3 pids, the payload has 1.
        let mut p = request(2, 1, &[5]);
        p[40 + 4..40 + 8].copy_from_slice(&3i32.to_le_bytes());
        assert!(matches!(
            parse(&p),
            Err(WireError::Payload { kind: "req", .. })
        ));
        assert!(matches!(
            parse(&encode("ctxt", &[1, 2])),
            Err(WireError::Payload { kind: "ctxt", .. })
        ));
    }
}
