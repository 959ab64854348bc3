//! @NAME@ - the @NAME@ toolhost plugin, in Rust with the toolhost crate.
use serde::Deserialize;
use std::io::Write;
use toolhost::{Call, Params, ToolResult};

// The parameters: one per field, described by its /// comment, with the
// constraints the host checks before the tool runs.
#[derive(Params, Deserialize)]
struct HelloArgs {
    /// Who to greet.
    #[param(default = "world")]
    name: String,
    /// How many greetings.
    #[param(default = 1, minimum = 1, maximum = 100)]
    times: u32,
}

// Runs on any host worker thread, concurrently with itself; `args` holds
// the validated arguments, defaults filled in.  A panic here fails the
// call with its message; it never reaches the host.
/// Greets someone.
#[toolhost::tool(flags = READ_ONLY | IDEMPOTENT)]
fn @NAME@_hello(call: Call, args: HelloArgs) -> ToolResult {
    for _ in 0..args.times {
        call.check()?; // stop when the call is cancelled
        writeln!(call.stdout(), "hello, {}", args.name)?;
    }
    Ok(())
}

// The plugin: its name, version and description come from Cargo.toml.
toolhost::plugin!(tools = [@NAME@_hello]);
