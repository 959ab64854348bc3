/* cage.c - the SDK's wrappers of the host's ABI 1.3 cages
 * (toolhost_host_api.cage_*; toolhost/sdk.h): they check that the host
 * has the members, so a plugin built for 1.3 runs on an older host and
 * goes on without a cage there. */
#include <stdio.h>

#include "toolhost/sdk.h"

toolhost_cage *th_sdk_cage_open(const toolhost_host_api *host,
                                const char *label, uint64_t memory_max,
                                char *why, size_t why_size)
{
    if (!TH_SDK_HOST_HAS(host, cage_open)) {
        if (why && why_size)
            snprintf(why, why_size, "the host gives no cages (ABI %u.%u)",
                     host ? host->abi_major : 0, host ? host->abi_minor : 0);
        return NULL;
    }
    /* a host that opens cages provides the rest; checked once, here */
    if (!host->cage_enter || !host->cage_kill || !host->cage_close ||
        !host->cage_placed) {
        if (why && why_size)
            snprintf(why, why_size, "the host's cage members are incomplete");
        return NULL;
    }
    return host->cage_open(host, label, memory_max, why, why_size);
}

/* (async-signal-safe: reads and one call) */
int th_sdk_cage_enter(const toolhost_host_api *host,
                      const toolhost_cage *cage)
{
    if (!cage || !TH_SDK_HOST_HAS(host, cage_enter))
        return TH_SDK_EINVAL;
    return host->cage_enter(cage);
}

void th_sdk_cage_placed(const toolhost_host_api *host, toolhost_cage *cage)
{
    if (cage && TH_SDK_HOST_HAS(host, cage_placed))
        host->cage_placed(cage);
}

int th_sdk_cage_kill(const toolhost_host_api *host, toolhost_cage *cage,
                     int64_t timeout_ms)
{
    if (!cage || !TH_SDK_HOST_HAS(host, cage_kill))
        return TH_SDK_EINVAL;
    return host->cage_kill(cage, timeout_ms);
}

void th_sdk_cage_close(const toolhost_host_api *host, toolhost_cage *cage)
{
    if (cage && TH_SDK_HOST_HAS(host, cage_close))
        host->cage_close(cage);
}
