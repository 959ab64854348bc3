/* host_config.c - the host's current config and its swap.
 *
 * The host holds one reference to its current config (h->cfg); every call
 * holds one to the config it started under (th_mcall.cfg) until it ends.
 * A reload swaps h->cfg and drops the host's reference: the old config is
 * freed when the last call that started under it ends, not kept until
 * the host closes.
 *
 * cfg_mu makes "read h->cfg, take a reference" one step against the swap
 * (without it the swap could drop the last reference between the two).
 * It is taken alone, never with another lock. */
#include <pthread.h>

#include "manager.h"

static pthread_mutex_t cfg_mu = PTHREAD_MUTEX_INITIALIZER;

th_config *th_host_config_get(th_host *h)
{
    pthread_mutex_lock(&cfg_mu);
    th_config *c = th_config_ref(__atomic_load_n(&h->cfg, __ATOMIC_ACQUIRE));
    pthread_mutex_unlock(&cfg_mu);
    return c;
}

void th_host_config_swap(th_host *h, th_config *nc)
{
    pthread_mutex_lock(&cfg_mu);
    th_config *oc = h->cfg;
    __atomic_store_n(&h->cfg, nc, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&cfg_mu);
    th_config_unref(oc);
}
