/* fronts.c - the fronts built into toolhost, registered in one place
 * (front/fronts.h).  Adding a front to toolhost is a line here and its
 * own folder; nothing in host/core changes. */
#include "front/fronts.h"

int th_fronts_register_builtin(void)
{
    static const th_front *const builtin[] = {
        &th_rpc_front, &th_mcp_front, &th_metrics_front, &th_nats_front};
    for (size_t i = 0; i < sizeof builtin / sizeof *builtin; i++) {
        int rc = th_front_register(builtin[i]);
        if (rc < 0)
            return rc;
    }
    return 0;
}
