//! toolhost - write toolhost tool plugins in Rust.
//!
//! A plugin is a `cdylib` crate that declares its tools and the plugin:
//!
//! ```ignore
//! use serde::Deserialize;
//! use toolhost::{Call, Params, ToolResult};
//!
//! #[derive(Params, Deserialize)]
//! struct EchoArgs {
//!     /// The text to write to stdout.
//!     text: String,
//! }
//!
//! /// Writes `text` to stdout unchanged.
//! #[toolhost::tool(flags = READ_ONLY | IDEMPOTENT)]
//! fn echo(call: Call, args: EchoArgs) -> ToolResult {
//!     call.out(&args.text)
//! }
//!
//! toolhost::plugin!(tools = [echo]);
//! ```
//!
//! The declarations expand to the static descriptors of the C ABI
//! (`toolhost-sys`, generated from toolhost/plugin.h by bindgen when it is
//! built).  The host validates the arguments against the declared
//! parameters before the tool runs; the SDK decodes them (msgpack, with
//! rmp-serde) into the arguments type.  A tool gets a [`Call`], which it
//! cannot keep or send to another thread; [`Call::suspend`] trades it for
//! an [`AsyncCall`] that another thread owns and finishes with
//! [`AsyncCall::complete`], which consumes it.  A panic in a tool, in
//! init or fini never unwinds into the host: it is caught at the boundary
//! and the call fails with the panic's message as its error.
//!
//! Threads: `execute` runs on many host threads at once (share state with
//! `Mutex`/atomics, or declare `flags = SERIAL`).  Threads of the plugin
//! are started with [`spawn`], which the plugin's fini joins, so none runs
//! plugin code after the host unloads it.

mod call;
mod error;
mod params;
mod threads;

#[doc(hidden)]
#[path = "__rt.rs"]
pub mod __rt;

pub use call::{AsyncCall, Call, Caller, Handle, Level, Outcome, Pending, Stream, Writer};
pub use error::{Backend, Error, ToolResult};
pub use params::{ParamType, Params};
pub use threads::spawn;
pub use toolhost_macros::{plugin, tool, Params};
pub use toolhost_sys as sys;

/// Tool flags, for `#[tool(flags = A | B)]` (plugin.h, TOOLHOST_TOOL_*).
pub mod flags {
    use crate::sys;
    /// Long-running: acknowledged at the first progress update.
    pub const ASYNC: u32 = sys::TOOLHOST_TOOL_ASYNC as u32;
    /// Changes nothing outside.
    pub const READ_ONLY: u32 = sys::TOOLHOST_TOOL_READ_ONLY as u32;
    /// May delete or overwrite.
    pub const DESTRUCTIVE: u32 = sys::TOOLHOST_TOOL_DESTRUCTIVE as u32;
    /// Same arguments, same effect.
    pub const IDEMPOTENT: u32 = sys::TOOLHOST_TOOL_IDEMPOTENT as u32;
    /// Reaches outside the machine.
    pub const OPEN_WORLD: u32 = sys::TOOLHOST_TOOL_OPEN_WORLD as u32;
    /// Never two calls of the tool at once.
    pub const SERIAL: u32 = sys::TOOLHOST_TOOL_SERIAL as u32;
    /// Every call returns within about a millisecond and never blocks
    /// (plugin.h says what a front then does with it).
    pub const SHORT: u32 = sys::TOOLHOST_TOOL_SHORT as u32;
}

/// Plugin flags, for `plugin!(flags = ...)` (TOOLHOST_PLUGIN_*).
pub mod plugin_flags {
    use crate::sys;
    /// Never two calls of any of the plugin's tools at once.
    pub const SERIAL: u64 = sys::TOOLHOST_PLUGIN_SERIAL as u64;
    /// A reload does not overlap the old and the new generation.
    pub const EXCLUSIVE_RELOAD: u64 = sys::TOOLHOST_PLUGIN_EXCLUSIVE_RELOAD as u64;
}

/// What an output stream holds, for `#[tool(stdout = ..., stderr = ...)]`.
pub mod semantic {
    use crate::sys;
    pub const TEXT: u32 = sys::toolhost_semantic_TOOLHOST_SEM_TEXT;
    pub const STATUS: u32 = sys::toolhost_semantic_TOOLHOST_SEM_STATUS;
    pub const ERROR: u32 = sys::toolhost_semantic_TOOLHOST_SEM_ERROR;
    pub const FILE_CONTENT: u32 = sys::toolhost_semantic_TOOLHOST_SEM_FILE_CONTENT;
    pub const FILE_VIEW: u32 = sys::toolhost_semantic_TOOLHOST_SEM_FILE_VIEW;
    pub const COMMAND_OUTPUT: u32 = sys::toolhost_semantic_TOOLHOST_SEM_COMMAND_OUTPUT;
    pub const SEARCH_RESULTS: u32 = sys::toolhost_semantic_TOOLHOST_SEM_SEARCH_RESULTS;
    pub const KNOWLEDGE: u32 = sys::toolhost_semantic_TOOLHOST_SEM_KNOWLEDGE;
    pub const STRUCTURED: u32 = sys::toolhost_semantic_TOOLHOST_SEM_STRUCTURED;
    pub const LOG: u32 = sys::toolhost_semantic_TOOLHOST_SEM_LOG;
    pub const DIFF: u32 = sys::toolhost_semantic_TOOLHOST_SEM_DIFF;
    pub const BINARY: u32 = sys::toolhost_semantic_TOOLHOST_SEM_BINARY;
}

/// Writes a line to the host's log under the plugin's name (any thread;
/// nothing before the host called init).
pub fn log(level: Level, message: &str) {
    __rt::host_log(level, message)
}

/// Returns from the tool with an error: `bail!("no such file: {}", p)`.
#[macro_export]
macro_rules! bail {
    ($($t:tt)*) => {
        return ::core::result::Result::Err($crate::Error::new(format!($($t)*)))
    };
}
