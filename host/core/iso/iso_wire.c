/* iso_wire.c - frames and descriptor packing between the host and its
 * plugin worker processes (see iso_wire.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "iso_wire.h"
#include "th/content.h"

int th_iso_sendv(int fd, const struct iovec *parts, int n, size_t max)
{
    size_t len = 0;
    bool over = false;
    if (max == 0 || max > ISO_MAX_FRAME)
        max = ISO_MAX_FRAME;
    for (int i = 0; i < n; i++) {
        over |= parts[i].iov_len > max - len;
        if (!over)
            len += parts[i].iov_len;
    }
    if (over || n > 7) {
        errno = EMSGSIZE;
        return -1;
    }
    uint8_t hdr[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16),
                      (uint8_t)(len >> 8), (uint8_t)len};
    struct iovec iov[8];
    iov[0].iov_base = hdr;
    iov[0].iov_len = 4;
    for (int i = 0; i < n; i++)
        iov[i + 1] = parts[i];
    /* One sendmsg() for the length and the body; a short send goes on
     * from where it stopped. */
    struct iovec *v = iov;
    int nv = n + 1;
    while (nv) {
        struct msghdr mh = {.msg_iov = v, .msg_iovlen = (size_t)nv};
        /* A socket: a dead peer is EPIPE, never SIGPIPE. */
        ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -1;
        size_t k = (size_t)w;
        while (nv && k >= v->iov_len) {
            k -= v->iov_len;
            v++;
            nv--;
        }
        if (nv) {
            v->iov_base = (uint8_t *)v->iov_base + k;
            v->iov_len -= k;
        }
    }
    return 0;
}

int th_iso_send(int fd, const void *data, size_t len, size_t max)
{
    struct iovec one = {(void *)data, len};
    return th_iso_sendv(fd, &one, 1, max);
}

static size_t rx_max(const th_iso_rx *rx)
{
    return rx->max && rx->max < ISO_MAX_FRAME ? rx->max : ISO_MAX_FRAME;
}

/* The length the header at rx->off declares (4 bytes are there). */
static size_t rx_declared(const th_iso_rx *rx)
{
    const uint8_t *h = rx->b.data + rx->off;
    return ((size_t)h[0] << 24) | ((size_t)h[1] << 16) | ((size_t)h[2] << 8) |
           h[3];
}

int th_iso_rx_fill(th_iso_rx *rx, int fd)
{
    size_t have = rx->b.len - rx->off;
    /* The frame under way, when its header is in and its length allowed:
     * the buffer grows once to hold it whole, not by doubling to twice
     * its size. */
    size_t whole = have >= 4 && rx_declared(rx) <= rx_max(rx)
                       ? 4 + rx_declared(rx)
                       : 0;
    if (rx->off && rx->off == rx->b.len) {
        th_buf_reset(&rx->b);
        rx->off = 0;
    } else if (rx->off && ((rx->off > 65536 && rx->off * 2 > rx->b.len) ||
                           (whole > 65536 && rx->off + whole >= rx->b.cap))) {
        memmove(rx->b.data, rx->b.data + rx->off, have);
        rx->b.len = have;
        rx->off = 0;
    }
    if (whole > 65536 && whole > have &&
        rx->off + whole + 1 > rx->b.cap) {
        uint8_t *p = realloc(rx->b.data, rx->off + whole + 1);
        if (!p) {
            errno = ENOMEM;
            return -1;
        }
        rx->b.data = p;
        rx->b.cap = rx->off + whole + 1;
    }
    /* a large frame is read up to its end, into the room made for it */
    size_t room = whole > 65536 && whole - have < 65536 ? whole - have
                                                         : 65536;
    if (th_buf_reserve(&rx->b, room) != 0) {
        errno = ENOMEM;
        return -1;
    }
    for (;;) {
        ssize_t n = read(fd, rx->b.data + rx->b.len, room);
        if (n < 0 && errno == EINTR)
            continue;
        if (n > 0)
            rx->b.len += (size_t)n;
        return n < 0 ? -1 : (int)(n > 0);
    }
}

/* No whole frame is there and no frame handed out is in use (the
 * contract of th_iso_take): a buffer grown past ISO_RX_KEEP is given
 * back when what it holds is small, kept as it is otherwise (on failure
 * too: nothing is lost). */
static void rx_trim(th_iso_rx *rx)
{
    size_t have = rx->b.len - rx->off;
    if (rx->b.cap <= ISO_RX_KEEP || have > ISO_RX_KEEP / 4)
        return;
    th_buf nb = TH_BUF_INIT;
    if (have && th_buf_append(&nb, rx->b.data + rx->off, have) != 0)
        return;
    th_buf_destroy(&rx->b);
    rx->b = nb;
    rx->off = 0;
}

int th_iso_take(th_iso_rx *rx, const uint8_t **frame, size_t *len)
{
    size_t have = rx->b.len - rx->off;
    if (have < 4) {
        rx_trim(rx);
        return 0;
    }
    size_t n = rx_declared(rx);
    if (n > rx_max(rx)) {
        rx->refused = n;
        return -1;
    }
    if (have - 4 < n) {
        rx_trim(rx);
        return 0;
    }
    *frame = rx->b.data + rx->off + 4;
    *len = n;
    rx->off += 4 + n;
    return 1;
}

void th_iso_rx_destroy(th_iso_rx *rx)
{
    th_buf_destroy(&rx->b);
    rx->off = 0;
    rx->refused = 0;
}

int th_iso_recv(int fd, th_iso_rx *rx, th_buf *out)
{
    for (;;) {
        const uint8_t *f;
        size_t n;
        int t = th_iso_take(rx, &f, &n);
        if (t < 0)
            return -1;
        if (t == 1) {
            th_buf_reset(out);
            return th_buf_append(out, f, n) == 0 ? 0 : -1;
        }
        int r = th_iso_rx_fill(rx, fd);
        if (r <= 0)
            return r == 0 ? 1 : -1;
    }
}

int64_t th_iso_int(const msgpack_object_array *a, uint32_t i)
{
    if (i >= a->size)
        return 0;
    const msgpack_object *o = &a->ptr[i];
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        return o->via.u64 > INT64_MAX ? INT64_MAX : (int64_t)o->via.u64;
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        return o->via.i64;
    if (o->type == MSGPACK_OBJECT_BOOLEAN)
        return o->via.boolean;
    return 0;
}

double th_iso_num(const msgpack_object_array *a, uint32_t i)
{
    if (i >= a->size)
        return -1;
    const msgpack_object *o = &a->ptr[i];
    if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
        return o->via.f64;
    return (double)th_iso_int(a, i);
}

const uint8_t *th_iso_bytes(const msgpack_object_array *a, uint32_t i,
                            size_t *len)
{
    *len = 0;
    if (i >= a->size)
        return NULL;
    const msgpack_object *o = &a->ptr[i];
    if (o->type == MSGPACK_OBJECT_BIN) {
        *len = o->via.bin.size;
        return (const uint8_t *)o->via.bin.ptr;
    }
    if (o->type == MSGPACK_OBJECT_STR) {
        *len = o->via.str.size;
        return (const uint8_t *)o->via.str.ptr;
    }
    return NULL;
}

char *th_iso_strdup(const msgpack_object_array *a, uint32_t i)
{
    if (i < a->size && a->ptr[i].type == MSGPACK_OBJECT_NIL)
        return NULL;
    size_t n;
    const uint8_t *p = th_iso_bytes(a, i, &n);
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    if (n)
        memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

/* ---- the descriptor --------------------------------------------------------- */

/* [name, type, required, description, enum|nil, default_json|nil, item] */
static int pack_params(msgpack_packer *pk, const toolhost_param *ps,
                       uint32_t n)
{
    int e = msgpack_pack_array(pk, n);
    size_t stride = n ? ps[0].struct_size : 0;
    for (uint32_t i = 0; i < n && !e; i++) {
        const toolhost_param *q =
            (const toolhost_param *)((const char *)ps + stride * i);
        e |= msgpack_pack_array(pk, 7);
        e |= th_pack_cstr(pk, q->name);
        e |= msgpack_pack_uint32(pk, q->type);
        e |= msgpack_pack_uint32(pk, q->required ? 1 : 0);
        e |= th_pack_cstr(pk, q->description);
        size_t ne = 0;
        bool has_enum = stride >= offsetof(toolhost_param, enum_values) +
                                     sizeof q->enum_values &&
                        q->enum_values;
        while (has_enum && q->enum_values[ne])
            ne++;
        if (has_enum) {
            e |= msgpack_pack_array(pk, (uint32_t)ne);
            for (size_t k = 0; k < ne; k++)
                e |= th_pack_cstr(pk, q->enum_values[k]);
        } else {
            e |= msgpack_pack_nil(pk);
        }
        bool has_def = stride >= offsetof(toolhost_param, default_json) +
                                     sizeof q->default_json;
        e |= th_pack_cstr(pk, has_def ? q->default_json : NULL);
        bool has_item = stride >= offsetof(toolhost_param, item_type) +
                                      sizeof q->item_type;
        e |= msgpack_pack_uint32(pk, has_item ? q->item_type : 0);
    }
    return e;
}

/* A tool's tags (ABI 1.5) as [tag...] (at most TOOLHOST_MAX_TAGS + 1:
 * the host refuses more anyway), or nil. */
static int pack_tags(msgpack_packer *pk, const toolhost_tool *t)
{
    if (!TOOLHOST_HAS_MEMBER(toolhost_tool, t, tags) || !t->tags)
        return msgpack_pack_nil(pk);
    uint32_t n = 0;
    while (n <= TOOLHOST_MAX_TAGS && t->tags[n])
        n++;
    int e = msgpack_pack_array(pk, n);
    for (uint32_t i = 0; i < n; i++)
        e |= th_pack_cstr(pk, t->tags[i]);
    return e;
}

/* One tool as [name, description, long_description, params, stdout_type,
 * stderr_type, flags, has_needs_permission, has_validate_args, title,
 * output_schema, input_schema, tags], from the plugin's own descriptor
 * (the host checks it again as it checks an in-process plugin's). */
static int pack_tool(msgpack_packer *pk, const toolhost_tool *t)
{
    int e = msgpack_pack_array(pk, 13);
    e |= th_pack_cstr(pk, t->name);
    e |= th_pack_cstr(pk, t->description);
    e |= th_pack_cstr(pk, t->long_description);
    e |= pack_params(pk, t->params, t->n_params);
    e |= msgpack_pack_uint32(pk, t->stdout_type);
    e |= msgpack_pack_uint32(pk, t->stderr_type);
    e |= msgpack_pack_uint32(pk, t->flags);
    e |= msgpack_pack_uint32(pk, t->needs_permission ? 1 : 0);
    e |= msgpack_pack_uint32(pk, t->validate_args ? 1 : 0);
    bool v11 = TOOLHOST_HAS_MEMBER(toolhost_tool, t, output_schema);
    e |= th_pack_cstr(pk, v11 ? t->title : NULL);
    e |= th_pack_cstr(pk, v11 ? t->output_schema : NULL);
    bool v14 = TOOLHOST_HAS_MEMBER(toolhost_tool, t, input_schema);
    e |= th_pack_cstr(pk, v14 ? t->input_schema : NULL);
    e |= pack_tags(pk, t);
    return e;
}

/* The resources and prompts of p (ABI 1.4, checked by its loader), as
 * HELLO carries them (iso_wire.h). */
static int pack_content(msgpack_packer *pk, const th_plugin *p)
{
    int e = msgpack_pack_array(pk, (uint32_t)p->n_resources);
    for (size_t i = 0; i < p->n_resources && !e; i++) {
        const th_resource *r = &p->resources[i];
        e |= msgpack_pack_array(pk, 6);
        e |= th_pack_cstr(pk, r->uri);
        e |= th_pack_cstr(pk, r->name);
        e |= th_pack_cstr(pk, r->title);
        e |= th_pack_cstr(pk, r->description);
        e |= th_pack_cstr(pk, r->mime_type);
        e |= msgpack_pack_uint32(pk, r->desc->complete ? 1 : 0);
    }
    e |= msgpack_pack_array(pk, (uint32_t)p->n_prompts);
    for (size_t i = 0; i < p->n_prompts && !e; i++) {
        const th_prompt *q = &p->prompts[i];
        e |= msgpack_pack_array(pk, 5);
        e |= th_pack_cstr(pk, q->name);
        e |= th_pack_cstr(pk, q->title);
        e |= th_pack_cstr(pk, q->description);
        e |= pack_params(pk, q->desc->args, q->desc->n_args);
        e |= msgpack_pack_uint32(pk, q->desc->complete ? 1 : 0);
    }
    return e;
}

int th_iso_pack_desc(msgpack_packer *pk, const th_plugin *p)
{
    const toolhost_plugin *d = p->desc;
    int e = msgpack_pack_array(pk, 8);
    e |= th_pack_cstr(pk, d->name);
    e |= th_pack_cstr(pk, d->version);
    e |= th_pack_cstr(pk, d->description);
    e |= pack_params(pk, d->config_params, d->n_config_params);
    e |= msgpack_pack_array(pk, d->n_tools);
    size_t stride = d->n_tools ? d->tools[0].struct_size : 0;
    for (uint32_t i = 0; i < d->n_tools && !e; i++)
        e |= pack_tool(pk, (const toolhost_tool *)((const char *)d->tools +
                                                   stride * i));
    e |= msgpack_pack_uint64(pk, p->flags);
    e |= pack_content(pk, p);
    return e;
}

int th_iso_pack_tools(msgpack_packer *pk, const th_plugin *p, size_t from)
{
    size_t n = p->n_tools > from ? p->n_tools - from : 0;
    int e = msgpack_pack_array(pk, (uint32_t)n);
    for (size_t i = from; i < p->n_tools && !e; i++)
        e |= pack_tool(pk, p->tools[i].desc);
    return e;
}

int th_iso_small_write(void *data, const char *buf, size_t len)
{
    th_iso_small *f = data;
    if (len > sizeof f->b - f->n)
        return -1;
    memcpy(f->b + f->n, buf, len);
    f->n += len;
    return 0;
}
