# sdk/cxx/sdk.mk - the C++ SDK (sdk/cxx/toolhost.hpp): its examples and
# its install.  Included by the top Makefile (every sdk/*/sdk.mk).
#
# The header is used as <toolhost/toolhost.hpp>, as an installed one is:
# the build copies it to $(BUILD)/include/toolhost/.  The examples link
# the C SDK (libtoolhost-sdk.a, msgpack) and the version script
# sdk/toolhost-plugin.map, which exports toolhost_plugin_v1 alone (the
# std:: template instances the header uses stay local, so `toolhost check
# --strict` has no warning).

CXX_SDK_HPP := $(BUILD)/include/toolhost/toolhost.hpp
CXX_SDK_EXAMPLES := $(patsubst sdk/cxx/examples/%.cpp,$(BUILD)/examples/%.so,\
	$(sort $(wildcard sdk/cxx/examples/*.cpp)))
EXAMPLES_SO += $(CXX_SDK_EXAMPLES)
SDK_TEST_DEPS += $(CXX_SDK_EXAMPLES)

CXX_SDK_FLAGS = -std=c++17 -Wall -Wextra -Wpedantic -Werror $(OPT) -g $(SAN_FLAGS) \
	-fPIC -fvisibility=hidden -fvisibility-inlines-hidden \
	-I$(BUILD)/include -Iplugin-api -Isdk $(shell pkg-config --cflags msgpack 2>/dev/null)

$(CXX_SDK_HPP): sdk/cxx/toolhost.hpp
	@mkdir -p $(dir $@)
	cp $< $@.tmp && mv -f $@.tmp $@

# One C++ plugin from its source: temporary name, go-w, rename (what the
# template's Makefile does too), linked with the SDK's version script.
define CXX_SDK_LINK
	@mkdir -p $(dir $@)
	$(CXX) $(CXX_SDK_FLAGS) -shared -Wl,--no-undefined \
	  -Wl,--version-script=sdk/toolhost-plugin.map -o $@.tmp $< \
	  $(LIBSDK) $(shell pkg-config --libs msgpack 2>/dev/null) -lpthread
	chmod go-w $@.tmp
	mv -f $@.tmp $@
endef

$(CXX_SDK_EXAMPLES): $(BUILD)/examples/%.so: sdk/cxx/examples/%.cpp $(CXX_SDK_HPP) \
		$(LIBSDK) plugin-api/toolhost/plugin.h sdk/toolhost/sdk.h sdk/toolhost-plugin.map
	$(CXX_SDK_LINK)

# `make install` / `make uninstall` put / remove the header as
# PREFIX/include/toolhost/toolhost.hpp, and the README and examples in
# PREFIX/share/doc/toolhost/cxx/ (hooked here as prerequisites: they are
# removed before uninstall's recipe removes the folders left empty).
CXX_SDK_DOCS := sdk/cxx/README.md $(sort $(wildcard sdk/cxx/examples/*.cpp))
.PHONY: install-cxx uninstall-cxx
install: install-cxx
uninstall: uninstall-cxx
install-cxx:
	install -D -m 0644 sdk/cxx/toolhost.hpp $(DESTDIR)$(PREFIX)/include/toolhost/toolhost.hpp
	install -d $(DESTDIR)$(PREFIX)/share/doc/toolhost/cxx
	install -m 0644 $(CXX_SDK_DOCS) $(DESTDIR)$(PREFIX)/share/doc/toolhost/cxx/
uninstall-cxx:
	rm -f $(DESTDIR)$(PREFIX)/include/toolhost/toolhost.hpp
	rm -f $(addprefix $(DESTDIR)$(PREFIX)/share/doc/toolhost/cxx/,$(notdir $(CXX_SDK_DOCS)))
	-rmdir $(DESTDIR)$(PREFIX)/share/doc/toolhost/cxx 2>/dev/null

# A plugin that misbehaves at the SDK's boundary on purpose, for the
# sdk_cxx suite (tests/integration/test_sdk_cxx.c).
CXX_SDK_FIXTURES := $(BUILD)/sdk-cxx/cxx_boundary.so
SDK_TEST_DEPS += $(CXX_SDK_FIXTURES)
examples: $(CXX_SDK_FIXTURES)
$(CXX_SDK_FIXTURES): $(BUILD)/sdk-cxx/%.so: sdk/cxx/tests/%.cpp $(CXX_SDK_HPP) \
		$(LIBSDK) plugin-api/toolhost/plugin.h sdk/toolhost/sdk.h sdk/toolhost-plugin.map
	$(CXX_SDK_LINK)
