# pkgs.mk - the pkg-config names of the libraries the host links, one list
# for the Makefile, fuzz/fuzz.mk and the installed toolhost.pc.
PKGS := msgpack yaml-0.1 libuv jansson lua5.4 libpcre2-8 libmicrohttpd nettle \
	libseccomp
