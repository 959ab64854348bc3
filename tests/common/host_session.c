/* host_session.c - see host_session.h. */
#include "host_session.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "th/config.h"
#include "th/buf.h"
#include "th/err.h"
#include "th/json.h"
#include "th/log.h"
#include "th_test.h"

th_host *th_test_host_open(const char *name, const char *yaml)
{
    th_config *cfg = NULL;
    th_error e;
    th_error_clear(&e);
    int lvl = th_log_get_level();
    if (th_config_parse(name, "/", yaml, strlen(yaml), &cfg, &e)) {
        fprintf(stderr, "config: %s\n", e.msg);
        return NULL;
    }
    th_host *h = NULL;
    if (th_host_open(cfg, &h, &e)) {
        fprintf(stderr, "host: %s\n", e.msg);
        h = NULL;
    }
    th_log_set_level(lvl);
    return h;
}

th_host *th_test_echo_host_open(void)
{
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "host:\n  log_level: error\n  shutdown_grace: 50ms\n"
             "plugins:\n  - name: echo\n    path: %s\n",
             th_test_build_path("plugins/echo.so"));
    return th_test_host_open("echo.yaml", yaml);
}

int th_test_host_session_open(const char *name, const char *yaml,
                              th_host **h, th_session **s)
{
    *s = NULL;
    *h = th_test_host_open(name, yaml);
    if (!*h)
        return -1;
    static const th_front_ops ops = {.front = TOOLHOST_FRONT_RPC};
    th_principal who = {(uint32_t)getuid(), (uint32_t)getgid(), true};
    *s = th_session_open(*h, &who, &ops, NULL);
    if (!*s) {
        fprintf(stderr, "session: cannot open\n");
        th_host_close(*h);
        *h = NULL;
        return -1;
    }
    return 0;
}

void th_test_host_session_close(th_host *h, th_session *s)
{
    if (s)
        th_session_close(s);
    if (h)
        th_host_close(h);
}

int th_test_call_json_opts(th_session *s, const char *tool, const char *json,
                           const th_call_opts *o, th_result_copy *r)
{
    json_t *j = json_loads(json, 0, NULL);
    th_buf a = TH_BUF_INIT;
    th_json_to_msgpack(j, &a);
    json_decref(j);
    memset(r, 0, sizeof *r);
    int rc = th_call_sync(s, tool, a.data, a.len, o, NULL, NULL, NULL, r);
    th_buf_destroy(&a);
    return rc;
}

int th_test_call_json(th_session *s, const char *tool, const char *json,
                      int64_t timeout_ms, bool may_block, th_result_copy *r)
{
    th_call_opts o;
    memset(&o, 0, sizeof o);
    o.timeout_ms = timeout_ms;
    o.may_block = may_block;
    return th_test_call_json_opts(s, tool, json, &o, r);
}

const char *th_test_out(const th_result_copy *r)
{
    return r->out.data ? (const char *)r->out.data : "";
}
