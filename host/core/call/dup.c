/* dup.c - the duplicate table: calls of the same tool (and, per the
 * toolset's duplicate_scope, the same arguments) while one runs, handled
 * per on_duplicate_call (allow, reject, replace, confirm).  Under
 * host->dmu; see th/manager.h for the lock order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "manager.h"

/* ---- Duplicates ------------------------------------------------------------- */

struct dup_node;

/* A call's entry in the table (th_mcall.dup_link): made only for the
 * calls of a tool whose policy is not `allow`, so that the record of every
 * other call carries one pointer, not the links. */
typedef struct dup_link {
    th_mcall *c;
    struct dup_link *prev, *next;
    struct dup_node *n;
} dup_link;

typedef struct dup_node {
    uint64_t hash;
    uint8_t *key;
    size_t len;
    dup_link *head;
    struct dup_node *next;
} dup_node;

/* The call's policy and scope, from its snapshot (c->ts and its override
 * c->ov, found when the call started: no name lookup here). */
static void policy_of(const th_mcall *c, th_dup_policy *pol, th_dup_scope *scope)
{
    *pol = th_call_dup_policy(c);
    *scope = th_call_dup_scope(c);
}

/* The domain of a duplicate: toolset, session (for session scope), tool
 * and, for name_and_args, the canonical arguments. */
static int dup_key(th_mcall *c, th_dup_scope scope, th_buf *k)
{
    uint64_t sid = c->scope == TH_SCOPE_TOOLSET ? 0 : c->s->id;
    int32_t ts = c->ts_idx;
    if (th_buf_append(k, &ts, sizeof ts) || th_buf_append(k, &sid, sizeof sid) ||
        th_buf_append(k, c->tool->name, strlen(c->tool->name) + 1))
        return TH_ENOMEM;
    if (scope == TH_DUPSCOPE_NAME_AND_ARGS)
        return th_msgpack_canonical(c->args, c->args_len, k);
    return 0;
}

int th_dup_register(th_mcall *c, char *msg, size_t msg_size)
{
    const th_mgr_ops *ops = c->h->mgr.ops;
    th_host *h = c->h;
    th_dup_policy pol;
    th_dup_scope scope;
    policy_of(c, &pol, &scope);
    if (pol == TH_DUP_ALLOW)
        return 0;
    th_buf k = TH_BUF_INIT;
    dup_link *link = calloc(1, sizeof *link);
    if (!link || dup_key(c, scope, &k) != 0) {
        free(link);
        th_buf_destroy(&k);
        snprintf(msg, msg_size, "out of memory checking for duplicates");
        return TH_ENOMEM;
    }
    uint64_t hv = th_hash_bytes(k.data, k.len);
    size_t b = hv & (h->dup_nb - 1);
    th_mcall *victims[64];
    size_t nv = 0;
    msg[0] = '\0';
    int refuse = 0;

    pthread_mutex_lock(&h->dmu);
    dup_node *n;
    for (n = h->dup_b[b]; n; n = n->next)
        if (n->hash == hv && n->len == k.len && memcmp(n->key, k.data, k.len) == 0)
            break;
    if (n && n->head) {
        if (pol == TH_DUP_REJECT || (pol == TH_DUP_CONFIRM && !c->confirm)) {
            int off = snprintf(msg, msg_size, "a call of %s with %s is still running:",
                               c->tool->name,
                               scope == TH_DUPSCOPE_NAME ? "any arguments" : "the same arguments");
            int64_t now = th_now_ns();
            int shown = 0;
            for (dup_link *l = n->head; l && off < (int)msg_size - 120; l = l->next) {
                th_mcall *o = l->c;
                if (shown++ == 5) {
                    off += snprintf(msg + off, msg_size - off, " ...");
                    break;
                }
                off += snprintf(msg + off, msg_size - off, " task_id %llu (running %.1f s)",
                                (unsigned long long)o->base.pub.call_id,
                                (double)(now - o->start_ns) / 1e9);
            }
            snprintf(msg + off, msg_size - off,
                     pol == TH_DUP_CONFIRM
                         ? ". Wait for it, cancel it with cancel_task(task_id), or call again with confirm_duplicate=true."
                         : ". Wait for it or cancel it with cancel_task(task_id).");
            refuse = TH_EDUPLICATE;
        } else if (pol == TH_DUP_REPLACE) {
            for (dup_link *l = n->head; l; l = l->next) {
                th_mcall *o = l->c;
                /* Another session's call that is not (yet) a shared task
                 * is not ours to cancel. */
                if (o->s != c->s && !atomic_load(&o->is_task)) {
                    snprintf(msg, msg_size,
                             "call %llu of %s cannot be replaced: it belongs to another session",
                             (unsigned long long)o->base.pub.call_id, c->tool->name);
                    refuse = TH_EDUPLICATE;
                    break;
                }
                if (nv < 64) {
                    ops->ref(o);
                    victims[nv++] = o;
                }
            }
        }
    }
    if (!refuse) {
        if (!n && (n = calloc(1, sizeof *n))) {
            n->hash = hv;
            n->len = k.len;
            n->key = th_buf_take(&k, &n->len);
            n->next = h->dup_b[b];
            h->dup_b[b] = n;
        }
        if (!n) {
            refuse = TH_ENOMEM;
            snprintf(msg, msg_size, "out of memory checking for duplicates");
        } else {
            link->c = c;
            link->prev = NULL;
            link->next = n->head;
            if (n->head)
                n->head->prev = link;
            n->head = link;
            link->n = n;
            c->dup_link = link;
            link = NULL;
            ops->ref(c);
        }
    }
    pthread_mutex_unlock(&h->dmu);
    th_buf_destroy(&k);
    free(link); /* not taken: refused */
    if (refuse) {
        for (size_t i = 0; i < nv; i++)
            ops->unref(victims[i]);
        return refuse;
    }
    char why[1024];
    snprintf(why, sizeof why, "replaced by a newer call of %s (call %llu)", c->tool->name,
             (unsigned long long)c->base.pub.call_id);
    for (size_t i = 0; i < nv; i++) {
        ops->abort(victims[i], TH_ECANCELLED, why);
        ops->unref(victims[i]);
    }
    return 0;
}

void th_dup_leave_table(th_mcall *c)
{
    th_host *h = c->h;
    /* A call whose policy is `allow` (the common case) never joins the
     * table (th_dup_register): th_dup_leave (manager.h) comes here only
     * for the others.  (The policy comes from the call's own config
     * snapshot: it cannot change.) */
    pthread_mutex_lock(&h->dmu);
    dup_link *l = c->dup_link;
    if (!l) {
        pthread_mutex_unlock(&h->dmu);
        return;
    }
    dup_node *n = l->n;
    if (l->prev)
        l->prev->next = l->next;
    else
        n->head = l->next;
    if (l->next)
        l->next->prev = l->prev;
    c->dup_link = NULL;
    free(l);
    if (!n->head) {
        size_t b = n->hash & (h->dup_nb - 1);
        for (dup_node **pp = (dup_node **)&h->dup_b[b]; *pp; pp = &(*pp)->next)
            if (*pp == n) {
                *pp = n->next;
                break;
            }
        free(n->key);
        free(n);
    }
    pthread_mutex_unlock(&h->dmu);
    atomic_fetch_sub(&c->refs, 1); /* never the last: the caller holds one */
}

void th_dup_destroy(th_host *h)
{
    if (!h->dup_b)
        return;
    for (size_t b = 0; b < h->dup_nb; b++) {
        dup_node *n = h->dup_b[b];
        while (n) {
            dup_node *next = n->next;
            free(n->key);
            free(n);
            n = next;
        }
        h->dup_b[b] = NULL;
    }
}
