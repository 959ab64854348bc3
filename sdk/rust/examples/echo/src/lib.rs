//! rust_echo - the `echo` tool with the Rust SDK: writes `text` to stdout
//! unchanged (the contract of plugins/echo's echo, so the two compare).
use serde::Deserialize;
use toolhost::{Call, Params, ToolResult};

#[derive(Params, Deserialize)]
struct EchoArgs {
    /// The text to write to stdout.
    text: String,
}

/// Writes `text` to stdout unchanged.
#[toolhost::tool(flags = READ_ONLY | IDEMPOTENT | SHORT)]
fn echo(call: Call, args: EchoArgs) -> ToolResult {
    call.out(args.text)
}

// Named "echo" like plugins/echo: a tool's name starts with its plugin's.
toolhost::plugin!(name = "echo", tools = [echo]);
