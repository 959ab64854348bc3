/* json.c - JSON <-> msgpack conversion at the edges (th/json.h). */
#include "th/json.h"
#include "th/mpwalk.h"
#include "th/utf8.h"

#include <math.h>
#include <msgpack.h>
#include <stdbool.h>
#include <string.h>

int th_json_pack(const json_t *j, msgpack_packer *pk)
{
    int rc = 0;
    switch (json_typeof(j)) {
    case JSON_NULL:
        rc = msgpack_pack_nil(pk);
        break;
    case JSON_TRUE:
        rc = msgpack_pack_true(pk);
        break;
    case JSON_FALSE:
        rc = msgpack_pack_false(pk);
        break;
    case JSON_INTEGER:
        rc = msgpack_pack_int64(pk, json_integer_value(j));
        break;
    case JSON_REAL:
        rc = msgpack_pack_double(pk, json_real_value(j));
        break;
    case JSON_STRING:
        rc = msgpack_pack_str_with_body(pk, json_string_value(j),
                                        json_string_length(j));
        break;
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        rc = msgpack_pack_array(pk, n);
        for (size_t i = 0; rc == 0 && i < n; i++)
            rc = th_json_pack(json_array_get(j, i), pk);
        break;
    }
    case JSON_OBJECT: {
        rc = msgpack_pack_map(pk, json_object_size(j));
        const char *k;
        size_t klen;
        json_t *v;
        json_object_keylen_foreach((json_t *)j, k, klen, v)
        {
            if (rc == 0)
                rc = msgpack_pack_str_with_body(pk, k, klen);
            if (rc == 0)
                rc = th_json_pack(v, pk);
        }
        break;
    }
    default:
        return TH_EINVAL;
    }
    return rc == 0 ? 0 : (rc < 0 && rc >= TH_EINTERNAL ? rc : TH_ENOMEM);
}

int th_json_to_msgpack(const json_t *j, th_buf *out)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, th_buf_msgpack_write);
    return th_json_pack(j, &pk);
}

/* A JSON string of bytes s[0..n): as they are when they are UTF-8;
 * otherwise refused (strict) or with every maximal ill-formed subpart
 * replaced by U+FFFD (lossy). */
static json_t *text_value(const char *s, size_t n, bool lossy,
                          const char *what, th_error *err)
{
    if (n == 0)
        s = ""; /* msgpack-c may leave the pointer of an empty str NULL */
    if (th_utf8_valid(s, n)) {
        json_t *j = json_stringn_nocheck(s, n);
        if (!j)
            th_error_set(err, TH_ENOMEM, "out of memory");
        return j;
    }
    if (!lossy) {
        th_error_set(err, TH_EINVAL, "%s is not UTF-8 text", what);
        return NULL;
    }
    th_buf b = TH_BUF_INIT;
    size_t i = 0, bad;
    int rc = 0;
    while (rc == 0 && i < n) {
        size_t l = th_utf8_seq((const unsigned char *)s + i, n - i, &bad);
        if (l) {
            rc = th_buf_append(&b, s + i, l);
            i += l;
        } else {
            rc = th_buf_append(&b, "\xEF\xBF\xBD", 3);
            i += bad;
        }
    }
    json_t *j = rc == 0 ? json_stringn_nocheck(b.data ? (const char *)b.data : "",
                                               b.len)
                        : NULL;
    th_buf_destroy(&b);
    if (!j)
        th_error_set(err, TH_ENOMEM, "out of memory");
    return j;
}

static json_t *from_object(const msgpack_object *o, bool lossy, th_error *err)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        return json_null();
    case MSGPACK_OBJECT_BOOLEAN:
        return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 > (uint64_t)INT64_MAX) {
            th_error_set(err, TH_EINVAL, "integer %llu is too large for JSON",
                         (unsigned long long)o->via.u64);
            return NULL;
        }
        return json_integer((json_int_t)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return json_integer((json_int_t)o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        if (!isfinite(o->via.f64)) {
            if (lossy)
                return json_null(); /* printing: say nothing rather than fail */
            th_error_set(err, TH_EINVAL,
                         "the number %g has no JSON form (NaN or infinity)",
                         o->via.f64);
            return NULL;
        }
        return json_real(o->via.f64);
    case MSGPACK_OBJECT_STR:
        return text_value(o->via.str.ptr, o->via.str.size, lossy, "a string",
                          err);
    case MSGPACK_OBJECT_BIN:
        return text_value(o->via.bin.ptr, o->via.bin.size, lossy,
                          "binary data", err);
    case MSGPACK_OBJECT_ARRAY: {
        json_t *a = json_array();
        if (!a)
            th_error_set(err, TH_ENOMEM, "out of memory");
        for (uint32_t i = 0; a && i < o->via.array.size; i++) {
            json_t *v = from_object(&o->via.array.ptr[i], lossy, err);
            if (!v || json_array_append_new(a, v) != 0) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    case MSGPACK_OBJECT_MAP: {
        json_t *m = json_object();
        if (!m)
            th_error_set(err, TH_ENOMEM, "out of memory");
        for (uint32_t i = 0; m && i < o->via.map.size; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;
            if (k->type != MSGPACK_OBJECT_STR && k->type != MSGPACK_OBJECT_BIN) {
                th_error_set(err, TH_EINVAL, "a map key is not a string");
                json_decref(m);
                return NULL;
            }
            /* str and bin share their layout (ptr, size) */
            json_t *key = text_value(k->via.str.ptr, k->via.str.size, lossy,
                                     "a map key", err);
            json_t *v = key ? from_object(&o->via.map.ptr[i].val, lossy, err)
                            : NULL;
            int rc = v ? json_object_setn_new_nocheck(
                             m, json_string_value(key), json_string_length(key),
                             v)
                       : -1;
            json_decref(key);
            if (rc != 0) {
                json_decref(m);
                return NULL;
            }
        }
        return m;
    }
    default:
        th_error_set(err, TH_EINVAL, "msgpack ext values have no JSON form");
        return NULL;
    }
}

json_t *th_json_from_object(const msgpack_object *o, th_error *err)
{
    return from_object(o, false, err);
}

json_t *th_json_from_object_lossy(const msgpack_object *o, th_error *err)
{
    return from_object(o, true, err);
}

static json_t *from_msgpack(const uint8_t *data, size_t len, bool lossy,
                            th_error *err)
{
    if (th_mp_check(data, len, TH_MP_MAX_DEPTH, NULL, err) != 0)
        return NULL;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    json_t *j = NULL;
    if (msgpack_unpack_next(&u, (const char *)data, len, &off) ==
        MSGPACK_UNPACK_SUCCESS)
        j = from_object(&u.data, lossy, err);
    else
        th_error_set(err, TH_EINVAL, "not a msgpack value");
    msgpack_unpacked_destroy(&u);
    return j;
}

json_t *th_json_from_msgpack_lossy(const uint8_t *data, size_t len,
                                   th_error *err)
{
    return from_msgpack(data, len, true, err);
}

json_t *th_json_from_msgpack(const uint8_t *data, size_t len, th_error *err)
{
    return from_msgpack(data, len, false, err);
}
