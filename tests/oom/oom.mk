# tests/oom/oom.mk - the allocation-failure sweep (included by the Makefile).
#
#   make test-oom              every allocation point of every session
#                              (docs/security.md, "Allocation failures")
#   make test-oom OOM_MODE=smoke
#                              a sample of the points, under a minute
#
# The shim (tests/oom/failmalloc.c) is an LD_PRELOAD library that makes the
# Nth allocation of the toolhost process fail; it is built without
# sanitizers (ASan and valgrind bring their own allocator: the sweep and
# the oom suite skip there).  The integration runner's oom suite uses it
# too, so the runner waits for it.

OOM_SO := $(BUILD)/tests/oom/failmalloc.so
OOM_MODE ?= full

$(OOM_SO): tests/oom/failmalloc.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -O2 -g -fPIC -shared -o $@ $< -lpthread -ldl

# The full-disk shim (tests/oom/fullfs.c): writes under one folder fail
# with ENOSPC; the disk_full suite's way to a full disk without root.
FULLFS_SO := $(BUILD)/tests/oom/fullfs.so

$(FULLFS_SO): tests/oom/fullfs.c
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -D_GNU_SOURCE $(WARN) -O2 -g -fPIC -shared -o $@ $< -ldl

all: $(OOM_SO) $(FULLFS_SO)
$(INTEG_BIN): | $(OOM_SO) $(FULLFS_SO)

.PHONY: test-oom
test-oom: $(TOOLHOST) $(PLUGIN_SO) $(OOM_SO)
	@tests/oom/run-oom --$(OOM_MODE) $(BUILD)
