/* test_protocol_doc.c - every example of docs/protocol.md, run against a
 * real `toolhost serve`.
 *
 * The examples are the fenced blocks whose info string is `rpc` (or
 * `rpc shape`).  Each line is one message, as JSON with a few additions
 * (docs/protocol.md, "Examples", says the same for readers):
 *   → MSG   the client sends MSG (packed as msgpack)
 *   ← MSG   the host sends a message matching MSG; messages that match no
 *           line (progress, other notifications) are skipped, and answers
 *           may come in any order
 *   a line starting with neither continues the message above it.
 * In MSG: `nil` is null; `...` as a value matches any value, as the last
 * element of an array any further elements; `{...}` any value; a string
 * ending in "..." matches any string that starts with the rest; `$name`
 * matches an integer and names it (a later `$name`, sent or expected, is
 * that integer).  Maps match when every key shown matches (the host may send
 * more keys).  In an `rpc shape` block a number matches any number.
 *
 * Each block runs on a connection of its own, against one server whose
 * config (below) the doc describes: the echo, fs and text plugins, one
 * toolset with every tool (run_code too), an `ask` rule for fs_list, and
 * big.log in the plugins' root. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_rpc_harness.h"
#include "th/json.h"

#define WILD "\x01"    /* `...` */
#define VAR "\x02"     /* `$name` */
#define MAX_VARS 16

static const char doc_config[] =
    "host:\n"
    "  log_level: debug\n"
    "  shutdown_grace: 1s\n"
    "  permission_timeout: 5s\n"
    "plugins:\n"
    "  - name: echo\n"
    "    path: @BUILD@/plugins/echo.so\n"
    "  - name: fs\n"
    "    path: @BUILD@/plugins/fs.so\n"
    "    config:\n"
    "      root: @DIR@\n"
    "  - name: text\n"
    "    path: @BUILD@/plugins/text.so\n"
    "    config:\n"
    "      root: @DIR@\n"
    "toolsets:\n"
    "  - name: default\n"
    "    tools: [\"*\"]\n"
    "    permissions:\n"
    "      rules:\n"
    "        - match: fs_list\n"
    "          action: ask\n"
    "    run_code:\n"
    "      enabled: true\n";

typedef struct doc_vars {
    char name[MAX_VARS][32];
    int64_t val[MAX_VARS];
    int n;
} doc_vars;

/* Whether the output so far ends with ':' (spaces aside): a map value
 * comes next, not a key. */
static bool after_colon(const char *out, size_t n)
{
    while (n > 0 && out[n - 1] == ' ')
        n--;
    return n > 0 && out[n - 1] == ':';
}

/* The doc's notation to plain JSON (see the banner). */
static char *to_json(const char *in)
{
    size_t cap = strlen(in) * 8 + 16, n = 0;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    bool str = false;
    char open[64];              /* the containers around p: '{' or '[' */
    int depth = 0;
    for (const char *p = in; *p;) {
        if (str) {
            if (*p == '\\' && p[1]) {
                out[n++] = *p++;
                out[n++] = *p++;
                continue;
            }
            if (*p == '"')
                str = false;
            out[n++] = *p++;
            continue;
        }
        if (*p == '"') {
            str = true;
            out[n++] = *p++;
        } else if (!strncmp(p, "{...}", 5)) {
            n += (size_t)sprintf(out + n, "\"\\u0001\"");
            p += 5;
        } else if (!strncmp(p, "...", 3) && depth > 0 &&
                   depth <= (int)sizeof open && open[depth - 1] == '{' &&
                   !after_colon(out, n)) {
            /* `...` among a map's members: "and more keys", which a map
             * means anyway: drop it and the comma before it */
            while (n > 0 && (out[n - 1] == ' ' || out[n - 1] == ','))
                n--;
            p += 3;
        } else if (!strncmp(p, "...", 3)) {
            n += (size_t)sprintf(out + n, "\"\\u0001\"");
            p += 3;
        } else if (*p == '{' || *p == '[') {
            if (depth < (int)sizeof open)
                open[depth] = *p;
            depth++;
            out[n++] = *p++;
        } else if (*p == '}' || *p == ']') {
            if (depth > 0)
                depth--;
            out[n++] = *p++;
        } else if (!strncmp(p, "nil", 3) &&
                   !(p[3] >= 'a' && p[3] <= 'z')) {
            n += (size_t)sprintf(out + n, "null");
            p += 3;
        } else if (*p == '$') {
            n += (size_t)sprintf(out + n, "\"\\u0002");
            for (p++; (*p >= 'a' && *p <= 'z') || *p == '_' ||
                      (*p >= '0' && *p <= '9');)
                out[n++] = *p++;
            out[n++] = '"';
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
    return out;
}

static bool is_tag(const json_t *v, const char *tag)
{
    return json_is_string(v) &&
           strncmp(json_string_value(v), tag, 1) == 0;
}

static int var_find(doc_vars *vs, const char *name)
{
    for (int i = 0; i < vs->n; i++)
        if (strcmp(vs->name[i], name) == 0)
            return i;
    return -1;
}

/* Replaces bound $names in a message to send by their integers. */
static json_t *substitute(json_t *v, doc_vars *vs, char *why, size_t wn)
{
    if (is_tag(v, VAR)) {
        int i = var_find(vs, json_string_value(v) + 1);
        if (i < 0) {
            snprintf(why, wn, "$%s is sent before it is known",
                     json_string_value(v) + 1);
            return NULL;
        }
        return json_integer(vs->val[i]);
    }
    if (json_is_array(v)) {
        json_t *a = json_array();
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            json_t *y = substitute(x, vs, why, wn);
            if (!y) {
                json_decref(a);
                return NULL;
            }
            json_array_append_new(a, y);
        }
        return a;
    }
    if (json_is_object(v)) {
        json_t *o = json_object();
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) {
            json_t *y = substitute(x, vs, why, wn);
            if (!y) {
                json_decref(o);
                return NULL;
            }
            json_object_set_new(o, k, y);
        }
        return o;
    }
    return json_incref(v);
}

static bool num_of(const msgpack_object *o, double *d)
{
    switch (o->type) {
    case MSGPACK_OBJECT_POSITIVE_INTEGER: *d = (double)o->via.u64; return true;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: *d = (double)o->via.i64; return true;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: *d = o->via.f64; return true;
    default: return false;
    }
}

/* A doc string with the bound $names in it replaced by their values. */
static size_t expand(const char *in, const doc_vars *vs, char *out,
                     size_t cap)
{
    size_t n = 0;
    for (const char *p = in; *p && n + 24 < cap;) {
        if (*p == '$') {
            char name[32];
            size_t k = 0;
            const char *q = p + 1;
            while (k + 1 < sizeof name && ((*q >= 'a' && *q <= 'z') ||
                                            *q == '_' ||
                                            (*q >= '0' && *q <= '9')))
                name[k++] = *q++;
            name[k] = '\0';
            int i = k ? var_find((doc_vars *)vs, name) : -1;
            if (i >= 0) {
                n += (size_t)snprintf(out + n, cap - n, "%lld",
                                      (long long)vs->val[i]);
                p = q;
                continue;
            }
        }
        out[n++] = *p++;
    }
    out[n] = '\0';
    return n;
}

/* Whether the host's `a` matches the doc's `e`; binds $names in `vs`
 * (only when it matches: callers pass a scratch copy). */
static bool match(const json_t *e, const msgpack_object *a, doc_vars *vs,
                  bool shape)
{
    if (is_tag(e, WILD))
        return true;
    if (is_tag(e, VAR)) {
        if (a->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return false;
        const char *name = json_string_value(e) + 1;
        int i = var_find(vs, name);
        if (i >= 0)
            return vs->val[i] == (int64_t)a->via.u64;
        if (vs->n == MAX_VARS)
            return false;
        snprintf(vs->name[vs->n], sizeof vs->name[0], "%s", name);
        vs->val[vs->n++] = (int64_t)a->via.u64;
        return true;
    }
    switch (json_typeof(e)) {
    case JSON_NULL:
        return a->type == MSGPACK_OBJECT_NIL;
    case JSON_TRUE:
    case JSON_FALSE:
        return a->type == MSGPACK_OBJECT_BOOLEAN &&
               a->via.boolean == json_is_true(e);
    case JSON_INTEGER:
    case JSON_REAL: {
        double d;
        if (!num_of(a, &d))
            return false;
        return shape || fabs(d - json_number_value(e)) < 1e-9;
    }
    case JSON_STRING: {
        const char *p;
        size_t n;
        if (!th_rpc_obj_str(a, &p, &n))
            return false;
        char s[1024];
        size_t sn = expand(json_string_value(e), vs, s, sizeof s);
        if (sn >= 3 && strcmp(s + sn - 3, "...") == 0)
            return n >= sn - 3 && memcmp(p, s, sn - 3) == 0;
        return n == sn && memcmp(p, s, n) == 0;
    }
    case JSON_ARRAY: {
        if (a->type != MSGPACK_OBJECT_ARRAY)
            return false;
        size_t ne = json_array_size(e);
        bool open = ne > 0 && is_tag(json_array_get(e, ne - 1), WILD);
        size_t need = open ? ne - 1 : ne;
        if (open ? a->via.array.size < need : a->via.array.size != ne)
            return false;
        for (size_t i = 0; i < need; i++)
            if (!match(json_array_get(e, i), &a->via.array.ptr[i], vs,
                       shape))
                return false;
        return true;
    }
    case JSON_OBJECT: {
        if (a->type != MSGPACK_OBJECT_MAP)
            return false;
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)e, k, x) {
            const msgpack_object *v = th_rpc_map_get(a, k);
            if (!v || !match(x, v, vs, shape))
                return false;
        }
        return true;
    }
    }
    return false;
}

/* The host's message as JSON text, for a failure report. */
static void describe(const msgpack_object *m, char *out, size_t cap)
{
    th_error err;
    json_t *j = th_json_from_object_lossy(m, &err);
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    snprintf(out, cap, "%s", s ? s : "(not printable)");
    free(s);
    json_decref(j);
}

typedef struct doc_block {
    int line;                   /* of its first message, in the doc */
    bool shape;
    int n;
    char dir[64];               /* '>' send, '<' expect */
    int at[64];                 /* doc line of each message */
    char *msg[64];
} doc_block;

/* Runs one block on a fresh connection; false with the reason in why. */
static bool run_block(rpc_srv *s, const doc_block *b, char *why, size_t wn)
{
    rpc_raw w;
    if (rpc_raw_open(&w, s) != 0) {
        snprintf(why, wn, "cannot connect");
        return false;
    }
    doc_vars vs = {.n = 0};
    bool ok = true;
    char seen[2048] = "";
    for (int i = 0; i < b->n && ok; i++) {
        char *js = to_json(b->msg[i]);
        json_error_t je;
        json_t *e = js ? json_loads(js, JSON_DECODE_ANY, &je) : NULL;
        free(js);
        if (!e) {
            snprintf(why, wn, "line %d: not JSON (%s): %s", b->at[i],
                     js ? je.text : "out of memory", b->msg[i]);
            ok = false;
            break;
        }
        if (b->dir[i] == '>') {
            json_t *v = substitute(e, &vs, why, wn);
            if (!v) {
                ok = false;
            } else {
                th_buf f = TH_BUF_INIT;
                msgpack_packer pk;
                msgpack_packer_init(&pk, &f, th_buf_msgpack_write);
                rpc_pack_value(&pk, v);
                rpc_raw_send(&w, f.data, f.len);
                th_buf_destroy(&f);
                json_decref(v);
            }
            json_decref(e);
            continue;
        }
        /* Expected: the stash first, then the wire. */
        bool hit = false;
        int64_t end = rpc_now_ms() + rpc_wait_ms();
        seen[0] = '\0';
        int n_stash = w.n_stash;
        for (int k = 0; k < n_stash && !hit; k++) {
            const msgpack_object *m = rpc_raw_next(&w, 0);
            doc_vars try = vs;
            if (m && match(e, m, &try, b->shape)) {
                vs = try;
                hit = true;
            } else if (m) {
                char d[512];
                describe(m, d, sizeof d);
                size_t sl = strlen(seen);
                snprintf(seen + sl, sizeof seen - sl, "\n      %s", d);
                rpc_raw_stash(&w, m);
            }
        }
        while (!hit) {
            int left = (int)(end - rpc_now_ms());
            const msgpack_object *m =
                left > 0 ? rpc_raw_read(&w, left) : NULL;
            if (!m)
                break;
            doc_vars try = vs;
            if (match(e, m, &try, b->shape)) {
                vs = try;
                hit = true;
                break;
            }
            char d[512];
            describe(m, d, sizeof d);
            size_t sl = strlen(seen);
            snprintf(seen + sl, sizeof seen - sl, "\n      %s", d);
            rpc_raw_stash(&w, m);
        }
        if (!hit) {
            snprintf(why, wn, "line %d: nothing matched\n    %s\n    got:%s",
                     b->at[i], b->msg[i], seen[0] ? seen : " nothing");
            ok = false;
        }
        json_decref(e);
    }
    rpc_raw_close(&w);
    return ok;
}

/* Reads the rpc blocks of the doc. */
static int read_blocks(const char *path, doc_block **out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    doc_block *v = NULL;
    int n = 0, lineno = 0;
    bool in = false;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\n")] = '\0';
        const char *t = line;
        while (*t == ' ')
            t++;
        if (!in) {
            if (strncmp(t, "```rpc", 6) == 0 &&
                (t[6] == '\0' || t[6] == ' ')) {
                doc_block *nv = realloc(v, (size_t)(n + 1) * sizeof *v);
                if (!nv)
                    break;
                v = nv;
                memset(&v[n], 0, sizeof v[n]);
                v[n].shape = strstr(t + 6, "shape") != NULL;
                v[n].line = lineno + 1;
                n++;
                in = true;
            }
            continue;
        }
        if (strncmp(t, "```", 3) == 0) {
            in = false;
            continue;
        }
        doc_block *b = &v[n - 1];
        bool send = strncmp(t, "\xe2\x86\x92", 3) == 0;  /* → */
        bool recv = strncmp(t, "\xe2\x86\x90", 3) == 0;  /* ← */
        if ((send || recv) && b->n < 64) {
            b->dir[b->n] = send ? '>' : '<';
            b->at[b->n] = lineno;
            b->msg[b->n] = strdup(t + 3);
            b->n++;
        } else if (b->n > 0 && *t) {
            /* continues the message above */
            char *prev = b->msg[b->n - 1];
            size_t a = strlen(prev), c = strlen(t);
            char *m = realloc(prev, a + c + 2);
            if (m) {
                m[a] = ' ';
                memcpy(m + a + 1, t, c + 1);
                b->msg[b->n - 1] = m;
            }
        }
    }
    fclose(f);
    *out = v;
    return n;
}

static void test_examples(void)
{
    doc_block *blocks = NULL;
    int n = read_blocks(th_test_source_path("docs/protocol.md"), &blocks);
    CU_ASSERT_FATAL(n >= 0);
    /* The doc has examples for every method and notification: a parser
     * that finds few is broken, not the doc. */
    CU_ASSERT(n >= 15);
    rpc_srv s;
    rpc_opts o = {.config = doc_config};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    char *big = th_test_write_file(s.dir, "big.log",
                                   "one two three four\n"
                                   "five six seven eight\n"
                                   "nine ten eleven twelve\n",
                                   (size_t)-1);
    free(big);
    int failed = 0, messages = 0;
    for (int i = 0; i < n; i++) {
        char why[4096];
        messages += blocks[i].n;
        if (blocks[i].n == 0 || !run_block(&s, &blocks[i], why, sizeof why)) {
            if (blocks[i].n == 0)
                snprintf(why, sizeof why, "an empty example");
            fprintf(stderr, "\ndocs/protocol.md:%d: example fails: %s\n",
                    blocks[i].line, why);
            failed++;
        }
    }
    fprintf(stderr, "protocol.md: %d examples, %d messages, %d failed\n", n,
            messages, failed);
    CU_ASSERT_EQUAL(failed, 0);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < blocks[i].n; k++)
            free(blocks[i].msg[k]);
    free(blocks);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    if (failed)
        rpc_dump_log(&s);
    rpc_srv_free(&s);
}

/* The notation itself: a checker that accepts anything proves nothing. */
static void test_matcher(void)
{
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    th_buf b = TH_BUF_INIT;
    rpc_pack_json(&b, "[1, 7, null, {\"status\": \"running\", \"task_id\": 31,"
                      " \"message\": \"step 1/2\"}]");
    size_t off = 0;
    CU_ASSERT_FATAL(msgpack_unpack_next(&u, (const char *)b.data, b.len,
                                        &off) == MSGPACK_UNPACK_SUCCESS);
    static const struct {
        const char *doc;
        bool shape, want;
    } cases[] = {
        {"[1, 7, nil, {\"status\": \"running\", \"task_id\": $t}]", false,
         true},
        {"[1, 7, nil, {\"status\": \"running\", \"task_id\": 31, "
         "\"message\": \"step...\"}]", false, true},
        {"[1, 7, nil, ...]", false, true},
        {"[1, 7, nil, {\"status\": \"running\", ...}]", false, true},
        {"[1, 7, nil, {\"status\": \"done\", ...}]", false, false},
        {"[$one, 7, nil, {\"message\": \"step $one/2\"}]", false, true},
        {"[$one, 7, nil, {\"message\": \"step 2/$one\"}]", false, false},
        {"[1, 7, ...]", false, true},
        {"[1, 7, nil, {...}]", false, true},
        {"[1, 8, nil, {...}]", false, false},
        {"[1, 7, nil]", false, false},
        {"[1, 7, nil, {\"status\": \"done\"}]", false, false},
        {"[1, 7, nil, {\"missing\": ...}]", false, false},
        {"[1, 7, nil, {\"task_id\": 32}]", false, false},
        {"[1, 7, nil, {\"task_id\": 32}]", true, true},
        {"[1, 7, nil, {\"message\": \"step 2...\"}]", false, false},
        {"[1, 7, nil, {\"task_id\": \"31\"}]", false, false},
        {"[1, 7, nil, {\"task_id\": $t, \"status\": \"running\"}, 1]", false,
         false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *js = to_json(cases[i].doc);
        json_t *e = json_loads(js, JSON_DECODE_ANY, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(e);
        doc_vars vs = {.n = 0};
        bool got = match(e, &u.data, &vs, cases[i].shape);
        if (got != cases[i].want)
            fprintf(stderr, "matcher: %s gave %d\n", cases[i].doc, got);
        CU_ASSERT_EQUAL(got, cases[i].want);
        json_decref(e);
        free(js);
    }
    /* a bound name must match again with the same value */
    char *js = to_json("[1, $m, nil, {\"task_id\": $m}]");
    json_t *e = json_loads(js, JSON_DECODE_ANY, NULL);
    doc_vars vs = {.n = 0};
    CU_ASSERT_FALSE(match(e, &u.data, &vs, false));
    json_decref(e);
    free(js);
    msgpack_unpacked_destroy(&u);
    th_buf_destroy(&b);
}

void th_suite_protocol_doc(void)
{
    CU_pSuite s = CU_add_suite("protocol_doc", NULL, NULL);
    CU_add_test(s, "matcher", test_matcher);
    CU_add_test(s, "examples", test_examples);
}
