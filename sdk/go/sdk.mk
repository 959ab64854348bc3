# sdk/go/sdk.mk - the Go SDK (sdk/go/toolhost) and its examples, included
# by the top-level Makefile.  Debian's Go only (GO, default /usr/bin/go),
# in GOPATH mode on Debian's packages (/usr/share/gocode: the msgpack v5
# package) with the module proxy off; the build cache and the GOPATH that
# names the SDK live under $(BUILD)/go, nothing under $HOME.  Without Go
# nothing is built here: tests/integration/test_sdk_go.c reports the skip
# (a failure when CI=true).
#
#   build/examples/go_echo.so   plugin echo: the tool `echo`
#   build/examples/go_tools.so  plugin gotools: gotools_countdown (async,
#                               progress, cancel, completed from a
#                               goroutine), gotools_stats (constrained
#                               parameters, structured output)
#   build/fixtures/go_crash.so  plugin gocrash (sdk/go/testdata/crash): tools
#                               that crash, for the crash-reporting test
#   make install-go PREFIX=...  the SDK's sources into
#                               PREFIX/share/toolhost/go/src/toolhost
#                               (what `toolhost new --lang go` builds with);
#                               make uninstall-go PREFIX=... removes them
GO ?= /usr/bin/go
GOCODE ?= /usr/share/gocode
HAVE_GO := $(shell test -x '$(GO)' && test -d '$(GOCODE)/src/github.com/vmihailenco/msgpack/v5' && echo yes)

GO_SDK_DIR := sdk/go/toolhost
GO_SDK_FILES := $(sort $(wildcard $(GO_SDK_DIR)/*.go $(GO_SDK_DIR)/*.c \
	$(GO_SDK_DIR)/*.h)) $(GO_SDK_DIR)/toolhost.map $(GO_SDK_DIR)/go.mod
GO_WORK = $(abspath $(BUILD))/go
# Every variable the go command reads from the environment or from a
# file under $HOME is set: a build here never reaches the network and
# leaves nothing outside $(BUILD).  The plugin is linked with the SDK's
# version script: it exports toolhost_plugin_v1 and nothing else.
GO_ENV = GO111MODULE=off GOPATH='$(GO_WORK)/path:$(GOCODE)' \
	GOCACHE='$(SDK_CACHE)/go-cache' GOTMPDIR= GOENV=off GOPROXY=off GOFLAGS= \
	GONOSUMDB= GOSUMDB=off HOME='$(GO_WORK)/home' CGO_ENABLED=1 CC='$(CC)' \
	CGO_CFLAGS='-O2 -g -I$(abspath plugin-api)' CGO_LDFLAGS=
GO_BUILD_SO = -buildmode=c-shared -trimpath \
	-ldflags='-extldflags=-Wl,--version-script=$(abspath $(GO_SDK_DIR))/toolhost.map'

ifeq ($(HAVE_GO),yes)
EXAMPLES_SO += $(BUILD)/examples/go_echo.so $(BUILD)/examples/go_tools.so \
	$(BUILD)/fixtures/go_crash.so
SDK_TEST_DEPS += $(BUILD)/fixtures/go_crash.so
endif

# The SDK seen at its import path "toolhost" in GOPATH mode.
$(GO_WORK)/path/src/toolhost:
	@mkdir -p $(dir $@) $(GO_WORK)/home
	ln -sfn $(abspath $(GO_SDK_DIR)) $@

# Written to a temporary name and renamed (a watching host never loads a
# half-written object), not writable by group or others (the host
# refuses that).  go build also writes a C header beside it: not needed.
$(BUILD)/examples/go_%.so: $$(wildcard sdk/go/examples/$$*/*.go) $(GO_SDK_FILES) \
		plugin-api/toolhost/plugin.h sdk/go/sdk.mk | $(GO_WORK)/path/src/toolhost
	@mkdir -p $(dir $@)
	cd sdk/go/examples/$* && env $(GO_ENV) $(GO) build $(GO_BUILD_SO) \
	  -o '$(abspath $@).tmp' .
	rm -f '$(abspath $@).tmp.h' '$(basename $(abspath $@)).h'
	chmod go-w $@.tmp
	mv -f $@.tmp $@

$(BUILD)/fixtures/go_crash.so: $(wildcard sdk/go/testdata/crash/*.go) \
		$(GO_SDK_FILES) plugin-api/toolhost/plugin.h sdk/go/sdk.mk \
		| $(GO_WORK)/path/src/toolhost
	@mkdir -p $(dir $@)
	cd sdk/go/testdata/crash && env $(GO_ENV) $(GO) build $(GO_BUILD_SO) \
	  -o '$(abspath $@).tmp' .
	rm -f '$(abspath $@).tmp.h'
	chmod go-w $@.tmp
	mv -f $@.tmp $@

GO_INSTALL_DIR = $(DESTDIR)$(PREFIX)/share/toolhost/go/src/toolhost
.PHONY: install-go uninstall-go
# hooked as prerequisites: removed before uninstall's recipe removes the
# folders left empty
install: install-go
uninstall: uninstall-go
install-go:
	install -d '$(GO_INSTALL_DIR)'
	install -m 0644 $(GO_SDK_FILES) '$(GO_INSTALL_DIR)/'
uninstall-go:
	rm -f $(addprefix '$(GO_INSTALL_DIR)'/,$(notdir $(GO_SDK_FILES)))
	for d in '$(GO_INSTALL_DIR)' '$(DESTDIR)$(PREFIX)/share/toolhost/go/src' \
	  '$(DESTDIR)$(PREFIX)/share/toolhost/go'; do \
	  if [ -d "$$d" ]; then rmdir "$$d" 2>/dev/null || true; fi; \
	done
