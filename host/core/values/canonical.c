/* canonical.c - msgpack values re-encoded in one canonical form, so that
 * two argument maps that mean the same compare equal byte for byte.
 *
 * The form: map entries ordered by key (string keys by their bytes, memcmp
 * then shorter first, after every non-string key; non-string keys by their
 * own canonical encoding), recursively in every map and array; integers and
 * lengths in their shortest encoding (msgpack-c's packer picks it);
 * floats keep their width; entries with equal keys keep their order.
 *
 * Threads: any; no shared state.
 */
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "th/mpwalk.h"
#include "th/tool.h"

typedef struct centry {
    const msgpack_object_kv *kv;
    const char *kb; /* key bytes: the string, or its canonical encoding */
    size_t klen;
    int is_str;
    size_t idx;
    uint8_t *owned; /* the encoding of a non-string key, freed after */
} centry;

static int pack_canonical(msgpack_packer *pk, const msgpack_object *o);

static int centry_cmp(const void *a, const void *b)
{
    const centry *x = a, *y = b;
    if (x->is_str != y->is_str)
        return x->is_str ? 1 : -1;
    size_t m = x->klen < y->klen ? x->klen : y->klen;
    int c = m ? memcmp(x->kb, y->kb, m) : 0;
    if (c)
        return c;
    if (x->klen != y->klen)
        return x->klen < y->klen ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int pack_map(msgpack_packer *pk, const msgpack_object *o)
{
    uint32_t n = o->via.map.size;
    if (msgpack_pack_map(pk, n))
        return TH_ENOMEM;
    if (n == 0)
        return 0;
    centry *es = calloc(n, sizeof *es);
    if (!es)
        return TH_ENOMEM;
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        es[i].kv = kv;
        es[i].idx = i;
        if (kv->key.type == MSGPACK_OBJECT_STR) {
            es[i].is_str = 1;
            es[i].kb = kv->key.via.str.ptr;
            es[i].klen = kv->key.via.str.size;
        } else {
            th_buf kb = TH_BUF_INIT;
            msgpack_packer kpk;
            msgpack_packer_init(&kpk, &kb, th_buf_msgpack_write);
            if ((rc = pack_canonical(&kpk, &kv->key))) {
                th_buf_destroy(&kb);
                break;
            }
            es[i].owned = th_buf_take(&kb, &es[i].klen);
            es[i].kb = (const char *)es[i].owned;
        }
    }
    if (!rc) {
        qsort(es, n, sizeof *es, centry_cmp);
        for (uint32_t i = 0; i < n && !rc; i++) {
            rc = pack_canonical(pk, &es[i].kv->key);
            if (!rc)
                rc = pack_canonical(pk, &es[i].kv->val);
        }
    }
    for (uint32_t i = 0; i < n; i++)
        free(es[i].owned);
    free(es);
    return rc;
}

static int pack_canonical(msgpack_packer *pk, const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_MAP:
        return pack_map(pk, o);
    case MSGPACK_OBJECT_ARRAY:
        if (msgpack_pack_array(pk, o->via.array.size))
            return TH_ENOMEM;
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            int rc = pack_canonical(pk, &o->via.array.ptr[i]);
            if (rc)
                return rc;
        }
        return 0;
    default:
        /* msgpack_pack_object() writes integers, lengths and headers in
         * their shortest form. */
        return msgpack_pack_object(pk, *o) ? TH_ENOMEM : 0;
    }
}

int th_msgpack_canonical(const uint8_t *data, size_t len, th_buf *out)
{
    if (!data || len == 0)
        return TH_EINVAL;
    /* counts and nesting first: the unpacker allocates what headers say */
    if (th_mp_check(data, len, TH_MP_MAX_DEPTH, NULL, NULL) != 0)
        return TH_EINVAL;
    msgpack_zone zone;
    if (!msgpack_zone_init(&zone, 2048))
        return TH_ENOMEM;
    msgpack_object obj;
    size_t off = 0;
    int rc;
    msgpack_unpack_return ur =
        msgpack_unpack((const char *)data, len, &off, &zone, &obj);
    if (ur == MSGPACK_UNPACK_SUCCESS) {
        th_buf_reset(out);
        msgpack_packer pk;
        msgpack_packer_init(&pk, out, th_buf_msgpack_write);
        rc = pack_canonical(&pk, &obj);
    } else {
        rc = ur == MSGPACK_UNPACK_NOMEM_ERROR ? TH_ENOMEM : TH_EINVAL;
    }
    msgpack_zone_destroy(&zone);
    return rc;
}
