//! error.rs - the error of a tool: a message the caller (often a model)
//! reads on the call's stderr, and whether it is the call's cancellation.
use std::fmt;

/// Why a tool failed.  Returned as `Err` from a tool, its message is
/// written to the call's stderr and the call fails.
pub struct Error {
    msg: String,
    cancelled: bool,
    /// ABI 1.5: the backend's status and the retry-after hint (ms, 0 none)
    backend: Option<(Backend, u64)>,
}

/// Whose fault a failure is when the tool's backend (a server, a service,
/// a remote API) failed (ABI 1.5): the code the caller sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// down, restarting, refusing work: "unavailable"
    Unavailable,
    /// no answer within the tool's own timeout: "backend_timeout"
    Timeout,
    /// said slow down (HTTP 429, a quota): "rate_limited"
    RateLimited,
}

/// What a tool returns.
pub type ToolResult<T = ()> = Result<T, Error>;

impl Error {
    /// An error with this message (one line a model can act on).
    pub fn new(msg: impl Into<String>) -> Self {
        Error { msg: msg.into(), cancelled: false, backend: None }
    }
    /// The call was cancelled or passed its deadline.
    pub fn cancelled() -> Self {
        Error { msg: "cancelled".into(), cancelled: true, backend: None }
    }
    /// ABI 1.5: the tool's backend failed (`kind`), with a hint of when
    /// to try again (`None`: no hint; cut at a day by the host).  A host
    /// older than 1.5 gets a plain failure with the message.
    pub fn backend(kind: Backend, msg: impl Into<String>,
                   retry_after: Option<std::time::Duration>) -> Self {
        let ms = retry_after.map_or(0, |d| d.as_millis().min(u64::MAX as u128) as u64);
        Error { msg: msg.into(), cancelled: false, backend: Some((kind, ms)) }
    }
    /// The backend's status and hint (ms, 0: none), if any.
    pub fn backend_kind(&self) -> Option<(Backend, u64)> {
        self.backend
    }
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }
    pub fn message(&self) -> &str {
        &self.msg
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "toolhost::Error({:?})", self.msg)
    }
}

impl From<String> for Error {
    fn from(s: String) -> Self {
        Error::new(s)
    }
}

impl From<&str> for Error {
    fn from(s: &str) -> Self {
        Error::new(s)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        // A write of a Writer on a cancelled call says so.
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Error::cancelled();
        }
        Error::new(e.to_string())
    }
}

macro_rules! from_display {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Self {
                Error::new(e.to_string())
            }
        }
    )*};
}

from_display!(
    std::fmt::Error,
    std::str::Utf8Error,
    std::string::FromUtf8Error,
    std::num::ParseIntError,
    std::num::ParseFloatError,
    rmp_serde::decode::Error,
    rmp_serde::encode::Error,
    serde_json::Error
);
