# sdk/rust/sdk.mk - the Rust SDK (sdk/rust/, README.md there): the
# examples `make examples` builds, and `install-rust`, which installs the
# crates' sources for plugins built elsewhere (the rust template).
#
# Built with Debian's toolchain only (/usr/bin/cargo, /usr/bin/rustc,
# /usr/bin/bindgen: a rustc found first on the PATH is not used), offline,
# with crates-io replaced by Debian's crates in /usr/share/cargo/registry;
# cargo's home and target folders are under $(BUILD), so nothing depends
# on the user's home and `make clean` removes them.  The crates are not
# instrumented in a sanitizer build: the .so they make is loaded into the
# instrumented host as any plugin is.  A missing piece builds nothing
# here; the sdk_rust suite then says why (a failure with CI=true).
RUST_CARGO ?= /usr/bin/cargo
RUST_RUSTC ?= /usr/bin/rustc
RUST_BINDGEN ?= /usr/bin/bindgen
RUST_REGISTRY ?= /usr/share/cargo/registry
# The crates the SDK and its examples use (Debian's librust-*-dev).
RUST_CRATES := libc rmp rmp-serde serde serde_derive serde_json syn quote proc-macro2
RUST_MISSING := $(strip \
	$(foreach p,$(RUST_CARGO) $(RUST_RUSTC) $(RUST_BINDGEN),$(if $(shell test -x $(p) && echo y),,$(p))) \
	$(foreach c,$(RUST_CRATES),$(if $(wildcard $(RUST_REGISTRY)/$(c)-[0-9]*),,crate:$(c))))

RUST_TARGET := $(SDK_CACHE)/rust
RUST_ENV := CARGO_HOME=$(SDK_CACHE)/cargo-home CARGO_TARGET_DIR=$(RUST_TARGET) \
	RUSTC=$(RUST_RUSTC) RUSTDOC=$(dir $(RUST_RUSTC))rustdoc BINDGEN=$(RUST_BINDGEN) \
	RUSTFLAGS= CARGO_BUILD_RUSTFLAGS=
RUST_CARGO_FLAGS := --offline --release \
	--config 'source.crates-io.replace-with="toolhost-debian"' \
	--config 'source.toolhost-debian.directory="$(RUST_REGISTRY)"'
RUST_EXAMPLES := echo async constrained
RUST_SRC := $(shell find sdk/rust -path sdk/rust/target -prune -o \( -name '*.rs' -o -name Cargo.toml \) -print 2>/dev/null)

# Why the Rust examples are not built ("" when they are), for the tests.
$(BUILD)/examples/rust.missing: FORCE_RUST
	@mkdir -p $(dir $@)
	@printf '%s\n' '$(RUST_MISSING)' > $@.tmp && \
	  { cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@; }
.PHONY: FORCE_RUST
examples: $(BUILD)/examples/rust.missing

ifeq ($(RUST_MISSING),)
EXAMPLES_SO += $(patsubst %,$(BUILD)/examples/rust_%.so,$(RUST_EXAMPLES))

# One cargo run builds every example (cargo takes make's job slots: +).
$(RUST_TARGET)/release/examples.stamp: $(RUST_SRC) plugin-api/toolhost/plugin.h sdk/rust/sdk.mk
	@mkdir -p $(dir $@)
	+$(RUST_ENV) $(RUST_CARGO) build $(RUST_CARGO_FLAGS) \
	  --manifest-path sdk/rust/Cargo.toml $(patsubst %,-p rust_%,$(RUST_EXAMPLES))
	touch $@

# Temporary name, chmod go-w (the host refuses a plugin others may
# write), rename: a host watching the file never sees half of it.
$(BUILD)/examples/rust_%.so: $(RUST_TARGET)/release/examples.stamp
	@mkdir -p $(dir $@)
	cp $(RUST_TARGET)/release/librust_$*.so $@.tmp
	chmod go-w $@.tmp
	mv -f $@.tmp $@
endif

# install-rust: the crates' sources in PREFIX/share/toolhost/rust/, where
# the rust template's Makefile finds them (its toolhost-sdk link); the
# installed toolhost-sys generates its bindings from
# PREFIX/include/toolhost/plugin.h.  uninstall-rust removes them.
RUST_INSTALL_CRATES := toolhost toolhost-sys toolhost-macros
RUST_INSTALL_FILES := README.md $(sort $(foreach c,$(RUST_INSTALL_CRATES),\
	$(patsubst sdk/rust/%,%,$(wildcard sdk/rust/$(c)/Cargo.toml sdk/rust/$(c)/build.rs sdk/rust/$(c)/src/*.rs))))
install-rust:
	for f in $(RUST_INSTALL_FILES); do \
	  install -D -m 0644 sdk/rust/$$f $(DESTDIR)$(PREFIX)/share/toolhost/rust/$$f || exit 1; \
	done

uninstall-rust:
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/share/toolhost/rust/,$(RUST_INSTALL_FILES))
	for d in $(addprefix $(DESTDIR)$(PREFIX)/share/toolhost/rust/,$(addsuffix /src,$(RUST_INSTALL_CRATES)) $(RUST_INSTALL_CRATES)) \
	  $(DESTDIR)$(PREFIX)/share/toolhost/rust; do \
	  rmdir $$d 2>/dev/null || true; \
	done

install: install-rust
uninstall: uninstall-rust

# Cargo writes the lock file of the workspace beside it (the versions of
# the registry it built from; not kept in the tree: sdk/rust/.gitignore).
clean: clean-rust
clean-rust:
	rm -f sdk/rust/Cargo.lock

.PHONY: install-rust uninstall-rust clean-rust
