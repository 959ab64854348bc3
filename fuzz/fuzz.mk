# fuzz/fuzz.mk - builds the libFuzzer targets (called by scripts/run-fuzz).
#
# Every fuzz/NAME.c becomes $(FUZZ_BUILD)/NAME, built with clang and
# -fsanitize=fuzzer,address,undefined.  The host library sources it needs
# are compiled here again with clang and the same sanitizers (the gcc
# objects under build/ are not used): host/*/*.c except the CLI go into
# $(FUZZ_BUILD)/libtoolhost-fuzz.a, from which the linker takes only what a
# target calls.  No target needs CLI code: parsers of outside input live in
# the core (the key=value typing is host/core/config/kvargs.c).

MAKEFLAGS += -r
.SECONDARY:
.SUFFIXES:

FUZZ_BUILD ?= build/fuzz
CLANG ?= clang
VERSION := 0.1.0
include scripts/pkgs.mk
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(PKGS) 2>/dev/null)

SAN := -fsanitize=address,undefined -fno-sanitize-recover=all \
	-fno-omit-frame-pointer
BASE := -DTH_BUILD_DIR='"$(abspath build)"' -std=c11 -D_GNU_SOURCE -O1 -g $(SAN) -Iplugin-api -Isdk \
	-Ihost/include -Ifuzz $(PKG_CFLAGS) -DTOOLHOST_VERSION='"$(VERSION)"'
# Other modules' code is compiled with warnings shown but not fatal: it is
# -Werror clean under gcc, and a clang-only warning must not stop fuzzing.
HOST_CFLAGS := $(BASE) -Wall -Wextra -fsanitize=fuzzer-no-link
# Targets, like the unit tests, may see the core's private headers.
TARGET_CFLAGS := $(BASE) -Ihost/core -Wall -Wextra -Werror -fsanitize=fuzzer-no-link

HOST_SRC := $(sort $(filter-out host/cli/%,$(wildcard host/*/*.c host/core/*/*.c)))
TARGET_SRC := $(sort $(wildcard fuzz/*.c))
TARGETS := $(patsubst fuzz/%.c,$(FUZZ_BUILD)/%,$(TARGET_SRC))

HOST_OBJ := $(patsubst %.c,$(FUZZ_BUILD)/obj/%.o,$(HOST_SRC))
LIB := $(FUZZ_BUILD)/libtoolhost-fuzz.a

.PHONY: all
all: $(TARGETS)

-include $(shell find $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)

# a core file includes a lower room's private header as "room/x.h"
$(FUZZ_BUILD)/obj/host/core/%.o: CORE_INC := -Ihost/core
$(FUZZ_BUILD)/obj/host/%.o: host/%.c
	@mkdir -p $(dir $@)
	@echo "  CLANG $<"
	@$(CLANG) $(HOST_CFLAGS) $(CORE_INC) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/obj/fuzz/%.o: fuzz/%.c
	@mkdir -p $(dir $@)
	@echo "  CLANG $<"
	@$(CLANG) $(TARGET_CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(HOST_OBJ)
	@mkdir -p $(dir $@)
	@rm -f $@ && ar rcs $@ $^

# The openapi target includes the plugin's sources, which use libcurl.
$(FUZZ_BUILD)/openapi: PKG_LIBS += $(shell pkg-config --libs libcurl 2>/dev/null)
$(FUZZ_BUILD)/obj/fuzz/openapi.o: TARGET_CFLAGS += -Iplugins/openapi

$(FUZZ_BUILD)/%: $(FUZZ_BUILD)/obj/fuzz/%.o $(LIB)
	@echo "  LINK  $@"
	@$(CLANG) -fsanitize=fuzzer $(SAN) -o $@ $< $(LIB) $(PKG_LIBS) -lpthread -ldl -lm
