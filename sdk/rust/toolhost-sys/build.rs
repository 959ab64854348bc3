//! build.rs - generates the raw bindings of toolhost/plugin.h with the
//! `bindgen` program (Debian's `bindgen` package) at every build where
//! the header changed, so they never drift from the ABI.
//!
//! The header is the first of:
//!   $TOOLHOST_PLUGIN_H                        (a path to plugin.h)
//!   ../../../plugin-api/toolhost/plugin.h     (this crate in the toolhost tree)
//!   ../../../../include/toolhost/plugin.h     (installed: PREFIX/share/toolhost/rust/toolhost-sys)
//! The program is $BINDGEN, else `bindgen` on the PATH.
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

fn header() -> PathBuf {
    if let Some(h) = env::var_os("TOOLHOST_PLUGIN_H") {
        return PathBuf::from(h);
    }
    let dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let tree = dir.join("../../../plugin-api/toolhost/plugin.h");
    let installed = dir.join("../../../../include/toolhost/plugin.h");
    for h in [tree, installed] {
        if h.is_file() {
            return h;
        }
    }
    panic!(
        "toolhost-sys: cannot find toolhost/plugin.h next to {} (in the toolhost \
         tree or an installed prefix): set TOOLHOST_PLUGIN_H to its path",
        dir.display()
    );
}

fn main() {
    println!("cargo:rerun-if-env-changed=TOOLHOST_PLUGIN_H");
    println!("cargo:rerun-if-env-changed=BINDGEN");
    println!("cargo:rerun-if-changed=build.rs");
    let h = header();
    println!("cargo:rerun-if-changed={}", h.display());
    // -I: the folder that holds toolhost/ (the header includes only
    // <stddef.h> and <stdint.h>, but a tool would say <toolhost/...>).
    let inc = h.parent().and_then(Path::parent).unwrap_or_else(|| Path::new("."));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("plugin.rs");
    let bindgen = env::var_os("BINDGEN").unwrap_or_else(|| "bindgen".into());
    let status = Command::new(&bindgen)
        .arg(&h)
        .args(["--allowlist-type", "toolhost_.*"])
        .args(["--allowlist-var", "TOOLHOST_.*"])
        .arg("--size_t-is-usize")
        .arg("--no-doc-comments")
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(format!("-I{}", inc.display()))
        .status()
        .unwrap_or_else(|e| {
            panic!(
                "toolhost-sys: cannot run {:?} ({}): install bindgen (Debian: \
                 apt-get install bindgen) or set BINDGEN to its path",
                bindgen, e
            )
        });
    if !status.success() {
        panic!("toolhost-sys: {:?} failed on {} ({})", bindgen, h.display(), status);
    }
}
