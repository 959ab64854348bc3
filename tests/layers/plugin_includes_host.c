/* plugin_includes_host.c - a plugin that reaches for a host header.
 *
 * `make check-layers` compiles this file with the flags of a plugin and
 * expects the compiler to refuse it: plugins see only plugin-api/ and sdk/,
 * never the host's private API. */
#include "th/tool.h"
#include <toolhost/sdk.h>

int th_layers_probe(void);
int th_layers_probe(void) { return 0; }
