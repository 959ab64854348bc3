/* json.c - JSON <-> msgpack conversion at the edges (th/json.h). */
#include "th/json.h"

#include <msgpack.h>
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
        json_t *v;
        json_object_foreach((json_t *)j, k, v)
        {
            if (rc == 0)
                rc = msgpack_pack_str_with_body(pk, k, strlen(k));
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

static int utf8_valid(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3
                                 : (c >> 3) == 30 ? 4 : 0;
        if (len == 0 || i + len > n)
            return 0;
        for (size_t k = 1; k < len; k++)
            if (((unsigned char)s[i + k] >> 6) != 2)
                return 0;
        i += len;
    }
    return 1;
}

json_t *th_json_from_object(const msgpack_object *o, th_error *err)
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
        return json_real(o->via.f64);
    case MSGPACK_OBJECT_STR:
        return json_stringn_nocheck(o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_BIN:
        if (!utf8_valid(o->via.bin.ptr, o->via.bin.size)) {
            th_error_set(err, TH_EINVAL, "binary data is not UTF-8 text");
            return NULL;
        }
        return json_stringn_nocheck(o->via.bin.ptr, o->via.bin.size);
    case MSGPACK_OBJECT_ARRAY: {
        json_t *a = json_array();
        for (uint32_t i = 0; a && i < o->via.array.size; i++) {
            json_t *v = th_json_from_object(&o->via.array.ptr[i], err);
            if (!v || json_array_append_new(a, v) != 0) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    case MSGPACK_OBJECT_MAP: {
        json_t *m = json_object();
        for (uint32_t i = 0; m && i < o->via.map.size; i++) {
            const msgpack_object *k = &o->via.map.ptr[i].key;
            if (k->type != MSGPACK_OBJECT_STR && k->type != MSGPACK_OBJECT_BIN) {
                th_error_set(err, TH_EINVAL, "a map key is not a string");
                json_decref(m);
                return NULL;
            }
            json_t *v = th_json_from_object(&o->via.map.ptr[i].val, err);
            if (!v || json_object_setn_new_nocheck(m, k->via.str.ptr,
                                                   k->via.str.size, v) != 0) {
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

json_t *th_json_from_msgpack(const uint8_t *data, size_t len, th_error *err)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    json_t *j = NULL;
    if (msgpack_unpack_next(&u, (const char *)data, len, &off) ==
        MSGPACK_UNPACK_SUCCESS)
        j = th_json_from_object(&u.data, err);
    else
        th_error_set(err, TH_EINVAL, "not a msgpack value");
    msgpack_unpacked_destroy(&u);
    return j;
}
