/* plugin_harness.c - a fake host for plugin tests (plugin_harness.h). */
#include "common/plugin_harness.h"

#include <dlfcn.h>
#include <jansson.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct th_harness {
    void *dl;
    const toolhost_plugin *desc;
    toolhost_host_api api; /* call->host of every call, init()'s host */
    void *state;
    bool initialized;
    pthread_mutex_t log_mu;
    th_buf log;
};

static void oom(void)
{
    fprintf(stderr, "plugin harness: out of memory\n");
    abort();
}

/* ---- JSON to msgpack ---------------------------------------------------- */

static int pack_json(msgpack_packer *pk, const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        msgpack_pack_map(pk, json_object_size(j));
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            msgpack_pack_str_with_body(pk, k, strlen(k));
            pack_json(pk, v);
        }
        return 0;
    }
    case JSON_ARRAY: {
        msgpack_pack_array(pk, json_array_size(j));
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) pack_json(pk, v);
        return 0;
    }
    case JSON_STRING:
        return msgpack_pack_str_with_body(pk, json_string_value(j),
                                          json_string_length(j));
    case JSON_INTEGER:
        return msgpack_pack_int64(pk, json_integer_value(j));
    case JSON_REAL:
        return msgpack_pack_double(pk, json_real_value(j));
    case JSON_TRUE:
        return msgpack_pack_true(pk);
    case JSON_FALSE:
        return msgpack_pack_false(pk);
    case JSON_NULL:
    default:
        return msgpack_pack_nil(pk);
    }
}

int th_harness_json_to_mp(const char *json, th_buf *out)
{
    json_error_t je;
    json_t *j = json_loads(json, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!j)
        return -1;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, th_buf_msgpack_write);
    pack_json(&pk, j);
    json_decref(j);
    return 0;
}

/* ---- the host API: dispatch through the call's vtable ------------------- */

static const th_call_vtbl *vt(const toolhost_call *call)
{
    return ((const th_call_base *)call)->vt;
}

static int api_write(toolhost_call *call, int stream, const void *data,
                     size_t len)
{
    return call ? vt(call)->write(call, stream, data, len) : TOOLHOST_EINVAL;
}
static int api_set_meta(toolhost_call *call, const uint8_t *map, size_t len)
{
    return call ? vt(call)->set_meta(call, map, len) : TOOLHOST_EINVAL;
}
static int api_progress(toolhost_call *call, double fraction,
                        const char *message, const uint8_t *data,
                        size_t data_len)
{
    return call ? vt(call)->progress(call, fraction, message, data, data_len)
                : TOOLHOST_EINVAL;
}
static int api_is_cancelled(const toolhost_call *call)
{
    return call ? vt(call)->is_cancelled(call) : 1;
}
static int64_t api_time_left_ms(const toolhost_call *call)
{
    return call ? vt(call)->time_left_ms(call) : -1;
}
static int api_suspend(toolhost_call *call)
{
    return call ? vt(call)->suspend(call) : TOOLHOST_EINVAL;
}
static void api_complete(toolhost_call *call, int status)
{
    if (call)
        vt(call)->complete(call, status);
}

static void api_log(const toolhost_host_api *host, int level,
                    const char *message)
{
    th_harness *h = (th_harness *)((char *)host - offsetof(th_harness, api));
    static const char *names[] = {"error", "warn", "info", "debug"};
    pthread_mutex_lock(&h->log_mu);
    if (th_buf_printf(&h->log, "%s %s\n",
                      level >= 0 && level <= 3 ? names[level] : "?",
                      message ? message : "") != 0)
        oom();
    pthread_mutex_unlock(&h->log_mu);
}

static void api_fill(toolhost_host_api *api)
{
    memset(api, 0, sizeof *api);
    api->struct_size = sizeof *api;
    api->abi_major = TOOLHOST_ABI_MAJOR;
    api->abi_minor = TOOLHOST_ABI_MINOR;
    api->write = api_write;
    api->set_meta = api_set_meta;
    api->progress = api_progress;
    api->is_cancelled = api_is_cancelled;
    api->time_left_ms = api_time_left_ms;
    api->suspend = api_suspend;
    api->complete = api_complete;
    api->log = api_log;
}

/* ---- the fake call -------------------------------------------------------- */

static th_harness_call *hc(const toolhost_call *call)
{
    return (th_harness_call *)call;
}

static int c_write(toolhost_call *call, int stream, const void *data,
                   size_t len)
{
    th_harness_call *c = hc(call);
    if ((stream != TOOLHOST_STDOUT && stream != TOOLHOST_STDERR) ||
        (!data && len))
        return TOOLHOST_EINVAL;
    pthread_mutex_lock(&c->mu);
    if (th_buf_append(stream == TOOLHOST_STDOUT ? &c->out : &c->err, data,
                      len) != 0)
        oom();
    bool cancelled = atomic_load(&c->cancelled);
    if (cancelled)
        c->writes_after_cancel++;
    pthread_mutex_unlock(&c->mu);
    return cancelled ? TOOLHOST_ECANCELLED : 0;
}

static int c_set_meta(toolhost_call *call, const uint8_t *map, size_t len)
{
    th_harness_call *c = hc(call);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int ok = map && msgpack_unpack_next(&u, (const char *)map, len, &off) ==
                        MSGPACK_UNPACK_SUCCESS &&
             off == len && u.data.type == MSGPACK_OBJECT_MAP;
    msgpack_unpacked_destroy(&u);
    if (!ok)
        return TOOLHOST_EINVAL;
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy)
        oom();
    memcpy(copy, map, len);
    pthread_mutex_lock(&c->mu);
    free(c->meta);
    c->meta = copy;
    c->meta_len = len;
    c->n_meta++;
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static int c_progress(toolhost_call *call, double fraction,
                      const char *message, const uint8_t *data,
                      size_t data_len)
{
    (void)data, (void)data_len;
    th_harness_call *c = hc(call);
    pthread_mutex_lock(&c->mu);
    if (c->n_progress < TH_HARNESS_MAX_PROGRESS) {
        th_harness_progress *p = &c->progress[c->n_progress];
        p->fraction = fraction;
        snprintf(p->message, sizeof p->message, "%s", message ? message : "");
    }
    c->n_progress++;
    if (c->cancel_after_progress > 0 &&
        c->n_progress >= c->cancel_after_progress)
        atomic_store(&c->cancelled, 1);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static int c_is_cancelled(const toolhost_call *call)
{
    return atomic_load(&hc(call)->cancelled);
}

static int64_t c_time_left_ms(const toolhost_call *call)
{
    (void)call;
    return -1;
}

static int c_suspend(toolhost_call *call)
{
    th_harness_call *c = hc(call);
    pthread_mutex_lock(&c->mu);
    int rc = c->suspended ? TOOLHOST_ESTATE : 0;
    c->suspended = true;
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static void c_complete(toolhost_call *call, int status)
{
    th_harness_call *c = hc(call);
    pthread_mutex_lock(&c->mu);
    c->status = status;
    c->completed = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static const th_call_vtbl harness_vtbl = {
    .write = c_write,
    .set_meta = c_set_meta,
    .progress = c_progress,
    .is_cancelled = c_is_cancelled,
    .time_left_ms = c_time_left_ms,
    .suspend = c_suspend,
    .complete = c_complete,
};

/* ---- loading ---------------------------------------------------------------- */

static th_harness *load_fail(th_harness *h, char *err, size_t size,
                             const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static th_harness *load_fail(th_harness *h, char *err, size_t size,
                             const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (err && size)
        vsnprintf(err, size, fmt, ap);
    va_end(ap);
    th_harness_unload(h);
    return NULL;
}

/* Checks the descriptor and calls init(); frees `h` on failure. */
static th_harness *start(th_harness *h, const char *what,
                         const char *config_json, char *err, size_t err_size)
{
    if (!h->desc || h->desc->struct_size < sizeof *h->desc ||
        h->desc->abi_major != TOOLHOST_ABI_MAJOR)
        return load_fail(h, err, err_size, "%s: bad descriptor", what);
    th_buf cfg = TH_BUF_INIT;
    if (config_json && th_harness_json_to_mp(config_json, &cfg) != 0) {
        th_buf_free(&cfg);
        return load_fail(h, err, err_size, "config is not JSON");
    }
    if (h->desc->init) {
        char msg[1024] = "";
        int rc = h->desc->init(&h->api, cfg.data, cfg.len, &h->state, msg,
                               sizeof msg);
        th_buf_free(&cfg);
        if (rc != 0)
            return load_fail(h, err, err_size, "init failed: %s", msg);
        h->initialized = true;
    }
    th_buf_free(&cfg);
    return h;
}

static th_harness *harness_new(void)
{
    th_harness *h = calloc(1, sizeof *h);
    if (!h)
        oom();
    pthread_mutex_init(&h->log_mu, NULL);
    api_fill(&h->api);
    return h;
}

th_harness *th_harness_load(const char *so_path, const char *config_json,
                            char *err, size_t err_size)
{
    th_harness *h = harness_new();
    h->dl = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
    if (!h->dl)
        return load_fail(h, err, err_size, "%s", dlerror());
    toolhost_entry_fn entry;
    *(void **)&entry = dlsym(h->dl, TOOLHOST_ENTRY_SYMBOL);
    if (!entry)
        return load_fail(h, err, err_size, "%s: no entry symbol", so_path);
    h->desc = entry();
    return start(h, so_path, config_json, err, err_size);
}

th_harness *th_harness_load_desc(const toolhost_plugin *desc,
                                 const char *config_json, char *err,
                                 size_t err_size)
{
    th_harness *h = harness_new();
    h->desc = desc;
    return start(h, desc && desc->name ? desc->name : "plugin", config_json,
                 err, err_size);
}

void th_harness_unload(th_harness *h)
{
    if (!h)
        return;
    if (h->initialized && h->desc->fini)
        h->desc->fini(h->state);
    if (h->dl)
        dlclose(h->dl);
    th_buf_free(&h->log);
    pthread_mutex_destroy(&h->log_mu);
    free(h);
}

const toolhost_plugin *th_harness_plugin(const th_harness *h)
{
    return h->desc;
}

const toolhost_tool *th_harness_tool(const th_harness *h, const char *name)
{
    for (uint32_t i = 0; i < h->desc->n_tools; i++)
        if (strcmp(h->desc->tools[i].name, name) == 0)
            return &h->desc->tools[i];
    return NULL;
}

const char *th_harness_log(const th_harness *h)
{
    return h->log.data ? (const char *)h->log.data : "";
}

/* ---- validation (what the host does before execute) ------------------------- */

static bool type_ok(uint32_t type, const msgpack_object *o)
{
    switch (type) {
    case TOOLHOST_TYPE_STRING: return o->type == MSGPACK_OBJECT_STR;
    case TOOLHOST_TYPE_INTEGER:
        return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
               o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER;
    case TOOLHOST_TYPE_NUMBER:
        return o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ||
               o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ||
               o->type == MSGPACK_OBJECT_FLOAT32 ||
               o->type == MSGPACK_OBJECT_FLOAT64;
    case TOOLHOST_TYPE_BOOLEAN: return o->type == MSGPACK_OBJECT_BOOLEAN;
    case TOOLHOST_TYPE_ARRAY: return o->type == MSGPACK_OBJECT_ARRAY;
    case TOOLHOST_TYPE_OBJECT: return o->type == MSGPACK_OBJECT_MAP;
    default: return false;
    }
}

static const msgpack_object *find_key(const msgpack_object *map,
                                      const char *key)
{
    size_t n = strlen(key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
            memcmp(k->via.str.ptr, key, n) == 0)
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

static const toolhost_param *param_at(const toolhost_tool *t, uint32_t i)
{
    size_t stride = t->params[0].struct_size;
    return (const toolhost_param *)((const char *)t->params + stride * i);
}

/* Checks `args` and writes the map to pass to execute() into `out`
 * (defaults filled in).  0, or TH_EARGS with c->verr. */
static int validate(const toolhost_tool *t, const uint8_t *args, size_t len,
                    th_buf *out, th_harness_call *c)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = TH_EARGS;
    if (msgpack_unpack_next(&u, (const char *)args, len, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        off != len || u.data.type != MSGPACK_OBJECT_MAP) {
        snprintf(c->verr, sizeof c->verr,
                 "Error parsing arguments for %s: arguments must be a map",
                 t->name);
        goto done;
    }
    const msgpack_object *map = &u.data;
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        bool known = false;
        for (uint32_t p = 0; p < t->n_params && k->type == MSGPACK_OBJECT_STR;
             p++) {
            const toolhost_param *pp = param_at(t, p);
            if (strlen(pp->name) == k->via.str.size &&
                memcmp(pp->name, k->via.str.ptr, k->via.str.size) == 0)
                known = true;
        }
        if (!known) {
            snprintf(c->verr, sizeof c->verr,
                     "Error parsing arguments for %s: unknown parameter '%.*s'",
                     t->name,
                     k->type == MSGPACK_OBJECT_STR ? (int)k->via.str.size : 1,
                     k->type == MSGPACK_OBJECT_STR ? k->via.str.ptr : "?");
            goto done;
        }
    }
    uint32_t n_out = map->via.map.size;
    for (uint32_t p = 0; p < t->n_params; p++) {
        const toolhost_param *pp = param_at(t, p);
        const msgpack_object *v = find_key(map, pp->name);
        if (!v && pp->required) {
            snprintf(c->verr, sizeof c->verr,
                     "Error parsing arguments for %s: missing required "
                     "parameter '%s'",
                     t->name, pp->name);
            goto done;
        }
        if (v && !type_ok(pp->type, v)) {
            snprintf(c->verr, sizeof c->verr,
                     "Error parsing arguments for %s: parameter '%s' has "
                     "the wrong type",
                     t->name, pp->name);
            goto done;
        }
        if (!v && pp->default_json)
            n_out++;
    }
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, th_buf_msgpack_write);
    msgpack_pack_map(&pk, n_out);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        msgpack_pack_object(&pk, map->via.map.ptr[i].key);
        msgpack_pack_object(&pk, map->via.map.ptr[i].val);
    }
    for (uint32_t p = 0; p < t->n_params; p++) {
        const toolhost_param *pp = param_at(t, p);
        if (find_key(map, pp->name) || !pp->default_json)
            continue;
        msgpack_pack_str_with_body(&pk, pp->name, strlen(pp->name));
        if (th_harness_json_to_mp(pp->default_json, out) != 0) {
            snprintf(c->verr, sizeof c->verr, "bad default of '%s'",
                     pp->name);
            goto done;
        }
    }
    rc = 0;
done:
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* ---- running ----------------------------------------------------------------- */

static void call_init(th_harness *h, th_harness_call *c, int cancel_after)
{
    memset(c, 0, sizeof *c);
    static atomic_ullong next_id = 1;
    c->base.pub.struct_size = sizeof c->base.pub;
    c->base.pub.host = &h->api;
    c->base.pub.call_id = atomic_fetch_add(&next_id, 1);
    c->base.vt = &harness_vtbl;
    th_buf_init(&c->out);
    th_buf_init(&c->err);
    c->cancel_after_progress = cancel_after;
    atomic_init(&c->cancelled, cancel_after < 0);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
}

int th_harness_run_mp(th_harness *h, const char *tool, const uint8_t *args,
                      size_t len, int cancel_after_progress,
                      th_harness_call *c)
{
    call_init(h, c, cancel_after_progress);
    const toolhost_tool *t = th_harness_tool(h, tool);
    if (!t) {
        snprintf(c->verr, sizeof c->verr, "unknown tool '%s'", tool);
        return TH_EUNKNOWN_TOOL;
    }
    th_buf full = TH_BUF_INIT;
    int rc = validate(t, args, len, &full, c);
    if (rc == 0 && t->validate_args) {
        char msg[512] = "";
        if (t->validate_args(h->state, t, full.data, full.len, msg,
                             sizeof msg) != 0) {
            snprintf(c->verr, sizeof c->verr,
                     "Error parsing arguments for %s: %s", t->name, msg);
            rc = TH_EARGS;
        }
    }
    if (rc == 0) {
        rc = t->execute(h->state, t, &c->base.pub, full.data, full.len);
        if (rc == TOOLHOST_PENDING) {
            pthread_mutex_lock(&c->mu);
            while (!c->completed)
                pthread_cond_wait(&c->cv, &c->mu);
            rc = c->status;
            pthread_mutex_unlock(&c->mu);
        }
    }
    th_buf_free(&full);
    return rc;
}

int th_harness_run(th_harness *h, const char *tool, const char *args_json,
                   int cancel_after_progress, th_harness_call *c)
{
    th_buf mp = TH_BUF_INIT;
    if (th_harness_json_to_mp(args_json ? args_json : "{}", &mp) != 0) {
        call_init(h, c, cancel_after_progress);
        snprintf(c->verr, sizeof c->verr, "arguments are not JSON");
        return TH_EINVAL;
    }
    int rc = th_harness_run_mp(h, tool, mp.data, mp.len,
                               cancel_after_progress, c);
    th_buf_free(&mp);
    return rc;
}

void th_harness_call_free(th_harness_call *c)
{
    th_buf_free(&c->out);
    th_buf_free(&c->err);
    free(c->meta);
    c->meta = NULL;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

/* ---- reading meta -------------------------------------------------------------- */

static int meta_get(const th_harness_call *c, const char *key,
                    msgpack_unpacked *u, const msgpack_object **v)
{
    msgpack_unpacked_init(u);
    size_t off = 0;
    if (!c->meta ||
        msgpack_unpack_next(u, (const char *)c->meta, c->meta_len, &off) !=
            MSGPACK_UNPACK_SUCCESS ||
        u->data.type != MSGPACK_OBJECT_MAP)
        return -1;
    *v = find_key(&u->data, key);
    return *v ? 0 : -1;
}

int th_harness_meta_int(const th_harness_call *c, const char *key,
                        int64_t *out)
{
    msgpack_unpacked u;
    const msgpack_object *v;
    int rc = meta_get(c, key, &u, &v);
    if (rc == 0 && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
        *out = (int64_t)v->via.u64;
    else if (rc == 0 && v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        *out = v->via.i64;
    else
        rc = -1;
    msgpack_unpacked_destroy(&u);
    return rc;
}

int th_harness_meta_bool(const th_harness_call *c, const char *key, bool *out)
{
    msgpack_unpacked u;
    const msgpack_object *v;
    int rc = meta_get(c, key, &u, &v);
    if (rc == 0 && v->type == MSGPACK_OBJECT_BOOLEAN)
        *out = v->via.boolean;
    else
        rc = -1;
    msgpack_unpacked_destroy(&u);
    return rc;
}

int th_harness_meta_str(const th_harness_call *c, const char *key, char *buf,
                        size_t size)
{
    msgpack_unpacked u;
    const msgpack_object *v;
    int rc = meta_get(c, key, &u, &v);
    if (rc == 0 && v->type == MSGPACK_OBJECT_STR && size)
        snprintf(buf, size, "%.*s", (int)v->via.str.size, v->via.str.ptr);
    else
        rc = -1;
    msgpack_unpacked_destroy(&u);
    return rc;
}

/* ---- sandbox ---------------------------------------------------------------------- */

#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/th_test.h"

static void must(int ok, const char *what)
{
    if (!ok) {
        perror(what);
        abort();
    }
}

char *th_harness_sandbox(char **root)
{
    char *t = th_test_tmpdir();
    char p[4096];
    snprintf(p, sizeof p, "%s/root", t);
    must(mkdir(p, 0755) == 0, "mkdir root");
    snprintf(p, sizeof p, "%s/root/sub", t);
    must(mkdir(p, 0755) == 0, "mkdir sub");
    snprintf(p, sizeof p, "%s/outside", t);
    must(mkdir(p, 0755) == 0, "mkdir outside");
    snprintf(p, sizeof p, "%s/root", t);
    *root = strdup(p);
    if (!*root)
        oom();
    char *f = th_test_write_file(*root, "a.txt", "l1\nl2\nl3\nl4\nl5\n",
                                 (size_t)-1);
    must(chmod(f, 0644) == 0, "chmod");
    struct timeval tv[2] = {{1000000000, 0}, {1000000000, 0}};
    must(utimes(f, tv) == 0, "utimes");
    free(f);
    snprintf(p, sizeof p, "%s/root/sub", t);
    free(th_test_write_file(p, "b.c", "int main(void) { return 0; }\n",
                            (size_t)-1));
    free(th_test_write_file(p, "c.h", "#define TODO 1\n", (size_t)-1));
    free(th_test_write_file(p, "bin.dat", "needle\0binary\n", 14));
    snprintf(p, sizeof p, "%s/outside", t);
    free(th_test_write_file(p, "secret.txt", "SECRET needle\n", (size_t)-1));
    snprintf(p, sizeof p, "%s/root/link_in", t);
    must(symlink("a.txt", p) == 0, "symlink in");
    snprintf(p, sizeof p, "%s/root/link_out", t);
    must(symlink("../outside/secret.txt", p) == 0, "symlink out");
    snprintf(p, sizeof p, "%s/root/link_dir_out", t);
    must(symlink("../outside", p) == 0, "symlink dir out");
    return t;
}
