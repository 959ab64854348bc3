/* nats_front.c - the NATS front's descriptor (th/front.h): its name, its
 * `nats:` section (nats_config.c) and the connection `toolhost serve`
 * opens, quiesces at the first stop signal and closes with the other
 * fronts (nats.c). */
#include "front/fronts.h"
#include "front/nats.h"
#include "front/nats_config.h"
#include "th/front.h"

static int nats_open(th_host *h, void **state, th_error *err)
{
    th_nats *f = NULL;
    int rc = th_nats_start(h, th_host_config(h), &f, err);
    *state = f;
    return rc;
}

static void nats_stop(void *state)
{
    th_nats_quiesce(state);
}

static void nats_close(void *state)
{
    th_nats_stop(state);
}

const th_front th_nats_front = {
    .name = "nats",
    .section = &th_nats_section,
    .open = nats_open,
    .stop = nats_stop,
    .close = nats_close,
};
