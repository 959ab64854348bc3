/* plugin_harness.c - a fake host for plugin tests (plugin_harness.h). */
#include "common/plugin_harness.h"

#include "th/json.h"

#include <jansson.h>
#include <msgpack.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct th_harness {
    th_plugin *p; /* loaded and initialized by the host's own loader */
};

static void oom(void)
{
    fprintf(stderr, "plugin harness: out of memory\n");
    abort();
}

/* ---- JSON to msgpack ---------------------------------------------------- */

int th_harness_json_to_mp(const char *json, th_buf *out)
{
    json_error_t je;
    json_t *j = json_loads(json, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!j)
        return -1;
    int rc = th_json_to_msgpack(j, out);
    json_decref(j);
    return rc == 0 ? 0 : -1;
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

static int c_complete(toolhost_call *call, int status)
{
    th_harness_call *c = hc(call);
    pthread_mutex_lock(&c->mu);
    if (!c->suspended || c->completed) {
        pthread_mutex_unlock(&c->mu);
        return TOOLHOST_ESTATE;
    }
    c->status = status;
    c->completed = true;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return 0;
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

/* init() through the host's loader (config validated, defaults filled);
 * drops `p` on failure. */
static th_harness *start(th_plugin *p, const char *config_json, char *err,
                         size_t err_size)
{
    th_error e;
    th_error_clear(&e);
    th_buf cfg = TH_BUF_INIT;
    if (config_json && th_harness_json_to_mp(config_json, &cfg) != 0) {
        snprintf(err, err_size, "config is not JSON");
        th_buf_destroy(&cfg);
        th_plugin_unref(p);
        return NULL;
    }
    int rc = th_plugin_init(p, cfg.data, cfg.len, &e);
    th_buf_destroy(&cfg);
    if (rc != 0) {
        snprintf(err, err_size, "%s", e.msg);
        th_plugin_unref(p);
        return NULL;
    }
    th_harness *h = calloc(1, sizeof *h);
    if (!h)
        oom();
    h->p = p;
    return h;
}

th_harness *th_harness_load(const char *so_path, const char *config_json,
                            char *err, size_t err_size)
{
    th_load_opts opts = {.allow_insecure = true}; /* tests' temp folders */
    th_plugin *p;
    th_error e;
    if (th_plugin_open(so_path, &opts, &p, &e) != 0) {
        snprintf(err, err_size, "%s", e.msg);
        return NULL;
    }
    return start(p, config_json, err, err_size);
}

th_harness *th_harness_load_with(const char *so_path, const char *config_json,
                                 void (*adjust)(toolhost_host_api *api),
                                 char *err, size_t err_size)
{
    th_load_opts opts = {.allow_insecure = true};
    th_plugin *p;
    th_error e;
    if (th_plugin_open(so_path, &opts, &p, &e) != 0) {
        snprintf(err, err_size, "%s", e.msg);
        return NULL;
    }
    if (adjust)
        adjust(&p->api);
    return start(p, config_json, err, err_size);
}

th_harness *th_harness_load_desc(const toolhost_plugin *desc,
                                 const char *config_json, char *err,
                                 size_t err_size)
{
    th_plugin *p;
    th_error e;
    if (th_plugin_builtin(desc, &p, &e) != 0) {
        snprintf(err, err_size, "%s", e.msg);
        return NULL;
    }
    return start(p, config_json, err, err_size);
}

void th_harness_unload(th_harness *h)
{
    if (!h)
        return;
    th_plugin_unref(h->p); /* fini(), dlclose() */
    free(h);
}

const toolhost_plugin *th_harness_plugin(const th_harness *h)
{
    return h->p->desc;
}

void *th_harness_state(const th_harness *h)
{
    return h->p->state;
}

const toolhost_host_api *th_harness_api(const th_harness *h)
{
    return &h->p->api;
}

size_t th_harness_n_tools(const th_harness *h)
{
    return h->p->n_tools;
}

static const th_tool *find_tool(const th_harness *h, const char *name)
{
    for (size_t i = 0; i < h->p->n_tools; i++)
        if (strcmp(h->p->tools[i].name, name) == 0)
            return &h->p->tools[i];
    return NULL;
}

const toolhost_tool *th_harness_tool(const th_harness *h, const char *name)
{
    const th_tool *t = find_tool(h, name);
    return t ? t->desc : NULL;
}

/* ---- running ----------------------------------------------------------------- */

static void call_init(th_harness *h, th_harness_call *c, int cancel_after)
{
    memset(c, 0, sizeof *c);
    static atomic_ullong next_id = 1;
    c->base.pub.struct_size = sizeof c->base.pub;
    c->base.pub.host = &h->p->api; /* th_host_api_fill()ed by the loader */
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
    const th_tool *t = find_tool(h, tool);
    if (!t) {
        snprintf(c->verr, sizeof c->verr, "unknown tool '%s'", tool);
        return TH_EUNKNOWN_TOOL;
    }
    /* the host's one validation: types, required, defaults, validate_args */
    th_buf full = TH_BUF_INIT;
    const uint8_t *a;
    size_t alen;
    th_error e;
    int rc = th_validate_call(t, args, len, &full, &a, &alen, &e);
    if (rc != 0) {
        snprintf(c->verr, sizeof c->verr, "%s", e.msg);
    } else {
        rc = t->desc->execute(h->p->state, t->desc, &c->base.pub, a, alen);
        if (rc == TOOLHOST_PENDING) {
            pthread_mutex_lock(&c->mu);
            while (!c->completed)
                pthread_cond_wait(&c->cv, &c->mu);
            rc = c->status;
            pthread_mutex_unlock(&c->mu);
        }
    }
    th_buf_destroy(&full);
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
    th_buf_destroy(&mp);
    return rc;
}

void th_harness_call_free(th_harness_call *c)
{
    th_buf_destroy(&c->out);
    th_buf_destroy(&c->err);
    free(c->meta);
    c->meta = NULL;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

/* ---- reading meta -------------------------------------------------------------- */

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

const char *th_harness_out(const th_harness_call *c)
{
    return c->out.data ? (const char *)c->out.data : "";
}

const char *th_harness_err(const th_harness_call *c)
{
    return c->err.data ? (const char *)c->err.data : "";
}
