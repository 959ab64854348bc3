# pkgs.mk - the pkg-config names of the libraries the host links, one list
# for the Makefile, fuzz/fuzz.mk and the installed toolhost.pc.
# libjwt-gnutls, gnutls and libcurl: the MCP HTTP front's OAuth tokens
# (host/mcp/oauth.c: signatures, JWK to PEM, the issuer's JWKS URL).
PKGS := msgpack yaml-0.1 libuv jansson yajl lua5.4 libpcre2-8 libmicrohttpd nettle \
	libseccomp libnats libjwt-gnutls gnutls libcurl
# The libraries the bundled plugins link: libcurl (GnuTLS flavour) for the
# HTTP tool sources.
PLUGIN_PKGS := libcurl
# libsystemd (optional): sd_notify, the watchdog, socket activation
# (host/front/sd.c); without it those are no-ops.
ifeq ($(shell pkg-config --exists libsystemd 2>/dev/null && echo y),y)
PKGS += libsystemd
SD_DEFS := -DTH_HAVE_SYSTEMD
endif
