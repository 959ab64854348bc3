/* meta.c - the meta map builder (toolhost/sdk.h). */
#include "toolhost/sdk.h"

#include <string.h>

void th_sdk_meta_init(th_sdk_meta *m)
{
    msgpack_sbuffer_init(&m->body);
    msgpack_sbuffer_init(&m->out);
    msgpack_packer_init(&m->pk, &m->body, msgpack_sbuffer_write);
    m->count = 0;
    m->err = 0;
}

void th_sdk_meta_destroy(th_sdk_meta *m)
{
    if (!m)
        return;
    msgpack_sbuffer_destroy(&m->body);
    msgpack_sbuffer_destroy(&m->out);
    msgpack_sbuffer_init(&m->body);
    msgpack_sbuffer_init(&m->out);
    m->count = 0;
}

/* Packs the key; the caller packs the value and calls done(). */
static int key(th_sdk_meta *m, const char *k)
{
    if (!m)
        return TH_SDK_EINVAL;
    if (m->err)
        return m->err;
    if (!k) {
        m->err = TH_SDK_EINVAL;
        return m->err;
    }
    if (m->count == UINT32_MAX) {
        m->err = TH_SDK_ERANGE;
        return m->err;
    }
    size_t n = strlen(k);
    if (msgpack_pack_str_with_body(&m->pk, k, n) != 0)
        m->err = TH_SDK_ENOMEM;
    return m->err;
}

static int done(th_sdk_meta *m, int pack_rc)
{
    if (pack_rc != 0) {
        m->err = TH_SDK_ENOMEM;
        return m->err;
    }
    m->count++;
    return TH_SDK_OK;
}

int th_sdk_meta_strn(th_sdk_meta *m, const char *k, const char *value,
                     size_t len)
{
    int rc = key(m, k);
    if (rc)
        return rc;
    if (!value && len) {
        m->err = TH_SDK_EINVAL;
        return m->err;
    }
    return done(m, msgpack_pack_str_with_body(&m->pk, value ? value : "",
                                              len));
}

int th_sdk_meta_str(th_sdk_meta *m, const char *k, const char *value)
{
    if (m && !m->err && !value) {
        m->err = TH_SDK_EINVAL;
        return m->err;
    }
    return th_sdk_meta_strn(m, k, value, value ? strlen(value) : 0);
}

int th_sdk_meta_int(th_sdk_meta *m, const char *k, int64_t value)
{
    int rc = key(m, k);
    return rc ? rc : done(m, msgpack_pack_int64(&m->pk, value));
}

int th_sdk_meta_bool(th_sdk_meta *m, const char *k, bool value)
{
    int rc = key(m, k);
    if (rc)
        return rc;
    return done(m, value ? msgpack_pack_true(&m->pk)
                         : msgpack_pack_false(&m->pk));
}

int th_sdk_meta_double(th_sdk_meta *m, const char *k, double value)
{
    int rc = key(m, k);
    return rc ? rc : done(m, msgpack_pack_double(&m->pk, value));
}

msgpack_packer *th_sdk_meta_value(th_sdk_meta *m, const char *k)
{
    if (key(m, k))
        return NULL;
    m->count++;
    return &m->pk;
}

int th_sdk_meta_finish(th_sdk_meta *m, const uint8_t **data, size_t *len)
{
    if (!m || !data || !len)
        return TH_SDK_EINVAL;
    if (m->err)
        return m->err;
    msgpack_sbuffer_clear(&m->out);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &m->out, msgpack_sbuffer_write);
    if (msgpack_pack_map(&pk, m->count) != 0 ||
        (m->body.size &&
         msgpack_sbuffer_write(&m->out, m->body.data, m->body.size) != 0))
        return TH_SDK_ENOMEM;
    *data = (const uint8_t *)m->out.data;
    *len = m->out.size;
    return TH_SDK_OK;
}

int th_sdk_meta_set(th_sdk_meta *m, toolhost_call *call)
{
    if (!call || !call->host || !call->host->set_meta)
        return TH_SDK_EINVAL;
    const uint8_t *data;
    size_t len;
    int rc = th_sdk_meta_finish(m, &data, &len);
    if (rc)
        return rc;
    return call->host->set_meta(call, data, len);
}
