//! call.rs - one call of a tool: Call (borrowed by the tool while it
//! runs), AsyncCall (owned by one plugin thread after suspend(), until
//! complete() consumes it), and Handle, what both can do.
use crate::error::{Error, ToolResult};
use crate::sys;
use serde::Serialize;
use std::cell::Cell;
use std::ffi::{CStr, CString};
use std::marker::PhantomData;
use std::ops::Deref;
use std::os::raw::{c_char, c_int};
use std::time::{Duration, Instant};

/// An output stream of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// A log level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Error,
    Warn,
    Info,
    Debug,
}

impl Level {
    pub(crate) fn raw(self) -> c_int {
        (match self {
            Level::Error => sys::TOOLHOST_LOG_ERROR,
            Level::Warn => sys::TOOLHOST_LOG_WARN,
            Level::Info => sys::TOOLHOST_LOG_INFO,
            Level::Debug => sys::TOOLHOST_LOG_DEBUG,
        }) as c_int
    }
}

/// Who calls (the host's caller(); None where the host does not know).
#[derive(Clone, Debug, Default)]
pub struct Caller {
    pub uid: Option<i64>,
    pub user: Option<String>,
    pub session: Option<String>,
    pub toolset: Option<String>,
    /// "cli", "rpc", "mcp" or "code".
    pub front: Option<String>,
}

/// Whether the host api has the member `$f` (it may be older).
macro_rules! host_has {
    ($api:expr, $f:ident) => {{
        let api: *const sys::toolhost_host_api = $api;
        let off = unsafe { std::ptr::addr_of!((*api).$f) } as usize - api as usize;
        (unsafe { (*api).struct_size }) as usize >= off + std::mem::size_of::<usize>()
    }};
}
pub(crate) use host_has;

pub(crate) fn message(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

/// What the tool's owner thread can do with a call: write, report
/// progress, check cancellation.  Reached through a [`Call`] or an
/// [`AsyncCall`] (they dereference to it); it cannot be sent to another
/// thread, and a reference to it cannot outlive its call.
pub struct Handle {
    raw: *mut sys::toolhost_call,
    _not_send: PhantomData<*mut ()>,
}

/// A writer of one stream of a call (std::io::Write).  A write to a
/// cancelled call fails with ErrorKind::Interrupted.
pub struct Writer<'h> {
    h: &'h Handle,
    stream: Stream,
}

impl std::io::Write for Writer<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self.h.write(self.stream, buf) {
            Ok(()) => Ok(buf.len()),
            Err(e) if e.is_cancelled() => Err(std::io::ErrorKind::Interrupted.into()),
            Err(e) => Err(std::io::Error::new(std::io::ErrorKind::Other, e.message().to_string())),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn code(rc: c_int, what: &str) -> ToolResult {
    match rc {
        0 => Ok(()),
        x if x == sys::TOOLHOST_ECANCELLED => Err(Error::cancelled()),
        x if x == sys::TOOLHOST_ENOMEM => Err(Error::new(format!("{}: out of memory", what))),
        x if x == sys::TOOLHOST_ESTATE => Err(Error::new(format!("{}: not allowed now", what))),
        _ => Err(Error::new(format!("{}: refused by the host ({})", what, rc))),
    }
}

impl Handle {
    fn api(&self) -> &sys::toolhost_host_api {
        unsafe { &*(*self.raw).host }
    }

    /// The call's id, unique within the host process.
    pub fn id(&self) -> u64 {
        unsafe { (*self.raw).call_id }
    }

    /// Appends bytes to a stream (the host copies them).
    pub fn write(&self, stream: Stream, data: &[u8]) -> ToolResult {
        let s = match stream {
            Stream::Stdout => sys::TOOLHOST_STDOUT,
            Stream::Stderr => sys::TOOLHOST_STDERR,
        } as c_int;
        let f = self.api().write.ok_or_else(|| Error::new("the host has no write()"))?;
        code(unsafe { f(self.raw, s, data.as_ptr().cast(), data.len()) }, "write")
    }

    /// Appends to stdout.
    pub fn out(&self, data: impl AsRef<[u8]>) -> ToolResult {
        self.write(Stream::Stdout, data.as_ref())
    }

    /// Appends to stderr.
    pub fn err(&self, data: impl AsRef<[u8]>) -> ToolResult {
        self.write(Stream::Stderr, data.as_ref())
    }

    /// stdout as a std::io::Write (for write!/writeln!).
    pub fn stdout(&self) -> Writer<'_> {
        Writer { h: self, stream: Stream::Stdout }
    }

    /// stderr as a std::io::Write.
    pub fn stderr(&self) -> Writer<'_> {
        Writer { h: self, stream: Stream::Stderr }
    }

    /// Writes `value` to stdout as JSON text (structured output: what a
    /// tool with an output schema writes).
    pub fn write_json<T: Serialize + ?Sized>(&self, value: &T) -> ToolResult {
        self.out(serde_json::to_vec(value)?)
    }

    /// Reports progress: `fraction` in [0, 1], or negative when unknown.
    /// For an ASYNC tool the first report acknowledges the call.
    pub fn progress(&self, fraction: f64, message: &str) -> ToolResult {
        let m = self::message(message);
        let f = self.api().progress.ok_or_else(|| Error::new("the host has no progress()"))?;
        code(unsafe { f(self.raw, fraction, m.as_ptr(), std::ptr::null(), 0) }, "progress")
    }

    /// Reports progress with a value (any Serialize, sent as msgpack).
    pub fn progress_data<T: Serialize + ?Sized>(&self, fraction: f64, message: &str, data: &T) -> ToolResult {
        let m = self::message(message);
        let d = rmp_serde::to_vec_named(data)?;
        let f = self.api().progress.ok_or_else(|| Error::new("the host has no progress()"))?;
        code(unsafe { f(self.raw, fraction, m.as_ptr(), d.as_ptr(), d.len()) }, "progress")
    }

    /// Sets the call's meta to `map` (a struct or a map, sent as msgpack).
    pub fn set_meta<T: Serialize + ?Sized>(&self, map: &T) -> ToolResult {
        let d = rmp_serde::to_vec_named(map)?;
        let f = self.api().set_meta.ok_or_else(|| Error::new("the host has no set_meta()"))?;
        code(unsafe { f(self.raw, d.as_ptr(), d.len()) }, "set_meta")
    }

    /// Whether the call is cancelled or past its deadline: stop soon.
    pub fn is_cancelled(&self) -> bool {
        match self.api().is_cancelled {
            Some(f) => unsafe { f(self.raw) != 0 },
            None => false,
        }
    }

    /// Err(cancelled) once the call is cancelled: `call.check()?;`.
    pub fn check(&self) -> ToolResult {
        if self.is_cancelled() {
            Err(Error::cancelled())
        } else {
            Ok(())
        }
    }

    /// The time left before the call's deadline (None: no deadline).
    pub fn time_left(&self) -> Option<Duration> {
        let ms = unsafe { self.api().time_left_ms.map(|f| f(self.raw)) }?;
        if ms < 0 {
            None
        } else {
            Some(Duration::from_millis(ms as u64))
        }
    }

    /// Waits `d`, waking early when the call is cancelled (then
    /// Err(cancelled)).
    pub fn sleep(&self, d: Duration) -> ToolResult {
        let deadline = Instant::now() + d;
        let api = self.api();
        let fd = if host_has!(api, cancel_fd) {
            api.cancel_fd.map_or(-1, |f| unsafe { f(self.raw) })
        } else {
            -1
        };
        loop {
            self.check()?;
            let now = Instant::now();
            if now >= deadline {
                return Ok(());
            }
            let left = deadline - now;
            if fd >= 0 {
                let ms = ((left.as_nanos() + 999_999) / 1_000_000).min(i32::MAX as u128) as c_int;
                let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                unsafe { libc::poll(&mut p, 1, ms) };
            } else {
                std::thread::sleep(left.min(Duration::from_millis(10)));
            }
        }
    }

    /// A line in the host's log, tagged with the plugin and the call.
    pub fn log(&self, level: Level, msg: &str) {
        let m = self::message(msg);
        let api = self.api();
        if host_has!(api, log_call) {
            if let Some(f) = api.log_call {
                unsafe { f(self.raw, level.raw(), m.as_ptr()) };
                return;
            }
        }
        if let Some(f) = api.log {
            unsafe { f(api, level.raw(), m.as_ptr()) };
        }
    }

    /// Who calls (None on a host without caller()).
    pub fn caller(&self) -> Option<Caller> {
        let api = self.api();
        if !host_has!(api, caller) {
            return None;
        }
        let f = api.caller?;
        let mut c: sys::toolhost_caller = unsafe { std::mem::zeroed() };
        c.struct_size = std::mem::size_of::<sys::toolhost_caller>() as u32;
        c.uid = -1;
        if unsafe { f(self.raw, &mut c) } != 0 {
            return None;
        }
        let s = |p: *const c_char| {
            if p.is_null() {
                None
            } else {
                Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
            }
        };
        Some(Caller {
            uid: if c.uid < 0 { None } else { Some(c.uid) },
            user: s(c.user),
            session: s(c.session),
            toolset: s(c.toolset),
            front: s(c.front),
        })
    }
}

/// The call a tool runs: valid while the tool function runs, not Send
/// (the host's worker owns it).  `Deref`s to [`Handle`].  To finish on
/// another thread, trade it for an [`AsyncCall`] with
/// [`suspend`](Call::suspend).
pub struct Call<'a> {
    h: Handle,
    suspended: &'a Cell<bool>,
}

impl Deref for Call<'_> {
    type Target = Handle;
    fn deref(&self) -> &Handle {
        &self.h
    }
}

/// Proof that the call was suspended: what a tool returns when an
/// [`AsyncCall`] finishes it.  Only [`Call::suspend`] makes one.
#[must_use = "return it from the tool"]
pub struct Pending(());

impl<'a> Call<'a> {
    pub(crate) fn new(raw: *mut sys::toolhost_call, suspended: &'a Cell<bool>) -> Self {
        Call { h: Handle { raw, _not_send: PhantomData }, suspended }
    }

    /// Detaches the call from the host's worker: the returned AsyncCall
    /// may go to one thread (toolhost::spawn), which finishes it with
    /// complete(); the tool returns the Pending.  The Call is consumed,
    /// so the tool cannot use it afterwards.
    pub fn suspend(self) -> Result<(AsyncCall, Pending), Error> {
        let f = self.api().suspend.ok_or_else(|| Error::new("the host has no suspend()"))?;
        code(unsafe { f(self.h.raw) }, "suspend")?;
        self.suspended.set(true);
        Ok((AsyncCall { h: Handle { raw: self.h.raw, _not_send: PhantomData }, done: false }, Pending(())))
    }

    /// suspend(), then `f` on a thread of the plugin (toolhost::spawn);
    /// what `f` returns, or its panic, completes the call.
    pub fn spawn<F>(self, f: F) -> Result<Pending, Error>
    where
        F: FnOnce(&AsyncCall) -> ToolResult + Send + 'static,
    {
        let (ac, pending) = self.suspend()?;
        // If the thread cannot start, the closure is dropped with the
        // AsyncCall in it, which completes the call as failed.
        let _ = crate::threads::spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&ac)));
            ac.complete(r.unwrap_or_else(|p| Err(crate::__rt::panic_error(&*p))));
        });
        Ok(pending)
    }
}

/// A suspended call, owned by one thread of the plugin (it is Send, not
/// Sync) until [`complete`](AsyncCall::complete) consumes it.  Dropped
/// without complete() (a panic, an early return), it completes the call
/// as failed, so the caller always gets an answer.
pub struct AsyncCall {
    h: Handle,
    done: bool,
}

// The owner thread of a suspended call may change hands (plugin.h, the
// Owner class): moving the AsyncCall moves the ownership with it.
unsafe impl Send for AsyncCall {}

impl Deref for AsyncCall {
    type Target = Handle;
    fn deref(&self) -> &Handle {
        &self.h
    }
}

impl AsyncCall {
    /// Finishes the call: Ok succeeds, Err fails with its message on
    /// stderr.  The AsyncCall is consumed: nothing can use the call after.
    pub fn complete(mut self, result: ToolResult) {
        self.finish(result);
    }

    fn finish(&mut self, result: ToolResult) {
        if self.done {
            return;
        }
        self.done = true;
        let status = match result {
            Ok(()) => sys::TOOLHOST_OK as c_int,
            Err(e) => {
                let _ = self.h.err(format!("{}\n", e.message()));
                failure_status(self.h.raw, &e)
            }
        };
        if let Some(f) = self.h.api().complete {
            unsafe { f(self.h.raw, status) };
        }
    }
}

impl Drop for AsyncCall {
    fn drop(&mut self) {
        if !self.done {
            let why = if std::thread::panicking() {
                "the tool panicked before completing the call"
            } else {
                "the tool dropped the call without completing it"
            };
            self.finish(Err(Error::new(why)));
        }
    }
}

/// What a tool function may return: `ToolResult` (done), `Pending`
/// (after suspend), `Result<Pending, Error>`.
pub trait Outcome {
    /// Ok(true): pending; Ok(false): succeeded; Err: failed.
    #[doc(hidden)]
    fn outcome(self) -> Result<bool, Error>;
}

impl Outcome for Result<(), Error> {
    fn outcome(self) -> Result<bool, Error> {
        self.map(|()| false)
    }
}

impl Outcome for Pending {
    fn outcome(self) -> Result<bool, Error> {
        Ok(true)
    }
}

impl Outcome for Result<Pending, Error> {
    fn outcome(self) -> Result<bool, Error> {
        self.map(|_| true)
    }
}

/// What a failed call ends with (ABI 1.5): a backend's status, its
/// retry-after hint given to the host first, on a 1.5 host; else
/// TOOLHOST_FAILED.  `call` is a live call of the host.
pub(crate) fn failure_status(call: *mut sys::toolhost_call, e: &Error) -> c_int {
    let (kind, ms) = match e.backend_kind() {
        Some(b) => b,
        None => return sys::TOOLHOST_FAILED as c_int,
    };
    let api = unsafe { &*(*call).host };
    if api.abi_minor < 5 {
        return sys::TOOLHOST_FAILED as c_int;
    }
    if ms > 0 && host_has!(api, set_retry_after) {
        if let Some(f) = api.set_retry_after {
            unsafe { f(call, ms) };
        }
    }
    (match kind {
        crate::error::Backend::Unavailable => sys::TOOLHOST_UNAVAILABLE,
        crate::error::Backend::Timeout => sys::TOOLHOST_TIMEOUT,
        crate::error::Backend::RateLimited => sys::TOOLHOST_RATE_LIMITED,
    }) as c_int
}
