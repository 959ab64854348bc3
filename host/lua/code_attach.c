/* code_attach.c - plugs the Lua code runtime's run_code tool into a host
 * that was just opened: the one call a front makes (th_code_attach, after
 * th_host_open).  Part of the code runtime front (code_tool.c,
 * code_lua.c), which registers with the core through the built-in hooks
 * of th/host.h; the core never calls it. */
#include <stdlib.h>

#include "th/code.h"
#include "th/host.h"

static void free_slot(void *ud)
{
    th_code_builtin **slot = ud;
    th_code_builtin_free(*slot); /* NULL when no toolset enabled run_code */
    free(slot);
}

int th_code_attach(th_host *h, th_error *err)
{
    /* The hook first: once run_code is in the registry, its descriptor
     * must live until the host closes, whatever fails after. */
    th_code_builtin **slot = calloc(1, sizeof *slot);
    if (!slot)
        return th_error_set(err, TH_ENOMEM, "out of memory attaching run_code");
    int rc = th_host_at_close(h, free_slot, slot, err);
    if (rc) {
        free(slot);
        return rc;
    }
    return th_code_register(h, slot, err);
}
