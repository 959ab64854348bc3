/* frame.c - msgpack-RPC frames: stream splitting, message shapes, builders. */
#include "th/mpwalk.h"
#include "front/rpc.h"

#include <stdlib.h>
#include <string.h>

#define READER_INITIAL (64 * 1024)

int th_rpc_reader_init(th_rpc_reader *r, size_t max_frame)
{
    memset(r, 0, sizeof *r);
    r->max_frame = max_frame ? max_frame : (size_t)16 << 20;
    if (!msgpack_unpacker_init(&r->up, READER_INITIAL))
        return TH_ENOMEM;
    return 0;
}

void th_rpc_reader_destroy(th_rpc_reader *r)
{
    if (!r->no_unpacker)
        msgpack_unpacker_destroy(&r->up);
}

int th_rpc_reader_space(th_rpc_reader *r, size_t want, char **buf,
                        size_t *cap)
{
    if (r->no_unpacker)
        return TH_ENOMEM;
    if (msgpack_unpacker_buffer_capacity(&r->up) < want &&
        !msgpack_unpacker_reserve_buffer(&r->up, want))
        return TH_ENOMEM;
    *buf = msgpack_unpacker_buffer(&r->up);
    *cap = msgpack_unpacker_buffer_capacity(&r->up);
    return 0;
}

void th_rpc_reader_commit(th_rpc_reader *r, size_t n)
{
    msgpack_unpacker_buffer_consumed(&r->up, n);
}

int th_rpc_reader_feed(th_rpc_reader *r, const void *data, size_t len)
{
    char *buf;
    size_t cap;
    int rc = th_rpc_reader_space(r, len, &buf, &cap);
    if (rc)
        return rc;
    memcpy(buf, data, len);
    th_rpc_reader_commit(r, len);
    return 0;
}

size_t th_rpc_reader_pending(const th_rpc_reader *r)
{
    return r->up.used - r->up.off;
}

size_t th_rpc_reader_footprint(const th_rpc_reader *r)
{
    return r->up.used + msgpack_unpacker_buffer_capacity(&r->up);
}

int th_rpc_reader_shrink(th_rpc_reader *r)
{
    if (r->failed || r->skim_started || th_rpc_reader_pending(r) != 0 ||
        th_rpc_reader_footprint(r) <= 2 * READER_INITIAL)
        return 0;
    /* Buffers still referenced by a message's zone are reference counted
     * by msgpack-c: destroying the unpacker only drops its own count. */
    msgpack_unpacker_destroy(&r->up);
    if (!msgpack_unpacker_init(&r->up, READER_INITIAL)) {
        /* (the unpacker cannot be built aside and moved: it points into
         * itself) */
        memset(&r->up, 0, sizeof r->up);
        r->failed = r->no_unpacker = true;
        return TH_ENOMEM;
    }
    return 0;
}

/* Walks the buffered bytes of the current frame, resuming where the last
 * walk stopped, without building anything.  1 with *frame_len when the
 * frame is complete, 0 when more bytes are needed, TH_EPROTO/TH_ELIMIT. */
static int skim(th_rpc_reader *r, const uint8_t *p, size_t n,
                size_t *frame_len, th_error *err)
{
    if (!r->skim_started) {
        r->skim_pos = 0;
        r->skim_left = 1;
        r->skim_values = 0;
        r->skim_started = true;
    }
    /* The most values a frame of max_frame bytes may hold. */
    uint64_t most = TH_RPC_FRAME_VALUES_FLOOR +
                    r->max_frame / TH_RPC_FRAME_VALUES_PER_BYTE_DIV;
    /* The walk's state in locals, stored back when it stops (every frame
     * passes here: the loop runs once per value). */
    size_t pos = r->skim_pos;
    uint64_t left = r->skim_left, values = r->skim_values;
    int rc = 1;
    while (left > 0) {
        th_mp_head h;
        int hr = pos < n ? th_mp_head_read(p + pos, n - pos, &h) : 0;
        if (hr == 0) {
            rc = 0;
            break;
        }
        if (hr < 0) {
            rc = th_error_set(err, TH_EPROTO,
                              "byte 0xc1 at offset %zu is not msgpack", pos);
            break;
        }
        uint64_t end = (uint64_t)pos + h.hdr + h.payload;
        /* Every value still to come takes at least one byte. */
        uint64_t more = left - 1 + h.kids;
        if (end + more > r->max_frame) {
            rc = th_error_set(err, TH_ELIMIT,
                              "frame larger than the maximum of %zu bytes",
                              r->max_frame);
            break;
        }
        if (end > n) {
            rc = 0;
            break;
        }
        pos = (size_t)end;
        left = more;
        if (++values > most) {
            rc = th_error_set(err, TH_ELIMIT,
                              "frame holds more than %llu values (at most "
                              "%u + 1 per %u bytes)",
                              (unsigned long long)most,
                              TH_RPC_FRAME_VALUES_FLOOR,
                              TH_RPC_FRAME_VALUES_PER_BYTE_DIV);
            break;
        }
    }
    r->skim_pos = pos;
    r->skim_left = left;
    r->skim_values = values;
    if (rc <= 0)
        return rc;
    uint64_t allowed = TH_RPC_FRAME_VALUES_FLOOR +
                       r->skim_pos / TH_RPC_FRAME_VALUES_PER_BYTE_DIV;
    if (r->skim_values > allowed)
        return th_error_set(err, TH_ELIMIT,
                            "frame of %zu bytes holds %llu values, more than "
                            "the %llu allowed (%u + 1 per %u bytes): it "
                            "would take %llu bytes unpacked",
                            r->skim_pos,
                            (unsigned long long)r->skim_values,
                            (unsigned long long)allowed,
                            TH_RPC_FRAME_VALUES_FLOOR,
                            TH_RPC_FRAME_VALUES_PER_BYTE_DIV,
                            (unsigned long long)r->skim_values *
                                sizeof(msgpack_object));
    *frame_len = r->skim_pos;
    r->skim_started = false;
    return 1;
}

int th_rpc_reader_next(th_rpc_reader *r, msgpack_unpacked *out, th_error *err)
{
    if (r->failed || r->no_unpacker)
        return th_error_set(err, TH_EPROTO, "the stream already failed");
    const uint8_t *p = (const uint8_t *)r->up.buffer + r->up.off;
    size_t n = r->up.used - r->up.off;
    size_t flen = 0;
    int rc = skim(r, p, n, &flen, err);
    if (rc <= 0) {
        if (rc < 0)
            r->failed = true;
        return rc;
    }
    /* The skim found the frame's end: build it in one call, in the zone
     * of *out, which is cleared and reused when the caller kept it (one
     * zone for every frame, not a new 8 KiB chunk each). */
    if (out->zone)
        msgpack_zone_clear(out->zone);
    else if (!(out->zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE)))
        return th_error_set(err, TH_ENOMEM, "out of memory");
    size_t used = 0;
    msgpack_unpack_return ur =
        msgpack_unpack((const char *)p, flen, &used, out->zone, &out->data);
    switch (ur) {
    case MSGPACK_UNPACK_SUCCESS:
        /* the objects refer to the buffer: it must not move or be reused
         * before the caller is done with them (see front/rpc.h) */
        r->up.off += used;
        r->frame = p;
        r->frame_len = used;
        return 1;
    case MSGPACK_UNPACK_NOMEM_ERROR:
        /* The skim bounded every count by the frame's bytes, so this is
         * the unpacker's nesting stack running out: the client's fault. */
        r->failed = true;
        return th_error_set(err, TH_EPROTO,
                            "frame nested deeper than %d levels",
                            TH_MP_MAX_DEPTH);
    default:
        r->failed = true;
        return th_error_set(err, TH_EPROTO,
                            "malformed msgpack in a frame of %zu bytes", flen);
    }
}

/* ---- Shapes ---------------------------------------------------------------- */

bool th_rpc_obj_str(const msgpack_object *o, const char **p, size_t *n)
{
    if (!o) /* th_rpc_map_get()'s "no such key", passed on */
        return false;
    if (o->type == MSGPACK_OBJECT_STR) {
        *p = o->via.str.ptr;
        *n = o->via.str.size;
        return true;
    }
    if (o->type == MSGPACK_OBJECT_BIN) {
        *p = o->via.bin.ptr;
        *n = o->via.bin.size;
        return true;
    }
    return false;
}

bool th_rpc_obj_streq(const msgpack_object *o, const char *s)
{
    const char *p;
    size_t n;
    return th_rpc_obj_str(o, &p, &n) && n == strlen(s) && memcmp(p, s, n) == 0;
}

const msgpack_object *th_rpc_map_get(const msgpack_object *map,
                                     const char *key)
{
    if (!map || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++)
        if (th_rpc_obj_streq(&map->via.map.ptr[i].key, key))
            return &map->via.map.ptr[i].val;
    return NULL;
}

const char *th_rpc_obj_kind(const msgpack_object *o)
{
    switch (o->type) {
    case MSGPACK_OBJECT_NIL: return "nil";
    case MSGPACK_OBJECT_BOOLEAN: return "a boolean";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: return "an integer";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: return "a float";
    case MSGPACK_OBJECT_STR: return "a string";
    case MSGPACK_OBJECT_BIN: return "binary";
    case MSGPACK_OBJECT_ARRAY: return "an array";
    case MSGPACK_OBJECT_MAP: return "a map";
    default: return "an extension";
    }
}

#define SHAPE_REQUEST "[0, msgid, method, params]"
#define SHAPE_RESPONSE "[1, msgid, error, result]"
#define SHAPE_NOTIFY "[2, method, params]"

int th_rpc_msg_parse(const msgpack_object *o, th_rpc_msg *m, bool *has_msgid,
                     th_error *err)
{
    memset(m, 0, sizeof *m);
    if (has_msgid)
        *has_msgid = false;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0)
        /* (short: a stream of such garbage is answered one notification
         * each) */
        return th_error_set(err, TH_EPROTO,
                            "a message is an array of 3 or 4 elements, got "
                            "%s%s",
                            th_rpc_obj_kind(o),
                            o->type == MSGPACK_OBJECT_ARRAY ? " (empty)" : "");
    const msgpack_object *a = o->via.array.ptr;
    uint32_t n = o->via.array.size;
    if (a[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER || a[0].via.u64 > 2)
        return th_error_set(err, TH_EPROTO,
                            "the message type (first element) must be 0 "
                            "(request), 1 (response) or 2 (notification)");
    m->kind = (int)a[0].via.u64;
    if (m->kind == TH_RPC_NOTIFY) {
        if (n != 3)
            return th_error_set(err, TH_EPROTO,
                                "a notification is " SHAPE_NOTIFY
                                ": 3 elements, got %u",
                                (unsigned)n);
        if (!th_rpc_obj_str(&a[1], &m->method, &m->method_len))
            return th_error_set(err, TH_EPROTO,
                                "a notification's method must be a string, "
                                "got %s",
                                th_rpc_obj_kind(&a[1]));
        if (a[2].type != MSGPACK_OBJECT_ARRAY)
            return th_error_set(err, TH_EPROTO,
                                "a notification's params must be an array, "
                                "got %s",
                                th_rpc_obj_kind(&a[2]));
        m->params = &a[2];
        return 0;
    }
    bool id_ok = n >= 2 && a[1].type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
                 a[1].via.u64 <= UINT32_MAX;
    if (id_ok)
        m->msgid = a[1].via.u64;
    /* A request's msgid is answered whatever else is wrong; a response is
     * never answered. */
    if (id_ok && m->kind == TH_RPC_REQUEST && has_msgid)
        *has_msgid = true;
    const char *shape =
        m->kind == TH_RPC_REQUEST ? SHAPE_REQUEST : SHAPE_RESPONSE;
    const char *what = m->kind == TH_RPC_REQUEST ? "request" : "response";
    if (n < 2)
        return th_error_set(err, TH_EPROTO, "a %s is %s: the msgid is missing",
                            what, shape);
    if (!id_ok)
        return th_error_set(err, TH_EPROTO,
                            "a %s is %s: the msgid must be an unsigned "
                            "32-bit integer, got %s",
                            what, shape,
                            a[1].type == MSGPACK_OBJECT_POSITIVE_INTEGER
                                ? "a larger one"
                                : th_rpc_obj_kind(&a[1]));
    if (m->kind == TH_RPC_REQUEST && n == 3 &&
        th_rpc_obj_str(&a[2], &m->method, &m->method_len))
        return th_error_set(err, TH_EPROTO,
                            "a request is " SHAPE_REQUEST
                            ": the params are missing (send [] for none)");
    if (n != 4)
        return th_error_set(err, TH_EPROTO, "a %s is %s: 4 elements, got %u",
                            what, shape, (unsigned)n);
    if (m->kind == TH_RPC_RESPONSE) {
        m->error = &a[2];
        m->result = &a[3];
        return 0;
    }
    if (!th_rpc_obj_str(&a[2], &m->method, &m->method_len))
        return th_error_set(err, TH_EPROTO,
                            "a request's method must be a string, got %s",
                            th_rpc_obj_kind(&a[2]));
    if (a[3].type != MSGPACK_OBJECT_ARRAY)
        return th_error_set(err, TH_EPROTO,
                            "a request's params must be an array, got %s",
                            th_rpc_obj_kind(&a[3]));
    m->params = &a[3];
    return 0;
}

/* ---- Builders -------------------------------------------------------------- */

static int pack_raw_or_nil(msgpack_packer *pk, th_buf *out, const uint8_t *v,
                           size_t len)
{
    if (!v || len == 0)
        return msgpack_pack_nil(pk) ? TH_ENOMEM : 0;
    return th_buf_append(out, v, len);
}


int th_rpc_pack_request(th_buf *out, uint64_t msgid, const char *method,
                        const uint8_t *params, size_t params_len)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, th_buf_msgpack_write);
    size_t mark = out->len;
    int rc = 0;
    if (msgpack_pack_array(&pk, 4) || msgpack_pack_uint64(&pk, 0) ||
        msgpack_pack_uint64(&pk, msgid) || th_pack_cstr(&pk, method))
        rc = TH_ENOMEM;
    if (!rc) {
        if (params && params_len)
            rc = th_buf_append(out, params, params_len);
        else
            rc = msgpack_pack_array(&pk, 0) ? TH_ENOMEM : 0;
    }
    if (rc)
        out->len = mark;
    return rc;
}

int th_rpc_pack_notify(th_buf *out, const char *method, const uint8_t *params,
                       size_t params_len)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, th_buf_msgpack_write);
    size_t mark = out->len;
    int rc = 0;
    if (msgpack_pack_array(&pk, 3) || msgpack_pack_uint64(&pk, 2) ||
        th_pack_cstr(&pk, method))
        rc = TH_ENOMEM;
    if (!rc) {
        if (params && params_len)
            rc = th_buf_append(out, params, params_len);
        else
            rc = msgpack_pack_array(&pk, 0) ? TH_ENOMEM : 0;
    }
    if (rc)
        out->len = mark;
    return rc;
}

int th_rpc_pack_response(th_buf *out, uint64_t msgid, const uint8_t *error,
                         size_t error_len, const uint8_t *result,
                         size_t result_len)
{
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, th_buf_msgpack_write);
    size_t mark = out->len;
    int rc = 0;
    if (msgpack_pack_array(&pk, 4) || msgpack_pack_uint64(&pk, 1) ||
        msgpack_pack_uint64(&pk, msgid))
        rc = TH_ENOMEM;
    if (!rc)
        rc = pack_raw_or_nil(&pk, out, error, error_len);
    if (!rc)
        rc = pack_raw_or_nil(&pk, out, result, result_len);
    if (rc)
        out->len = mark;
    return rc;
}

int th_rpc_pack_error(th_buf *out, uint64_t msgid, int code,
                      const char *message)
{
    th_buf e = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &e, th_buf_msgpack_write);
    int rc = 0;
    if (msgpack_pack_array(&pk, 2) || msgpack_pack_int(&pk, code) ||
        th_pack_cstr(&pk, message))
        rc = TH_ENOMEM;
    if (!rc)
        rc = th_rpc_pack_response(out, msgid, e.data, e.len, NULL, 0);
    th_buf_destroy(&e);
    return rc;
}

int th_rpc_parse_addr(const char *addr, const char **path, th_error *err)
{
    if (!addr || !*addr)
        return th_error_set(err, TH_EINVAL, "no listen address");
    if (strncmp(addr, "unix:", 5) == 0)
        addr += 5;
    else if (addr[0] != '/')
        return th_error_set(err, TH_EINVAL,
                            "listen address '%s': use unix:PATH", addr);
    if (!*addr)
        return th_error_set(err, TH_EINVAL, "listen address: empty path");
    if (strlen(addr) >= 108)
        return th_error_set(err, TH_EINVAL,
                            "socket path '%s' is longer than 107 bytes", addr);
    *path = addr;
    return 0;
}
