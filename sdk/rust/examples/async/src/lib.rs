//! rust_async - an ASYNC tool that finishes on a thread of its own:
//! `rust_async_countdown` suspends its call, hands the AsyncCall to a thread
//! (toolhost::spawn, joined at fini) that reports one progress update per
//! step, sleeps between steps (woken early by a cancellation, which then
//! ends the call) and completes it.  `rust_async_panic` panics, to show a panic
//! answered as the tool's error.  `rust_async_backend` fails the way a tool
//! in front of a remote service does (ABI 1.5): the backend's code and a
//! retry-after hint, from the call's thread or from a thread of its own.
use serde::Deserialize;
use std::time::Duration;
use toolhost::{AsyncCall, Backend, Call, Error, Level, Params, Pending, ToolResult};

#[derive(Params, Deserialize)]
struct CountdownArgs {
    /// How many steps to count down, one progress update each.
    #[param(default = 3, minimum = 0, maximum = 1000)]
    steps: u32,
    /// Milliseconds to wait per step.
    #[param(default = 10, minimum = 0, maximum = 60000)]
    delay_ms: u64,
    /// What to write to stdout at the end.
    #[param(default = "liftoff")]
    text: String,
}

fn count(c: &AsyncCall, args: &CountdownArgs) -> ToolResult {
    c.progress(0.0, &format!("counting down from {}", args.steps))?;
    for i in 1..=args.steps {
        if let Err(e) = c.sleep(Duration::from_millis(args.delay_ms)) {
            c.log(Level::Info, &format!("stopped at step {} of {}: {}", i, args.steps, e));
            return Err(e);
        }
        let left = args.steps - i;
        c.progress(f64::from(i) / f64::from(args.steps), &format!("{} left", left))?;
    }
    c.out(format!("{}\n", args.text))
}

/// Counts down `steps` steps on a thread of its own, reporting progress,
/// then writes `text`; stops early when cancelled.
///
/// One progress update per step (the first acknowledges the call), then
/// `text` on stdout.  Cancelled, or past its deadline, it stops at once
/// and fails with "cancelled".
#[toolhost::tool(flags = ASYNC | READ_ONLY, stdout = STATUS)]
fn rust_async_countdown(call: Call, args: CountdownArgs) -> Result<Pending, Error> {
    // The Call is consumed: only the AsyncCall can touch the call now.
    let (c, pending) = call.suspend()?;
    toolhost::spawn(move || {
        let r = count(&c, &args);
        c.complete(r); // consumes c: a completed call cannot be written to
    })?;
    Ok(pending)
}

#[derive(Params, Deserialize)]
struct PanicArgs {
    /// The panic's message.
    #[param(default = "on purpose")]
    message: String,
}

/// Panics with `message`: the host answers with a tool error and goes on.
///
/// A test aid: the panic is caught where the host calls the tool and the
/// call fails with "the tool panicked: MESSAGE" on stderr.
#[toolhost::tool(flags = READ_ONLY)]
fn rust_async_panic(_call: Call, args: PanicArgs) -> ToolResult {
    panic!("{}", args.message)
}

#[derive(Params, Deserialize)]
struct BackendArgs {
    /// The backend's status to end with.
    #[param(enum_values = ["unavailable", "timeout", "rate_limited"])]
    kind: String,
    /// When to try again, in milliseconds (0: no hint).
    #[param(default = 0, minimum = 0, maximum = 86400000)]
    retry_after_ms: u64,
    /// End from a thread of its own (the call suspended first).
    #[param(default = false)]
    later: bool,
}

fn backend_error(a: &BackendArgs) -> Error {
    let kind = match a.kind.as_str() {
        "unavailable" => Backend::Unavailable,
        "timeout" => Backend::Timeout,
        _ => Backend::RateLimited,
    };
    let hint = (a.retry_after_ms > 0).then(|| Duration::from_millis(a.retry_after_ms));
    Error::backend(kind, format!("the service said {}", a.kind), hint)
}

/// Fails as its backend would: unavailable, timeout or rate_limited.
///
/// A test aid: the call ends with the backend's code (the caller sees
/// `unavailable`, `backend_timeout` or `rate_limited`) and, when
/// `retry_after_ms` is set, that hint; with `later` the failure comes
/// from a thread of its own after the call was suspended.
#[toolhost::tool(flags = ASYNC | READ_ONLY)]
fn rust_async_backend(call: Call, args: BackendArgs) -> Result<Pending, Error> {
    if !args.later {
        return Err(backend_error(&args));
    }
    let (c, pending) = call.suspend()?;
    toolhost::spawn(move || c.complete(Err(backend_error(&args))))?;
    Ok(pending)
}

toolhost::plugin!(tools = [rust_async_countdown, rust_async_panic, rust_async_backend]);
