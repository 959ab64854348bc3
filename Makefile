# toolhost - build, test, bench, fuzz, install.
#
#   make                 build everything into build/
#   make run             install missing packages, build what running needs
#                        (toolhost, plugins, SDK; -j nproc), run the host on
#                        configs/default.yaml
#   make test            install missing packages, build, run every suite,
#                        again under ASan+UBSan, the manager suites under
#                        TSan, and the integration suite under valgrind
#   make check           run the unit and integration suites of this build
#   make fn-shape        list the host's functions over 100 lines or complexity 30
#   make bench | fuzz | install PREFIX=... | uninstall PREFIX=... | clean
#   make deb             a Debian package in build/ (debhelper)
#   SANITIZER=address|undefined|thread (or a comma list) builds into
#   build/san-<list>/ with those sanitizers.

MAKEFLAGS += -r
.SUFFIXES:

comma := ,
empty :=
space := $(empty) $(empty)

SANITIZER ?=
ifneq ($(strip $(SANITIZER)),)
  SAN_LIST := $(subst $(comma),$(space),$(SANITIZER))
  SAN_BAD := $(filter-out address undefined thread,$(SAN_LIST))
  ifneq ($(SAN_BAD),)
    $(error SANITIZER: unknown value '$(SAN_BAD)' (use address, undefined, thread, or a comma list such as address,undefined))
  endif
  ifneq ($(filter thread,$(SAN_LIST)),)
    ifneq ($(filter address,$(SAN_LIST)),)
      $(error SANITIZER: thread and address cannot be combined)
    endif
  endif
  SAN_FLAGS := -fsanitize=$(SANITIZER) -fno-omit-frame-pointer -fno-sanitize-recover=all
  BUILD ?= build/san-$(subst $(space),-,$(SAN_LIST))
  OPT ?= -O1
else
  SAN_FLAGS :=
  BUILD ?= build
  OPT ?= -O2
endif

PREFIX ?= /usr/local
CC ?= cc
CXX ?= c++
VERSION := 0.1.0

include scripts/pkgs.mk
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null) $(SD_DEFS)
PKG_LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
PLUGIN_PKG_CFLAGS = $(shell pkg-config --cflags $(PLUGIN_PKGS) 2>/dev/null)
PLUGIN_PKG_LIBS = $(shell pkg-config --libs $(PLUGIN_PKGS) 2>/dev/null)

# -Wno-missing-field-initializers: the ABI structs grow by appending members
# (plugin.h); a table written for an older minor, positionally, leaves the new
# members zero, which is exactly what they mean.
WARN := -Wall -Wextra -Werror -Wno-missing-field-initializers
# Physical layers (docs/architecture.md): the host, the CLI, tests and
# benchmarks see the host's API headers (host/include: th/ the core's,
# front/ the fronts'); the core's private headers sit beside its sources in
# its rooms, host/core/<room>/, which only the core itself and the
# white-box tests and fuzz targets (-Ihost/core: "room/x.h") see; the SDK, the bundled plugins and the fixture
# plugins see only the ABI and the SDK (plugin-api, sdk), so a plugin that
# includes a th/ header does not compile.
# GCC on x86-64 zeroes a block of 128 bytes or more (a struct cleared, a
# memset of a constant or variable size) with `rep stos`, whose start-up
# alone takes ~19 ns on the machines of bench/README.md, where vector
# stores take 3-6 ns for 176-304 bytes: up to 256 bytes, vector stores;
# above, the C library's memset.  Worth ~30 ns of an inline call of ~265
# (bench/README.md, "Ninth pass").  Empty for compilers or targets without
# the option: they keep their own choice.
STRINGOP_OPT := -mmemset-strategy=vector_loop:256:noalign,libcall:-1:noalign
STRINGOP := $(shell $(CC) $(STRINGOP_OPT) -x c -c -o /dev/null /dev/null 2>/dev/null && echo '$(STRINGOP_OPT)')
# Link-time optimization of the host, the SDK and the bundled plugins: the
# call path crosses a dozen files (call_start.c, manager.c, call.c, stats.c,
# out.c, ...) and GCC inlines across them only at link time: ~25 ns of an
# inline call of ~260 and ~40 of th_call_sync's ~320 on the machines of
# bench/README.md ("Tenth pass, link-time optimization").  Not for sanitizer
# builds (their own -O1) nor the tests' and benchmarks' own objects (they
# link the optimized library as a program would).  Fat objects: the
# installed archives also hold plain machine code, so a program or plugin
# linked without -flto (any compiler), or with clang's, links them as
# before; linked with another GCC major version's -flto, GCC refuses the
# archives' LTO sections (build toolhost with `LTO=` for that).
# `make LTO=` turns it off.
LTO_OPT := -flto=auto -ffat-lto-objects
ifeq ($(SANITIZER),)
  LTO ?= $(shell $(CC) $(LTO_OPT) -x c -c -o /dev/null /dev/null 2>/dev/null && echo '$(LTO_OPT)')
else
  LTO :=
endif
CFLAGS_BASE = -std=c11 -D_GNU_SOURCE $(WARN) $(OPT) $(STRINGOP) -g $(SAN_FLAGS) \
	$(PKG_CFLAGS) -DTOOLHOST_VERSION='"$(VERSION)"' $(CFLAGS)
CFLAGS_ALL = $(CFLAGS_BASE) -Iplugin-api -Isdk -Ihost/include
CFLAGS_PLUGIN = $(CFLAGS_BASE) $(PLUGIN_PKG_CFLAGS) -Iplugin-api -Isdk -fPIC -fvisibility=hidden
LDFLAGS_ALL = $(SAN_FLAGS) $(LTO) $(LDFLAGS)
LIBS_ALL = $(PKG_LIBS) -lpthread -ldl -lm

# ---- sources -------------------------------------------------------------

# The core's sources sit in its rooms, host/core/<room>/ (host/core/ROOMS).
HOST_SRC := $(sort $(filter-out host/cli/%,$(wildcard host/*/*.c host/core/*/*.c)))
CLI_SRC := $(sort $(wildcard host/cli/*.c))
SDK_SRC := $(sort $(wildcard sdk/*.c))
# plugins/shared/ is not a plugin: code the bundled plugins share (msgpack
# to JSON for mcp and openapi), linked into each of them.
PLUGINS := $(filter-out shared,$(sort $(notdir $(patsubst %/,%,$(dir $(wildcard plugins/*/*.c))))))
PLUGIN_SHARED_SRC := $(sort $(wildcard plugins/shared/*.c))
FIX_C := $(sort $(wildcard tests/fixtures/*.c))
FIX_CXX := $(sort $(wildcard tests/fixtures/*.cpp))
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
INTEG_SRC := $(sort $(wildcard tests/integration/test_*.c))
TCOMMON_SRC := $(sort $(wildcard tests/common/*.c) $(wildcard tests/fronts/*.c))
BENCH_SRC := $(sort $(wildcard bench/*.c))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))

HOST_OBJ := $(call obj,$(HOST_SRC))
CORE_OBJ := $(filter $(BUILD)/obj/host/core/%,$(HOST_OBJ))
CLI_OBJ := $(call obj,$(CLI_SRC)) $(BUILD)/obj/gen/template.o
# (what a template built in place leaves - cargo's target/, an .so, a
# go cache, dot files - is not part of it)
TEMPLATE_FILES := $(sort $(shell find sdk/template -type f ! -path '*/target/*' \
	! -name '*.so' ! -name '*.so.*' ! -name '.*'))
SDK_OBJ := $(call obj,$(SDK_SRC))
TCOMMON_OBJ := $(call obj,$(TCOMMON_SRC))

LIBTH := $(BUILD)/libtoolhost.a
LIBSDK := $(BUILD)/libtoolhost-sdk.a
TOOLHOST := $(BUILD)/toolhost
PLUGIN_SO := $(patsubst %,$(BUILD)/plugins/%.so,$(PLUGINS))
FIX_SO := $(patsubst tests/fixtures/%.c,$(BUILD)/fixtures/%.so,$(FIX_C)) \
	$(patsubst tests/fixtures/%.cpp,$(BUILD)/fixtures/%.so,$(FIX_CXX))
UNIT_BIN := $(BUILD)/tests/unit-tests
INTEG_BIN := $(BUILD)/tests/integration-tests
PETSTORE_BIN := $(BUILD)/tests/petstore
BENCH_BIN := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))

TEST_DEFS = -Ihost/core -DTH_BUILD_DIR='"$(abspath $(BUILD))"' -DTH_SOURCE_DIR='"$(abspath .)"' -Itests \
	-DTH_SANITIZER='"$(SANITIZER)"' -DTH_SDK_CACHE='"$(SDK_CACHE)"'

.PHONY: all examples deps run deb test test-stress check check-unit check-integration check-parallel unit-build check-tsan soak check-layers layers-graph fn-shape \
	valgrind bench fuzz fuzz-long fuzz-replay install uninstall clean
.DEFAULT_GOAL := all

all: $(TOOLHOST) $(LIBSDK) $(PLUGIN_SO) $(FIX_SO) $(UNIT_BIN) $(INTEG_BIN) $(PETSTORE_BIN) examples

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# ---- compile rules ---------------------------------------------------------

# Host, CLI and tests: position-dependent code, full warnings.  A core
# file includes a private header of its own room by its name ("manager.h"
# beside call/manager.c) and one of a room below as "room/x.h"
# (-Ihost/core, for the core's objects only: a front sees no private
# header; host/core/ROOMS).
$(BUILD)/obj/host/core/%.o: CORE_INC := -Ihost/core
$(BUILD)/obj/host/%.o: host/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(CORE_INC) $(LTO) -MMD -MP -c $< -o $@

# SDK and plugins go into shared objects: PIC, hidden symbols.
$(BUILD)/obj/sdk/%.o: sdk/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_PLUGIN) $(LTO) -MMD -MP -c $< -o $@

$(BUILD)/obj/plugins/%.o: plugins/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_PLUGIN) $(LTO) -MMD -MP -c $< -o $@

$(BUILD)/obj/tests/fixtures/%.o: tests/fixtures/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_PLUGIN) -MMD -MP -c $< -o $@

# Fixtures of the ABI 1.0 era: built against the frozen 1.0 header.
$(BUILD)/obj/tests/fixtures/abi10_%.o: tests/fixtures/abi10_%.c tests/abi10/toolhost/plugin.h
	@mkdir -p $(dir $@)
	$(CC) -Itests/abi10 $(CFLAGS_PLUGIN) -MMD -MP -c $< -o $@

# A fixture of the ABI 1.2 era: built against the frozen 1.2 header.
$(BUILD)/obj/tests/fixtures/abi12f_%.o: tests/fixtures/abi12f_%.c tests/abi12/toolhost/plugin.h
	@mkdir -p $(dir $@)
	$(CC) -Itests/abi12 $(CFLAGS_PLUGIN) -MMD -MP -c $< -o $@

# A fixture of the ABI 1.3 era: built against the frozen 1.3 header.
$(BUILD)/obj/tests/fixtures/abi13f_%.o: tests/fixtures/abi13f_%.c tests/abi13/toolhost/plugin.h
	@mkdir -p $(dir $@)
	$(CC) -Itests/abi13 $(CFLAGS_PLUGIN) -MMD -MP -c $< -o $@

# A fixture of the ABI 1.4 era: built against the frozen 1.4 header.
$(BUILD)/obj/tests/fixtures/abi14f_%.o: tests/fixtures/abi14f_%.c tests/abi14/toolhost/plugin.h
	@mkdir -p $(dir $@)
	$(CC) -Itests/abi14 $(CFLAGS_PLUGIN) -MMD -MP -c $< -o $@

$(BUILD)/obj/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(TEST_DEFS) -MMD -MP -c $< -o $@

$(BUILD)/obj/bench/%.o: bench/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(TEST_DEFS) -MMD -MP -c $< -o $@

# The plugin template that `toolhost new` writes, embedded in the binary.
$(BUILD)/gen/template.c: $(TEMPLATE_FILES) scripts/embed-files
	@mkdir -p $(dir $@)
	EMBED_ROOT=sdk/template scripts/embed-files $@ th_plugin_template $(TEMPLATE_FILES)

$(BUILD)/obj/gen/template.o: $(BUILD)/gen/template.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -c $< -o $@

# ---- libraries and programs -------------------------------------------------

$(LIBTH): $(HOST_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(LIBSDK): $(SDK_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# No -rdynamic: the binary exports nothing a plugin could bind to.
$(TOOLHOST): $(CLI_OBJ) $(LIBTH)
	$(CC) $(LDFLAGS_ALL) -o $@ $(CLI_OBJ) $(LIBTH) $(LIBS_ALL)

.SECONDARY:
.SECONDEXPANSION:
$(BUILD)/plugins/%.so: $$(call obj,$$(wildcard plugins/%/*.c)) $(call obj,$(PLUGIN_SHARED_SRC)) $(LIBSDK)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -shared -fvisibility=hidden -o $@ $(filter %.o,$^) $(LIBSDK) $(PKG_LIBS) $(PLUGIN_PKG_LIBS)

$(BUILD)/fixtures/%.so: $(BUILD)/obj/tests/fixtures/%.o $(LIBSDK)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -shared -fvisibility=hidden -o $@ $< $(LIBSDK) $(PKG_LIBS) -lpthread

$(BUILD)/fixtures/%.so: tests/fixtures/%.cpp plugin-api/toolhost/plugin.h
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -Wall -Wextra -Werror -Wno-missing-field-initializers $(OPT) -g $(SAN_FLAGS) -Iplugin-api -fPIC -fvisibility=hidden -shared -o $@ $<

# Examples in other languages (sdk/examples/): C++17 against the SDK.
# The Rust ones are the Rust SDK's (sdk/rust/sdk.mk).
EXAMPLES_SO := $(BUILD)/examples/cxx_stats.so
# Each SDK beyond C keeps its build rules in sdk/<lang>/sdk.mk: it adds its
# examples to EXAMPLES_SO (and its tests' needs to SDK_TEST_DEPS).
# SDK_CACHE: the plain build's folder, where every build (plain or a
# sanitizer's) keeps the Rust and Go compilers' caches: their code is not
# instrumented, so one compile serves all builds (cargo locks its target
# folder, go its cache, so builds side by side are safe).
SDK_TEST_DEPS :=
SDK_CACHE := $(abspath $(firstword $(subst /san-, ,$(BUILD))))
include $(sort $(wildcard sdk/*/sdk.mk))
examples: $(EXAMPLES_SO)

# The C++ one links with the SDK's version script (sdk/toolhost-plugin.map):
# only the entry symbol is exported, not libstdc++'s template instances.
$(BUILD)/examples/cxx_stats.so: sdk/examples/cxx/cxx_stats.cpp $(LIBSDK) plugin-api/toolhost/plugin.h sdk/toolhost/sdk.h sdk/toolhost-plugin.map
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -Wall -Wextra -Werror -Wno-missing-field-initializers $(OPT) -g $(SAN_FLAGS) \
	  -Iplugin-api -Isdk $(shell pkg-config --cflags msgpack 2>/dev/null) -fPIC -fvisibility=hidden -shared \
	  -Wl,--version-script=sdk/toolhost-plugin.map \
	  -o $@ $< $(LIBSDK) $(shell pkg-config --libs msgpack 2>/dev/null)

# Test runners: every tests/<kind>/test_NAME.c defines th_suite_NAME().
$(BUILD)/gen/%_suites.h: $$(sort $$(wildcard tests/%/test_*.c))
	@mkdir -p $(dir $@)
	@{ for f in $^; do n=$$(basename $$f .c); echo "TH_SUITE($${n#test_})"; done; } > $@.tmp && mv $@.tmp $@

$(BUILD)/obj/tests/runner-%.o: tests/runner.c $(BUILD)/gen/%_suites.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(TEST_DEFS) -DTH_SUITES_H='"$(abspath $(BUILD))/gen/$*_suites.h"' -DTH_RUNNER_KIND='"$*"' -MMD -MP -c $< -o $@

$(UNIT_BIN): $(BUILD)/obj/tests/runner-unit.o $(call obj,$(UNIT_SRC)) $(TCOMMON_OBJ) $(LIBTH) $(LIBSDK)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(LIBTH) $(LIBSDK) $(LIBS_ALL) -lcunit

$(INTEG_BIN): $(BUILD)/obj/tests/runner-integration.o $(call obj,$(INTEG_SRC)) $(TCOMMON_OBJ) $(LIBTH) $(LIBSDK) | $(TOOLHOST) $(PLUGIN_SO) $(FIX_SO) $(PETSTORE_BIN)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(LIBTH) $(LIBSDK) $(LIBS_ALL) -lcunit

# The test pet store as a program, for docs/gateway.md's worked example.
$(PETSTORE_BIN): $(BUILD)/obj/tests/tools/petstore.o $(BUILD)/obj/tests/common/petstore.o
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $^ $(LIBS_ALL)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIBTH) | $(TOOLHOST) $(PLUGIN_SO)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS_ALL) -o $@ $< $(LIBTH) $(LIBS_ALL)
# The OpenAPI bench makes the same request directly with libcurl (the
# floor): it links what the bundled plugins link.
$(BUILD)/bench/openapi: LIBS_ALL += $(PLUGIN_PKG_LIBS)

# ---- the two commands -------------------------------------------------------

deps:
	@scripts/install-deps

# `make run` builds only what running needs (the binary, the bundled
# plugins, the SDK; no test runner, fixture or example), on every core.
NPROC := $(shell nproc 2>/dev/null || echo 2)
run: deps
	@$(MAKE) --no-print-directory -j$(NPROC) $(TOOLHOST) $(PLUGIN_SO) $(LIBSDK)
	@scripts/run-default $(BUILD)

# `make deb`: a Debian package of toolhost, built with debhelper from
# configs/debian/ (copied into $(BUILD)/deb/, so the source tree keeps its
# fixed layout); the .deb lands in $(BUILD)/.  scripts/deb has the steps.
deb:
	@scripts/deb $(BUILD) $(VERSION)

test: deps
	@scripts/run-tests

# The suites beside a CPU hog of 2 x cores busy processes (scripts/run-stress):
# STRESS_RUNS plain runs (default 10), then ASan+UBSan, TSan and valgrind
# once each; a table of each test's passes.  STRESS_LOOP="N suite:test ..."
# loops those tests instead; STRESS_MAKE_TEST=N runs the whole `make test`
# N times beside the hog.
STRESS_RUNS ?= 10
test-stress: deps
	@STRESS_RUNS=$(STRESS_RUNS) scripts/run-stress $(if $(STRESS_LOOP),--loop $(STRESS_LOOP),$(if $(STRESS_MAKE_TEST),--make-test $(STRESS_MAKE_TEST)))

# ---- suites -------------------------------------------------------------------

# TEST_JOBS=N (what `make test` sets, N = the cores + 1): every suite of the
# unit and integration runners in a runner process of its own, N at a time
# (scripts/run-suites; the suites in SLOW_SUITES start first: the longest
# under valgrind or in the normal run, measured).  The suites
# wait on sleeps, timeouts and child processes more than they compute, so
# three at a time on two cores take little more than half the time.  Without
# TEST_JOBS, or with SUITES=..., one runner per kind as before.
TEST_JOBS ?=
SLOW_SUITES ?= deb cli exec cli_perm isolation nats_fleet mcp_source nats rpc mcp_http manager code mcp check_child rpc_limits \
	hostile_input sdk_cxx mcp_http_limits iso_init_tools openapi mcp_oauth mcp_source_oauth
# Suites that must run first, alone (scripts/run-suites): none.  The NATS
# suites once did; they now wait on events with budgets scaled by
# th_test_ms() and run beside the others (20 of 20 beside rpc and a hog).
ALONE_SUITES ?=
RUN_SUITES = TH_SLOW_SUITES='$(SLOW_SUITES)' TH_ALONE_SUITES='$(ALONE_SUITES)' scripts/run-suites -j $(TEST_JOBS)
PARALLEL := $(if $(strip $(TEST_JOBS)),$(if $(strip $(SUITES)),,yes))

check: $(if $(PARALLEL),check-parallel,check-unit check-integration) check-layers

check-parallel: $(UNIT_BIN) $(INTEG_BIN) $(PLUGIN_SO) $(FIX_SO) $(TOOLHOST)
	$(RUN_SUITES) $(INTEG_BIN) $(UNIT_BIN)

# The layers hold (docs/architecture.md): a plugin cannot include a host
# header; the binary exports no symbol a plugin could bind to; the fronts
# include no private core header and the core no front header (nor libuv);
# the core's objects have no call cycle (LAYERS_CYCLE_KNOWN is empty:
# any cycle fails; the call layer's files call*.c count as one object,
# scripts/layers-graph); and the core's rooms (host/core/ROOMS) neither
# include a private header of a room above (scripts/check-includes) nor
# call one (scripts/layers-graph -r, on the objects' symbols); each check
# is itself run on a tree that breaks it (tests/layers/includes,
# tests/layers/rooms).
LAYERS_CYCLE_KNOWN ?=
check-layers: $(TOOLHOST)
	@scripts/check-includes
	@out=$$(scripts/check-includes tests/layers/includes 2>&1) && { \
	  echo "check-layers: scripts/check-includes passed tests/layers/includes, which breaks every rule" >&2; exit 1; }; \
	  for why in 'a front includes a private' 'a front reaches into' 'the core includes a front' \
	             'the core uses libuv' "the core's API" 'the core names the code runtime'; do \
	    echo "$$out" | grep -q "$$why" || { echo "check-layers: check-includes missed: $$why" >&2; exit 1; }; done; \
	  for f in th/code.h th/projection.h; do \
	    echo "$$out" | grep -q "host/core/c.c:.*$$f.*the core names the code runtime" || { echo "check-layers: check-includes missed the core including $$f" >&2; exit 1; }; done; \
	  for d in cli front http lua mcp nats rpc; do \
	    echo "$$out" | grep -q "host/$$d/.*a front includes a private" || { echo "check-layers: check-includes missed a private core header included from host/$$d" >&2; exit 1; }; done; \
	  echo "$$out" | grep -q 'host/core/low/up.c:.*a room includes a private header of a room above it' || { \
	    echo "check-layers: check-includes missed a room including the header of a room above it" >&2; exit 1; }; \
	  echo "$$out" | grep -q 'host/core/a.c  <- a core file outside the rooms' || { \
	    echo "check-layers: check-includes missed a core file outside the rooms" >&2; exit 1; }; \
	  if echo "$$out" | grep -q 'host/core/high/'; then \
	    echo "check-layers: check-includes refused a room including its own or a lower room's header" >&2; exit 1; fi
	@scripts/layers-graph -k '$(LAYERS_CYCLE_KNOWN)' $(CORE_OBJ) >/dev/null
	@scripts/layers-graph -r host/core/ROOMS $(CORE_OBJ)
	@mkdir -p $(BUILD)/layers/rooms/low $(BUILD)/layers/rooms/high
	@$(CC) -std=c11 $(WARN) -c tests/layers/rooms/low/low.c -o $(BUILD)/layers/rooms/low/low.o
	@$(CC) -std=c11 $(WARN) -c tests/layers/rooms/high/high.c -o $(BUILD)/layers/rooms/high/high.o
	@out=$$(scripts/layers-graph -r tests/layers/rooms/ROOMS $(BUILD)/layers/rooms/low/low.o \
	    $(BUILD)/layers/rooms/high/high.o 2>&1) && { \
	  echo "check-layers: scripts/layers-graph -r passed tests/layers/rooms, whose low room calls the high one" >&2; exit 1; }; \
	  echo "$$out" | grep -q 'low/low -> high/high calls upward' || { \
	    echo "check-layers: layers-graph -r missed the upward call of tests/layers/rooms: $$out" >&2; exit 1; }; \
	  if echo "$$out" | grep -q 'high/high -> low/low'; then \
	    echo "check-layers: layers-graph -r refused a downward call (tests/layers/rooms)" >&2; exit 1; fi
	@$(CC) $(CFLAGS_PLUGIN) -fsyntax-only tests/layers/plugin_sdk_only.c
	@if $(CC) $(CFLAGS_PLUGIN) -fsyntax-only tests/layers/plugin_includes_host.c 2>/dev/null; then \
	  echo "check-layers: a plugin compiled with a host header (th/tool.h)" >&2; exit 1; fi
	@n=$$(nm -D --defined-only $(TOOLHOST) | awk '$$2 ~ /^[TDB]$$/ && $$3 ~ /^th_/' | wc -l); \
	  if [ "$$n" -ne 0 ]; then echo "check-layers: $(TOOLHOST) exports $$n th_* symbols" >&2; exit 1; fi
	@echo "check-layers: plugins see only plugin-api/ and sdk/; $(TOOLHOST) exports no th_* symbol"

# The host's functions over 100 lines or over cyclomatic complexity 30
# (pmccabe, traditional McCabe), the call path's marked (scripts/fn-shape).
# Not part of `make test`.
fn-shape:
	@scripts/fn-shape

# The call graph between the core's objects and its cycles
# (docs/architecture.md).
layers-graph: $(LIBTH)
	@scripts/layers-graph $(CORE_OBJ)

# What the unit suites need (check-tsan builds only this: no integration
# runner, no examples).
unit-build: $(UNIT_BIN) $(PLUGIN_SO) $(FIX_SO) $(TOOLHOST)

check-unit: unit-build
	$(UNIT_BIN) $(SUITES)

check-integration: $(INTEG_BIN)
	$(INTEG_BIN) $(SUITES)

# Issue 14's isolation soak at full size: the real `toolhost serve`, an
# isolated plugin that crashes every 11th call, 8 clients over the Unix
# socket, 10,000 crashing + 100,000 good calls; every good answer checked,
# the host's RSS flat, no worker or zombie left (docs/isolation.md,
# "Soak").  Then the mixed soak: 10,000 good calls from 8 clients among
# calls of a plugin that misbehaves in 18 ways (iso_soak:mixed, needs
# root).  `make check` runs both at SOAK_SCALE=10 (a tenth).
SOAK_SCALE ?= 100
soak: $(INTEG_BIN)
	TH_SOAK_SCALE=$(SOAK_SCALE) $(INTEG_BIN) isolation:soak iso_soak:mixed

# The manager and reload suites under ThreadSanitizer.
TSAN_SUITES ?= manager host registry validate rpc_frame code code_host e2e_output reload abi11 contract
check-tsan:
	@$(MAKE) --no-print-directory SANITIZER=thread unit-build
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	  $(if $(PARALLEL),TH_RUN_SUITES='$(TSAN_SUITES)' $(RUN_SUITES)) build/san-thread/tests/unit-tests $(if $(PARALLEL),,$(TSAN_SUITES))

VALGRIND := valgrind --quiet --error-exitcode=99 --leak-check=full \
	--show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible \
	--track-fds=no --suppressions=tests/valgrind.supp
valgrind: $(INTEG_BIN)
	TH_VALGRIND="$(VALGRIND)" $(if $(PARALLEL),TH_RUN_WRAP="$(VALGRIND)" $(RUN_SUITES),$(VALGRIND)) $(INTEG_BIN) $(SUITES)

bench: all $(BENCH_BIN)
	@scripts/run-bench $(BUILD) $(BENCH_BIN) bench/mcp/bench-mcp bench/mcp/bench-mcp-source

FUZZ_SECONDS ?= 30
fuzz: deps
	@scripts/run-fuzz run $(FUZZ_SECONDS)

# Every target to FUZZ_LONG_EXECS executions (default 10M) or
# FUZZ_LONG_SECONDS (default 600) each, whichever comes first, and a table
# of the figures (scripts/run-fuzz long; fuzz/README.md).
fuzz-long: deps
	@scripts/run-fuzz long

# Replays the seed corpora and every past crash through the fuzz targets
# (no fuzzing): what `make test` runs so regressions stay caught.
fuzz-replay:
	@scripts/run-fuzz replay

# The allocation-failure sweep, make test-oom (tests/oom/oom.mk).
include tests/oom/oom.mk

# ---- install --------------------------------------------------------------------

# What `make install PREFIX=...` puts where (DESTDIR is prepended to all):
#   bin/toolhost
#   include/toolhost/plugin.h, sdk.h               the plugin ABI and SDK
#   include/toolhost/host/front/rpc.h, th/*.h       the RPC client API
#   lib/libtoolhost-sdk.a, lib/libtoolhost.a        SDK; host + RPC client
#   lib/pkgconfig/toolhost-plugin.pc, toolhost.pc
#   lib/toolhost/plugins/*.so                       the bundled plugins
#   share/man/man1/toolhost.1, man5/toolhost.yaml.5
#   share/doc/toolhost/                             README, guides, example
#   share/toolhost/systemd/toolhost.service, .socket (ExecStart set to
#                                                   PREFIX/bin/toolhost)
#   share/toolhost/toolhost-plugin.map              version script (C++)
# `make uninstall PREFIX=...` removes exactly these files, and the folders
# that are toolhost's own once they are empty.
RPC_FRONT_HEADERS := host/include/front/rpc.h
RPC_HEADERS := host/include/th/buf.h \
	host/include/th/err.h host/include/th/host.h host/include/th/config.h \
	host/include/th/tool.h
DOC_FILES := README.md sdk/AUTHORING.md $(sort $(wildcard docs/*.md)) \
	configs/example.yaml
MAN1 := docs/man/toolhost.1
MAN5 := docs/man/toolhost.yaml.5
UNITS := configs/systemd/toolhost.service configs/systemd/toolhost.socket
I := $(DESTDIR)$(PREFIX)

install: $(TOOLHOST) $(LIBSDK) $(LIBTH) $(PLUGIN_SO)
	@if [ -z "$(SD_DEFS)" ]; then \
	  echo "install: WARNING: built without libsystemd: the Type=notify unit in share/toolhost/systemd/" >&2; \
	  echo "install: WARNING: will never report READY=1 and socket activation will not work;" >&2; \
	  echo "install: WARNING: install libsystemd-dev (scripts/install-deps does) and rebuild" >&2; fi
	install -d $(I)/bin $(I)/include/toolhost/host/th $(I)/include/toolhost/host/front \
	  $(I)/lib/pkgconfig $(I)/lib/toolhost/plugins \
	  $(I)/share/man/man1 $(I)/share/man/man5 $(I)/share/doc/toolhost/template \
	  $(I)/share/toolhost/systemd
	install -m 0755 $(TOOLHOST) $(I)/bin/toolhost
	install -m 0644 plugin-api/toolhost/plugin.h sdk/toolhost/sdk.h \
	  sdk/toolhost/testing.h $(I)/include/toolhost/
	install -m 0644 $(RPC_HEADERS) $(I)/include/toolhost/host/th/
	install -m 0644 $(RPC_FRONT_HEADERS) $(I)/include/toolhost/host/front/
	install -m 0644 $(LIBSDK) $(LIBTH) $(I)/lib/
	install -m 0755 $(PLUGIN_SO) $(I)/lib/toolhost/plugins/
	for pc in toolhost-plugin toolhost-testing; do \
	  sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' \
	    -e 's|@SANLIBS@|$(SAN_FLAGS)|g' \
	    sdk/$$pc.pc.in > $(I)/lib/pkgconfig/$$pc.pc || exit 1; \
	done
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' \
	  -e 's|@REQUIRES@|$(PKGS)|g' \
	  host/toolhost.pc.in > $(I)/lib/pkgconfig/toolhost.pc
	install -m 0644 $(MAN1) $(I)/share/man/man1/
	install -m 0644 $(MAN5) $(I)/share/man/man5/
	install -m 0644 $(DOC_FILES) $(I)/share/doc/toolhost/
	for f in $(TEMPLATE_FILES); do \
	  install -D -m 0644 $$f $(I)/share/doc/toolhost/template/$${f#sdk/template/} || exit 1; \
	done
	install -m 0644 sdk/toolhost-plugin.map $(I)/share/toolhost/
	for u in $(UNITS); do \
	  sed -e 's|/usr/local/bin/toolhost|$(PREFIX)/bin/toolhost|g' $$u \
	    > $(I)/share/toolhost/systemd/$$(basename $$u) && \
	  chmod 0644 $(I)/share/toolhost/systemd/$$(basename $$u) || exit 1; \
	done

uninstall:
	rm -f $(I)/bin/toolhost
	rm -f $(I)/include/toolhost/plugin.h $(I)/include/toolhost/sdk.h \
	  $(I)/include/toolhost/testing.h
	rm -f $(addprefix $(I)/include/toolhost/host/th/,$(notdir $(RPC_HEADERS)))
	rm -f $(addprefix $(I)/include/toolhost/host/front/,$(notdir $(RPC_FRONT_HEADERS)))
	rm -f $(I)/lib/libtoolhost-sdk.a $(I)/lib/libtoolhost.a
	rm -f $(addprefix $(I)/lib/toolhost/plugins/,$(notdir $(PLUGIN_SO)))
	rm -f $(I)/lib/pkgconfig/toolhost-plugin.pc $(I)/lib/pkgconfig/toolhost.pc \
	  $(I)/lib/pkgconfig/toolhost-testing.pc
	rm -f $(I)/share/man/man1/toolhost.1 $(I)/share/man/man5/toolhost.yaml.5
	rm -f $(addprefix $(I)/share/doc/toolhost/,$(notdir $(DOC_FILES)))
	rm -f $(addprefix $(I)/share/doc/toolhost/template/,$(patsubst sdk/template/%,%,$(TEMPLATE_FILES)))
	for d in $$(printf '%s\n' $(filter-out .,$(patsubst sdk/template/%,%,$(dir $(TEMPLATE_FILES)))) | sort -ru); do \
	  rmdir $(I)/share/doc/toolhost/template/$$d 2>/dev/null || true; \
	done
	rm -f $(addprefix $(I)/share/toolhost/systemd/,$(notdir $(UNITS)))
	rm -f $(I)/share/toolhost/toolhost-plugin.map
	for d in include/toolhost/host/th include/toolhost/host/front \
	  include/toolhost/host include/toolhost \
	  lib/toolhost/plugins lib/toolhost share/doc/toolhost/template share/doc/toolhost \
	  share/toolhost/systemd share/toolhost; do \
	  if [ -d $(I)/$$d ]; then rmdir $(I)/$$d 2>/dev/null || \
	    echo "uninstall: $(I)/$$d is not empty: left in place" >&2; fi; \
	done

clean:
	rm -rf build
