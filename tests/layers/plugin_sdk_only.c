/* plugin_sdk_only.c - the control for plugin_includes_host.c: the same
 * flags compile a file that uses only the ABI and the SDK. */
#include <toolhost/plugin.h>
#include <toolhost/sdk.h>

int th_layers_probe(void);
int th_layers_probe(void) { return TOOLHOST_OK; }
