//! The C ABI (`include/rankscope.h`, `librankscope_sdk.so`) over [`Client`],
//! for C/C++ training frameworks.
//!
//! In: C calls with NUL-terminated UTF-8 strings and plain structs. Out:
//! `int` status codes (`RANKSCOPE_OK` = 0, `RANKSCOPE_DROPPED` = 1 when the
//! queue was full, negative for errors; [`rankscope_strerror`] names them).
//!
//! Invariants: no function panics across the boundary (each body runs under
//! `catch_unwind`); a NULL client or string is `RANKSCOPE_EINVAL`, never a
//! crash; `rankscope_shutdown` frees the client, which must not be used
//! afterwards.

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use crate::client::{CallError, Client, Options};
use crate::event::{self, CollectiveRecord};

pub const RANKSCOPE_OK: c_int = 0;
pub const RANKSCOPE_DROPPED: c_int = 1;
pub const RANKSCOPE_EINVAL: c_int = -1;
pub const RANKSCOPE_EORDER: c_int = -2;
pub const RANKSCOPE_ECLOSED: c_int = -3;
pub const RANKSCOPE_EINIT: c_int = -4;
pub const RANKSCOPE_ETIMEOUT: c_int = -5;
pub const RANKSCOPE_EPANIC: c_int = -6;

/// Options of [`rankscope_init`]; NULL strings and -1 numbers mean "from
/// the environment".
#[repr(C)]
pub struct RankscopeOptions {
    pub agent: *const c_char,
    pub job_id: *const c_char,
    pub rank: i64,
    pub world_size: i64,
    pub local_rank: i64,
    pub run_id: *const c_char,
    /// 0 = the default (65536).
    pub queue_events: u32,
}

/// One collective, as [`CollectiveRecord`] with names as strings.
#[repr(C)]
pub struct RankscopeCollective {
    pub op: *const c_char,
    pub process_group: *const c_char,
    pub seq: u64,
    pub group_size: u32,
    pub dtype: *const c_char,
    pub count: u64,
    pub bytes: u64,
    pub start_ns: u64,
    pub end_ns: u64,
    pub peer: u32,
    pub device: i32,
    pub stream: u32,
}

/// The client's counters (see [`crate::Stats`]).
#[repr(C)]
#[derive(Default)]
pub struct RankscopeStats {
    pub sent: u64,
    pub dropped: u64,
    pub dropped_queue_full: u64,
    pub dropped_by_agent: u64,
    pub dropped_disconnected: u64,
    pub rejected: u64,
    pub invalid_calls: u64,
    pub reconnects: u64,
    pub connected: u32,
    pub dropped_unpaired: u64,
}

/// # Safety
/// `p` is NULL or a valid NUL-terminated string.
unsafe fn opt_str(p: *const c_char) -> Result<Option<String>, c_int> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller promises a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(|s| Some(s.to_owned()))
        .map_err(|_| RANKSCOPE_EINVAL)
}

/// # Safety
/// `p` is NULL or a valid NUL-terminated string.
unsafe fn req_str<'a>(p: *const c_char) -> Result<&'a str, c_int> {
    if p.is_null() {
        return Err(RANKSCOPE_EINVAL);
    }
    // SAFETY: the caller promises a NUL-terminated string that outlives the call.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| RANKSCOPE_EINVAL)
}

fn num(v: i64) -> Option<u32> {
    u32::try_from(v).ok()
}

fn code(r: Result<(), CallError>) -> c_int {
    match r {
        Ok(()) => RANKSCOPE_OK,
        Err(CallError::Dropped) => RANKSCOPE_DROPPED,
        Err(CallError::OutOfOrder(_)) => RANKSCOPE_EORDER,
        Err(CallError::Closed) => RANKSCOPE_ECLOSED,
        Err(CallError::Invalid(_) | CallError::BadValue(_)) => RANKSCOPE_EINVAL,
    }
}

fn guard(f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(RANKSCOPE_EPANIC)
}

/// # Safety
/// `c` is NULL or a pointer returned by [`rankscope_init`] and not yet shut down.
unsafe fn client<'a>(c: *const Client) -> Result<&'a Client, c_int> {
    // SAFETY: the caller promises `c` came from rankscope_init and is live.
    unsafe { c.as_ref() }.ok_or(RANKSCOPE_EINVAL)
}

fn write_err(err: *mut c_char, len: usize, text: &str) {
    if err.is_null() || len == 0 {
        return;
    }
    let n = text.len().min(len - 1);
    // SAFETY: the caller gave a buffer of `len` bytes; we write n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), err.cast::<u8>(), n);
        *err.add(n) = 0;
    }
}

/// Starts a client. Returns NULL on error and writes the reason into `err`
/// (at most `err_len` bytes, NUL-terminated) when `err` is not NULL.
///
/// # Safety
/// `opts` is NULL or valid; its strings are NULL or NUL-terminated; `err`
/// is NULL or points to `err_len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn rankscope_init(
    opts: *const RankscopeOptions,
    err: *mut c_char,
    err_len: usize,
) -> *mut Client {
    let r = catch_unwind(AssertUnwindSafe(|| -> Result<Client, String> {
        let mut o = Options::default();
        // SAFETY: the caller promises opts is NULL or valid.
        if let Some(opts) = unsafe { opts.as_ref() } {
            let bad = |what: &str| format!("{what} is not valid UTF-8");
            // SAFETY: the strings are NULL or NUL-terminated (caller's promise).
            unsafe {
                o.agent = opt_str(opts.agent).map_err(|_| bad("agent"))?;
                o.identity.job_id = opt_str(opts.job_id).map_err(|_| bad("job_id"))?;
                o.identity.run_id = opt_str(opts.run_id).map_err(|_| bad("run_id"))?;
            }
            o.identity.rank = num(opts.rank);
            o.identity.world_size = num(opts.world_size);
            o.identity.local_rank = num(opts.local_rank);
            if opts.queue_events > 0 {
                o.queue_events = opts.queue_events as usize;
            }
        }
        Client::start(o).map_err(|e| e.to_string())
    }));
    match r {
        Ok(Ok(c)) => Box::into_raw(Box::new(c)),
        Ok(Err(text)) => {
            write_err(err, err_len, &text);
            std::ptr::null_mut()
        }
        Err(_) => {
            write_err(err, err_len, "internal error (panic) in rankscope_init");
            std::ptr::null_mut()
        }
    }
}

/// Begins step `step` now.
///
/// # Safety
/// `c` is NULL or a live client from [`rankscope_init`].
#[no_mangle]
pub unsafe extern "C" fn rankscope_step_begin(c: *const Client, step: u64) -> c_int {
    guard(|| match unsafe { client(c) } {
        Ok(c) => code(c.step_begin(step, None)),
        Err(e) => e,
    })
}

/// Ends step `step` now.
///
/// # Safety
/// As [`rankscope_step_begin`].
#[no_mangle]
pub unsafe extern "C" fn rankscope_step_end(c: *const Client, step: u64) -> c_int {
    guard(|| match unsafe { client(c) } {
        Ok(c) => code(c.step_end(step, None)),
        Err(e) => e,
    })
}

/// Opens a host span on this thread (`category`: forward, backward,
/// optimizer, dataloader, compute, communication, memcpy, other).
///
/// # Safety
/// As [`rankscope_step_begin`]; strings NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn rankscope_span_begin(
    c: *const Client,
    category: *const c_char,
    name: *const c_char,
) -> c_int {
    guard(|| {
        let r = (|| {
            // SAFETY: caller's promises (see the function docs).
            let (c, category, name) = unsafe { (client(c)?, req_str(category)?, req_str(name)?) };
            let category = event::span_category(category).map_err(|_| RANKSCOPE_EINVAL)?;
            Ok(code(c.span_begin(category, name)))
        })();
        r.unwrap_or_else(|e| e)
    })
}

/// Closes the innermost span this thread opened.
///
/// # Safety
/// As [`rankscope_step_begin`].
#[no_mangle]
pub unsafe extern "C" fn rankscope_span_end(c: *const Client) -> c_int {
    guard(|| match unsafe { client(c) } {
        Ok(c) => code(c.span_end()),
        Err(e) => e,
    })
}

/// Records a finished span (device -1 and stream 0 for the host).
///
/// # Safety
/// As [`rankscope_span_begin`].
#[no_mangle]
pub unsafe extern "C" fn rankscope_span(
    c: *const Client,
    category: *const c_char,
    name: *const c_char,
    start_ns: u64,
    end_ns: u64,
    device: i32,
    stream: u32,
) -> c_int {
    guard(|| {
        let r = (|| {
            // SAFETY: caller's promises (see the function docs).
            let (c, category, name) = unsafe { (client(c)?, req_str(category)?, req_str(name)?) };
            let category = event::span_category(category).map_err(|_| RANKSCOPE_EINVAL)?;
            Ok(code(
                c.span(category, name, start_ns, end_ns, device, stream),
            ))
        })();
        r.unwrap_or_else(|e| e)
    })
}

/// Records one collective.
///
/// # Safety
/// `c` as above; `rec` valid, its strings NULL (process group, dtype) or
/// NUL-terminated; `op` required.
#[no_mangle]
pub unsafe extern "C" fn rankscope_record_collective(
    c: *const Client,
    rec: *const RankscopeCollective,
) -> c_int {
    guard(|| {
        let r = (|| {
            // SAFETY: caller's promises (see the function docs).
            let (c, rec) = unsafe { (client(c)?, rec.as_ref().ok_or(RANKSCOPE_EINVAL)?) };
            // SAFETY: strings NULL or NUL-terminated (caller's promise).
            let (op, pg, dtype) = unsafe {
                (
                    req_str(rec.op)?,
                    opt_str(rec.process_group)?.unwrap_or_default(),
                    opt_str(rec.dtype)?.unwrap_or_default(),
                )
            };
            let record = CollectiveRecord {
                op: event::collective_op(op).map_err(|_| RANKSCOPE_EINVAL)?,
                process_group: pg,
                seq: rec.seq,
                group_size: rec.group_size,
                group_ranks: Vec::new(),
                dtype: event::dtype(&dtype),
                count: rec.count,
                bytes: rec.bytes,
                start_ns: rec.start_ns,
                end_ns: rec.end_ns,
                peer: rec.peer,
                device: rec.device,
                stream: rec.stream,
            };
            Ok(code(c.collective(&record)))
        })();
        r.unwrap_or_else(|e| e)
    })
}

/// Waits until everything recorded so far was acknowledged, at most
/// `timeout_ms`: `RANKSCOPE_OK` or `RANKSCOPE_ETIMEOUT`.
///
/// # Safety
/// As [`rankscope_step_begin`].
#[no_mangle]
pub unsafe extern "C" fn rankscope_flush(c: *const Client, timeout_ms: u32) -> c_int {
    guard(|| match unsafe { client(c) } {
        Ok(c) if c.flush(Duration::from_millis(timeout_ms.into())) => RANKSCOPE_OK,
        Ok(_) => RANKSCOPE_ETIMEOUT,
        Err(e) => e,
    })
}

/// Copies the client's counters into `out`.
///
/// # Safety
/// `c` as above; `out` valid for writing.
#[no_mangle]
pub unsafe extern "C" fn rankscope_get_stats(c: *const Client, out: *mut RankscopeStats) -> c_int {
    guard(|| {
        // SAFETY: caller's promises (see the function docs).
        let (c, out) = match unsafe { (client(c), out.as_mut()) } {
            (Ok(c), Some(out)) => (c, out),
            _ => return RANKSCOPE_EINVAL,
        };
        let s = c.stats();
        *out = RankscopeStats {
            sent: s.sent,
            dropped: s.dropped,
            dropped_queue_full: s.dropped_queue_full,
            dropped_by_agent: s.dropped_by_agent,
            dropped_disconnected: s.dropped_disconnected,
            rejected: s.rejected,
            invalid_calls: s.invalid_calls,
            reconnects: s.reconnects,
            connected: u32::from(s.connected),
            dropped_unpaired: s.dropped_unpaired,
        };
        RANKSCOPE_OK
    })
}

/// Flushes (at most `timeout_ms`), closes the stream and frees `c`.
///
/// # Safety
/// `c` is NULL or a live client; it must not be used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rankscope_shutdown(c: *mut Client, timeout_ms: u32) {
    if c.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: `c` came from Box::into_raw in rankscope_init (caller's promise).
        let boxed = unsafe { Box::from_raw(c) };
        boxed.shutdown(Duration::from_millis(timeout_ms.into()));
    }));
}

/// Nanoseconds since the Unix epoch (the clock of every `*_ns`).
#[no_mangle]
pub extern "C" fn rankscope_now_ns() -> u64 {
    crate::now_ns()
}

/// A static description of a status code.
#[no_mangle]
pub extern "C" fn rankscope_strerror(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        RANKSCOPE_OK => c"ok",
        RANKSCOPE_DROPPED => c"the event queue was full; the event was dropped and counted",
        RANKSCOPE_EINVAL => c"invalid argument (NULL, not UTF-8, unknown name, or a bad value)",
        RANKSCOPE_EORDER => {
            c"call out of order (step end without begin, span end without begin, ...)"
        }
        RANKSCOPE_ECLOSED => c"the client is shut down",
        RANKSCOPE_EINIT => c"the client could not start",
        RANKSCOPE_ETIMEOUT => c"timed out (or the agent is not connected)",
        RANKSCOPE_EPANIC => c"internal error",
        _ => c"unknown status code",
    };
    s.as_ptr()
}
