/* rpc_content.c - resources, prompts and completion over msgpack-RPC:
 * resources.list, resources.templates, resources.read, prompts.list,
 * prompts.get and completion.complete (docs/protocol.md, "Resources,
 * prompts and completion").  Params are checked and results packed by
 * th_front_content() (host/front/content.c), which the NATS front's
 * content subjects share; here: the connection's session and budget,
 * and the answer.
 *
 * Threads.  The loop thread, from rpc_dispatch(); the plugins' read(),
 * get() and complete() run here too (plugin.h: they never block), as they
 * do on the MCP front's thread.
 */
#include "rpc_int.h"

#include "front/content.h"

/* The bytes one answer's blocks may hold: 16 MiB, or half of
 * host.max_outbuf when that is less (the answer must fit the client's
 * output budget with room to spare).  Past it the plugin's content_add()
 * is refused and the request fails (the core logs it). */
static size_t budget(const rpc_conn *c)
{
    uint64_t half = c->srv->max_outbuf / 2;
    return half && half < TH_FC_CONTENT_MAX ? (size_t)half
                                            : TH_FC_CONTENT_MAX;
}

static void answer(rpc_conn *c, uint64_t msgid, const msgpack_object *params,
                   th_fc_method m)
{
    th_buf r = TH_BUF_INIT;
    th_error err;
    int rc = th_front_content(c->session, m, params, budget(c), &r, &err);
    if (rc)
        send_error(c, msgid, rc, "%s", err.msg);
    else
        send_result(c, msgid, &r);
    th_buf_destroy(&r);
}

/* ---- Digests (resources.changed, prompts.changed) ------------------------- */

/* The digest of what the lists methods answer session s (their msgpack
 * bytes, appended one after the other); 0 when one failed. */
static uint64_t lists_digest(th_session *s, const th_fc_method *ms, int n)
{
    msgpack_object none = {.type = MSGPACK_OBJECT_ARRAY};
    th_buf items = TH_BUF_INIT;
    th_error err;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        rc = th_front_content(s, ms[i], &none, 0, &items, &err);
    uint64_t d = rc == 0 ? th_view_digest(items.data, items.len) : 0;
    th_buf_destroy(&items);
    return d;
}

uint64_t rpc_resources_digest(th_session *s, void *ud)
{
    (void)ud;
    static const th_fc_method ms[] = {TH_FC_RESOURCES_LIST,
                                      TH_FC_RESOURCES_TEMPLATES};
    return lists_digest(s, ms, 2);
}

uint64_t rpc_prompts_digest(th_session *s, void *ud)
{
    (void)ud;
    static const th_fc_method ms[] = {TH_FC_PROMPTS_LIST};
    return lists_digest(s, ms, 1);
}

void rpc_m_resources_list(rpc_conn *c, uint64_t msgid,
                          const msgpack_object *params)
{
    answer(c, msgid, params, TH_FC_RESOURCES_LIST);
}

void rpc_m_resources_templates(rpc_conn *c, uint64_t msgid,
                               const msgpack_object *params)
{
    answer(c, msgid, params, TH_FC_RESOURCES_TEMPLATES);
}

void rpc_m_resources_read(rpc_conn *c, uint64_t msgid,
                          const msgpack_object *params)
{
    answer(c, msgid, params, TH_FC_RESOURCES_READ);
}

void rpc_m_prompts_list(rpc_conn *c, uint64_t msgid,
                        const msgpack_object *params)
{
    answer(c, msgid, params, TH_FC_PROMPTS_LIST);
}

void rpc_m_prompts_get(rpc_conn *c, uint64_t msgid,
                       const msgpack_object *params)
{
    answer(c, msgid, params, TH_FC_PROMPTS_GET);
}

void rpc_m_complete(rpc_conn *c, uint64_t msgid, const msgpack_object *params)
{
    answer(c, msgid, params, TH_FC_COMPLETE);
}
