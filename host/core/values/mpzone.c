/* mpzone.c - a msgpack-c zone per thread, reused (th/mpzone.h). */
#include <pthread.h>

#include "th/mpzone.h"

#define ZONE_CHUNK 4096

static pthread_key_t zone_key;
static pthread_once_t zone_once = PTHREAD_ONCE_INIT;
static int zone_key_ok;
static _Thread_local msgpack_zone *tl_zone; /* this thread's, once made */
static _Thread_local int zone_busy;

static void zone_destroy(void *z)
{
    tl_zone = NULL;
    msgpack_zone_free(z);
}

static void zone_key_make(void)
{
    zone_key_ok = pthread_key_create(&zone_key, zone_destroy) == 0;
}

msgpack_zone *th_mp_zone_get(bool *cached)
{
    *cached = false;
    if (zone_busy)
        return msgpack_zone_new(ZONE_CHUNK);
    msgpack_zone *z = tl_zone;
    if (!z) {
        pthread_once(&zone_once, zone_key_make);
        if (!zone_key_ok)
            return msgpack_zone_new(ZONE_CHUNK);
        z = msgpack_zone_new(ZONE_CHUNK);
        if (!z)
            return NULL;
        if (pthread_setspecific(zone_key, z) != 0)
            return z; /* (not kept: freed by th_mp_zone_put) */
        tl_zone = z;
    }
    zone_busy = 1;
    *cached = true;
    return z;
}

void th_mp_zone_put(msgpack_zone *z, bool cached)
{
    if (cached) {
        msgpack_zone_clear(z);
        zone_busy = 0;
    } else {
        msgpack_zone_free(z);
    }
}
