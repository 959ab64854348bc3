//! rust_hello - an example toolhost plugin in Rust, written against
//! toolhost/plugin.h with #[repr(C)] mirrors of its structs and no crates
//! beyond std.
//!
//! Rules (AUTHORING.md, "Other languages"): the one exported symbol is
//! `toolhost_plugin_v1` (#[no_mangle] extern "C"); every struct is
//! #[repr(C)] with the members of plugin.h in order, `struct_size` set to
//! size_of; no panic may unwind into the host (catch_unwind in each entry,
//! and the crate is built with -C panic=abort as a second guard); the
//! descriptor is static; execute() may run on many threads at once.
use std::ffi::{c_char, c_int, c_void};
use std::mem::size_of;
use std::panic::catch_unwind;
use std::ptr::null;

const ABI_MAJOR: u32 = 1;
const ABI_MINOR: u32 = 1;
const OK: c_int = 0;
const FAILED: c_int = 1;
const STDOUT: c_int = 1;
const STDERR: c_int = 2;
const TYPE_STRING: u32 = 1;
const SEM_TEXT: u32 = 1;
const SEM_ERROR: u32 = 3;
const TOOL_READ_ONLY: u32 = 1 << 1;
const TOOL_IDEMPOTENT: u32 = 1 << 3;

#[repr(C)]
pub struct Call {
    struct_size: u32,
    host: *const HostApi,
    call_id: u64,
}

type Unused = Option<unsafe extern "C" fn()>;

#[repr(C)]
pub struct HostApi {
    struct_size: u32,
    abi_major: u32,
    abi_minor: u32,
    write: Option<unsafe extern "C" fn(*mut Call, c_int, *const c_void, usize) -> c_int>,
    set_meta: Unused,
    progress: Unused,
    is_cancelled: Option<unsafe extern "C" fn(*const Call) -> c_int>,
    time_left_ms: Unused,
    suspend: Unused,
    complete: Unused,
    log: Unused,
    // ABI 1.1 members follow; this plugin does not use them.
}

#[repr(C)]
pub struct Param {
    struct_size: u32,
    name: *const c_char,
    type_: u32,
    required: c_int,
    description: *const c_char,
    enum_values: *const *const c_char,
    default_json: *const c_char,
    item_type: u32,
    // ABI 1.1
    minimum: f64,
    maximum: f64,
    bounds: u32,
    min_length: u32,
    max_length: u32,
    min_items: u32,
    max_items: u32,
    pattern: *const c_char,
    schema_json: *const c_char,
}

type Execute = unsafe extern "C" fn(*mut c_void, *const Tool, *mut Call, *const u8, usize) -> c_int;

#[repr(C)]
pub struct Tool {
    struct_size: u32,
    name: *const c_char,
    description: *const c_char,
    long_description: *const c_char,
    params: *const Param,
    n_params: u32,
    stdout_type: u32,
    stderr_type: u32,
    flags: u32,
    execute: Option<Execute>,
    needs_permission: Unused,
    validate_args: Unused,
    user_data: *const c_void,
    // ABI 1.1
    title: *const c_char,
    output_schema: *const c_char,
}

#[repr(C)]
pub struct Plugin {
    struct_size: u32,
    abi_major: u32,
    abi_minor: u32,
    name: *const c_char,
    version: *const c_char,
    description: *const c_char,
    config_params: *const Param,
    n_config_params: u32,
    init: Unused,
    fini: Unused,
    tools: *const Tool,
    n_tools: u32,
    // ABI 1.1
    flags: u64,
    requires_host_minor: u32,
    init_tools: Unused,
}

// The descriptor holds raw pointers to static data only: safe to share.
struct Static<T>(T);
unsafe impl<T> Sync for Static<T> {}

macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr() as *const c_char
    };
}

/// Reads the string value of `key` from a msgpack map (fixmap/map16,
/// str8/fixstr/str16 values only: enough for this tool's one parameter).
fn arg_str<'a>(args: &'a [u8], key: &str) -> Option<&'a [u8]> {
    fn str_at(b: &[u8], i: usize) -> Option<(usize, usize)> {
        let t = *b.get(i)?;
        match t {
            0xa0..=0xbf => Some((i + 1, (t & 0x1f) as usize)),
            0xd9 => Some((i + 2, *b.get(i + 1)? as usize)),
            0xda => Some((i + 3, u16::from_be_bytes([*b.get(i + 1)?, *b.get(i + 2)?]) as usize)),
            _ => None,
        }
    }
    let (mut i, n) = match *args.first()? {
        t @ 0x80..=0x8f => (1, (t & 0x0f) as usize),
        0xde => (3, u16::from_be_bytes([*args.get(1)?, *args.get(2)?]) as usize),
        _ => return None,
    };
    for _ in 0..n {
        let (ks, kl) = str_at(args, i)?;
        let (vs, vl) = str_at(args, ks + kl)?;
        if args.get(ks..ks + kl)? == key.as_bytes() {
            return args.get(vs..vs + vl);
        }
        i = vs + vl;
    }
    None
}

unsafe fn write(call: *mut Call, stream: c_int, bytes: &[u8]) -> c_int {
    match (*(*call).host).write {
        Some(w) => w(call, stream, bytes.as_ptr() as *const c_void, bytes.len()),
        None => -1,
    }
}

unsafe extern "C" fn greet(
    _state: *mut c_void,
    _tool: *const Tool,
    call: *mut Call,
    args: *const u8,
    len: usize,
) -> c_int {
    let r = catch_unwind(|| {
        let a = std::slice::from_raw_parts(args, len);
        let name = arg_str(a, "name").unwrap_or(b"world");
        let mut out = b"hello from Rust, ".to_vec();
        out.extend_from_slice(name);
        out.push(b'\n');
        write(call, STDOUT, &out);
        OK
    });
    match r {
        Ok(rc) => rc,
        Err(_) => {
            write(call, STDERR, b"internal error (a panic)");
            FAILED
        }
    }
}

static PARAMS: Static<[Param; 1]> = Static([Param {
    struct_size: size_of::<Param>() as u32,
    name: cstr!("name"),
    type_: TYPE_STRING,
    required: 0,
    description: cstr!("Who to greet."),
    enum_values: null(),
    default_json: cstr!("\"world\""),
    item_type: 0,
    minimum: 0.0,
    maximum: 0.0,
    bounds: 0,
    min_length: 1,
    max_length: 64,
    min_items: 0,
    max_items: 0,
    pattern: null(),
    schema_json: null(),
}]);

static TOOLS: Static<[Tool; 1]> = Static([Tool {
    struct_size: size_of::<Tool>() as u32,
    name: cstr!("rust_hello_greet"),
    description: cstr!("Greets someone, from Rust."),
    long_description: null(),
    params: &PARAMS.0 as *const Param,
    n_params: 1,
    stdout_type: SEM_TEXT,
    stderr_type: SEM_ERROR,
    flags: TOOL_READ_ONLY | TOOL_IDEMPOTENT,
    execute: Some(greet),
    needs_permission: None,
    validate_args: None,
    user_data: null(),
    title: cstr!("Greet"),
    output_schema: null(),
}]);

static PLUGIN: Static<Plugin> = Static(Plugin {
    struct_size: size_of::<Plugin>() as u32,
    abi_major: ABI_MAJOR,
    abi_minor: ABI_MINOR,
    name: cstr!("rust_hello"),
    version: cstr!("1.0.0"),
    description: cstr!("Greetings, an example in Rust."),
    config_params: null(),
    n_config_params: 0,
    init: None,
    fini: None,
    tools: &TOOLS.0 as *const Tool,
    n_tools: 1,
    flags: 0,
    requires_host_minor: 0,
    init_tools: None,
});

/// The one exported symbol.
#[no_mangle]
pub extern "C" fn toolhost_plugin_v1() -> *const Plugin {
    &PLUGIN.0
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn sizes_match_the_c_header() {
        // x86-64 sizes of the ABI 1.1 structs (tests/unit/test_examples.c
        // checks them against plugin.h through the host's loader too).
        assert_eq!(size_of::<Param>(), 112);
        assert_eq!(size_of::<Tool>(), 104);
        assert_eq!(size_of::<Plugin>(), 104);
    }
}
