/* mp_json.c - msgpack to jansson for the bundled plugins (mp_json.h). */
#include "mp_json.h"

static json_t *of(const msgpack_object *o, int depth);

static json_t *array_of(const msgpack_object *o, int depth)
{
    json_t *a = json_array();
    for (uint32_t i = 0; a && i < o->via.array.size; i++) {
        json_t *v = of(&o->via.array.ptr[i], depth + 1);
        if (!v || json_array_append_new(a, v) != 0) {
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

static json_t *map_of(const msgpack_object *o, int depth)
{
    json_t *m = json_object();
    for (uint32_t i = 0; m && i < o->via.map.size; i++) {
        const msgpack_object *k = &o->via.map.ptr[i].key;
        json_t *v = k->type == MSGPACK_OBJECT_STR
                        ? of(&o->via.map.ptr[i].val, depth + 1)
                        : NULL;
        if (!v ||
            json_object_setn_new(m, k->via.str.ptr, k->via.str.size, v) != 0) {
            json_decref(m);
            return NULL;
        }
    }
    return m;
}

static json_t *of(const msgpack_object *o, int depth)
{
    if (depth > MP_JSON_MAX_DEPTH)
        return NULL;
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        return json_null();
    case MSGPACK_OBJECT_BOOLEAN:
        return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        if (o->via.u64 > (uint64_t)INT64_MAX)
            return json_real((double)o->via.u64);
        return json_integer((json_int_t)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return json_integer((json_int_t)o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return json_real(o->via.f64);
    case MSGPACK_OBJECT_STR:
        return json_stringn(o->via.str.ptr, o->via.str.size);
    case MSGPACK_OBJECT_ARRAY:
        return array_of(o, depth);
    case MSGPACK_OBJECT_MAP:
        return map_of(o, depth);
    default:
        return NULL; /* bin, ext: not JSON */
    }
}

json_t *mp_json_parse(const uint8_t *data, size_t len)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    json_t *j = NULL;
    if (msgpack_unpack_next(&u, (const char *)data, len, &off) ==
        MSGPACK_UNPACK_SUCCESS)
        j = of(&u.data, 0);
    msgpack_unpacked_destroy(&u);
    return j;
}
