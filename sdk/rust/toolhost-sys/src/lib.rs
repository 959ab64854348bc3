//! toolhost-sys - the raw toolhost plugin ABI (toolhost/plugin.h), as
//! bindgen generates it when this crate is built: the structs
//! (`toolhost_plugin`, `toolhost_tool`, `toolhost_param`, `toolhost_call`,
//! `toolhost_host_api`, ...) and the `TOOLHOST_*` constants, with the
//! names and layout of the C header.  Everything here is `unsafe` to use;
//! the `toolhost` crate is the safe layer.
#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case, dead_code)]
#![allow(clippy::all)]

include!(concat!(env!("OUT_DIR"), "/plugin.rs"));
