//! __rt.rs - what the declaration macros expand to call: the C entry
//! points (execute, validate_args, init, fini) as generic functions that
//! decode the arguments, run the tool and turn its result, or its panic,
//! into the ABI's status.  Not a public API.
use crate::call::{message, Call, Level, Outcome};
use crate::error::Error;
use crate::sys;
use serde::de::DeserializeOwned;
use std::any::Any;
use std::cell::Cell;
use std::os::raw::{c_char, c_int, c_void};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicPtr, Ordering};

/// Static data holding raw pointers (the descriptors): immutable, so
/// shared between threads.
#[repr(transparent)]
pub struct Static<T>(pub T);
unsafe impl<T> Sync for Static<T> {}

/// A `&'static str` that ends in NUL as a C string.
pub const fn cstr(s: &'static str) -> *const c_char {
    s.as_ptr().cast()
}

// All-zero descriptors (NULL pointers, None functions, no constraint):
// the declarations set what they use and take the rest from these.
pub const ZERO_PARAM: sys::toolhost_param =
    unsafe { std::mem::transmute([0u8; std::mem::size_of::<sys::toolhost_param>()]) };
pub const ZERO_TOOL: sys::toolhost_tool =
    unsafe { std::mem::transmute([0u8; std::mem::size_of::<sys::toolhost_tool>()]) };
pub const ZERO_PLUGIN: sys::toolhost_plugin =
    unsafe { std::mem::transmute([0u8; std::mem::size_of::<sys::toolhost_plugin>()]) };

/// The host api init() was given (this generation's; NULL before).
static HOST: AtomicPtr<sys::toolhost_host_api> = AtomicPtr::new(std::ptr::null_mut());

pub(crate) fn host_log(level: Level, msg: &str) {
    let api = HOST.load(Ordering::Acquire);
    if api.is_null() {
        return;
    }
    let m = message(msg);
    unsafe {
        if let Some(f) = (*api).log {
            f(api, level.raw(), m.as_ptr());
        }
    }
}

/// The message of a panic's payload.
pub fn panic_error(p: &(dyn Any + Send)) -> Error {
    let what = if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(no message)".to_string()
    };
    Error::new(format!("the tool panicked: {}", what))
}

fn write_error(call: *mut sys::toolhost_call, e: &Error) {
    let line = format!("{}\n", e.message());
    unsafe {
        if let Some(f) = (*(*call).host).write {
            f(call, sys::TOOLHOST_STDERR as c_int, line.as_ptr().cast(), line.len());
        }
    }
}

fn args_slice<'a>(args: *const u8, len: usize) -> &'a [u8] {
    if args.is_null() || len == 0 {
        // an empty map
        &[0x80]
    } else {
        unsafe { std::slice::from_raw_parts(args, len) }
    }
}

fn decode<A: DeserializeOwned>(args: *const u8, len: usize) -> Result<A, Error> {
    rmp_serde::from_slice(args_slice(args, len))
        .map_err(|e| Error::new(format!("the arguments do not decode: {}", e)))
}

/// The status execute() returns for what the tool did.
fn finish(
    call: *mut sys::toolhost_call,
    suspended: &Cell<bool>,
    r: std::thread::Result<Result<bool, Error>>,
) -> c_int {
    let r = r.unwrap_or_else(|p| Err(panic_error(&*p)));
    if suspended.get() {
        // An AsyncCall owns the call now (and completes it, even when
        // dropped by this error): execute() must not touch it.
        if let Err(e) = r {
            host_log(Level::Error, &format!("after suspend(): {} (the AsyncCall completes the call)", e));
        }
        return sys::TOOLHOST_PENDING as c_int;
    }
    match r {
        Ok(false) => sys::TOOLHOST_OK as c_int,
        Ok(true) => sys::TOOLHOST_PENDING as c_int,
        Err(e) => {
            write_error(call, &e);
            crate::call::failure_status(call, &e)
        }
    }
}

/// execute() of a tool taking arguments.
///
/// # Safety
/// The host's execute() arguments.
pub unsafe fn execute<A, R, F>(call: *mut sys::toolhost_call, args: *const u8, len: usize, f: F) -> c_int
where
    A: DeserializeOwned,
    R: Outcome,
    F: for<'c> FnOnce(Call<'c>, A) -> R,
{
    let suspended = Cell::new(false);
    let r = panic::catch_unwind(AssertUnwindSafe(|| {
        let a: A = decode(args, len)?;
        f(Call::new(call, &suspended), a).outcome()
    }));
    finish(call, &suspended, r)
}

/// execute() of a tool without arguments.
///
/// # Safety
/// The host's execute() arguments.
pub unsafe fn execute0<R, F>(call: *mut sys::toolhost_call, f: F) -> c_int
where
    R: Outcome,
    F: for<'c> FnOnce(Call<'c>) -> R,
{
    let suspended = Cell::new(false);
    let r = panic::catch_unwind(AssertUnwindSafe(|| f(Call::new(call, &suspended)).outcome()));
    finish(call, &suspended, r)
}

/// validate_args(): the tool's own check of its decoded arguments.
///
/// # Safety
/// The host's validate_args() arguments.
pub unsafe fn validate<A, V>(args: *const u8, len: usize, err: *mut c_char, err_size: usize, v: V) -> c_int
where
    A: DeserializeOwned,
    V: FnOnce(&A) -> Result<(), String>,
{
    let r = panic::catch_unwind(AssertUnwindSafe(|| match decode::<A>(args, len) {
        Ok(a) => v(&a),
        Err(e) => Err(e.message().to_string()),
    }))
    .unwrap_or_else(|p| Err(panic_error(&*p).message().to_string()));
    match r {
        Ok(()) => 0,
        Err(msg) => {
            if !err.is_null() && err_size > 0 {
                // cut at a character boundary, NUL-terminated
                let mut n = msg.len().min(err_size - 1);
                while n > 0 && !msg.is_char_boundary(n) {
                    n -= 1;
                }
                std::ptr::copy_nonoverlapping(msg.as_ptr(), err.cast::<u8>(), n);
                *err.add(n) = 0;
            }
            1
        }
    }
}

/// The plugin's init(): keeps the host api for logging and sends panic
/// messages to the host's log instead of the process's stderr.
///
/// # Safety
/// The host's init() arguments.
pub unsafe extern "C" fn init(
    host: *const sys::toolhost_host_api,
    _config: *const u8,
    _config_len: usize,
    state: *mut *mut c_void,
    _err: *mut c_char,
    _err_size: usize,
) -> c_int {
    let _ = panic::catch_unwind(|| {
        HOST.store(host as *mut _, Ordering::Release);
        panic::set_hook(Box::new(|info| {
            host_log(Level::Error, &info.to_string());
        }));
    });
    if !state.is_null() {
        *state = std::ptr::null_mut();
    }
    0
}

/// The plugin's fini(): joins the threads toolhost::spawn() started.
///
/// # Safety
/// The host's fini().
pub unsafe extern "C" fn fini(_state: *mut c_void) {
    let _ = panic::catch_unwind(|| {
        crate::threads::join_all();
        // The hook's closure lives in this object's code: drop it before
        // the host may unload the object.
        let _ = panic::take_hook();
        HOST.store(std::ptr::null_mut(), Ordering::Release);
    });
}
