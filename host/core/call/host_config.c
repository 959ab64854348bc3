/* host_config.c - the host's current config and its swap.
 *
 * The host holds one reference to its current config (h->cfg); every call
 * holds one to the config it started under (th_mcall.cfg) until it ends.
 * A reload swaps h->cfg and drops the host's reference: the old config is
 * freed when the last call that started under it ends, not kept until
 * the host closes.
 *
 * "Read h->cfg, take a reference" must be one step against the swap
 * (else the swap could drop the last reference between the two).  A
 * reader makes it one with its thread's hazard slot (hazard.h): it
 * publishes the pointer, checks h->cfg still holds it, takes its
 * reference and clears the slot; the swap stores the new config, waits
 * until no slot holds the old one, then drops the host's reference.  No
 * lock on the reader's side; an idle thread holds nothing.
 *
 * cfg_mu serializes swaps, and covers the readers of a thread that could
 * not get a hazard record (out of memory): they read and take their
 * reference under it, and the swap stores under it.  It is taken alone,
 * never with another lock. */
#include <pthread.h>

#include "base/hazard.h"
#include "manager.h"

static pthread_mutex_t cfg_mu = PTHREAD_MUTEX_INITIALIZER;

th_config *th_host_config_get(th_host *h)
{
    th_hz_rec *r = th_hz_mine();
    if (__builtin_expect(r != NULL, 1)) {
        th_config *c = th_hz_protect(r, TH_HZ_CONFIG, &h->cfg);
        th_config_ref(c);
        th_hz_clear(r, TH_HZ_CONFIG);
        return c;
    }
    pthread_mutex_lock(&cfg_mu);
    th_config *c = th_config_ref(__atomic_load_n(&h->cfg, __ATOMIC_ACQUIRE));
    pthread_mutex_unlock(&cfg_mu);
    return c;
}

void th_host_config_swap(th_host *h, th_config *nc)
{
    pthread_mutex_lock(&cfg_mu);
    th_config *oc = h->cfg;
    __atomic_store_n(&h->cfg, nc, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&cfg_mu);
    th_hz_wait(TH_HZ_CONFIG, oc); /* a reader between its read and its ref */
    th_config_unref(oc);
}
