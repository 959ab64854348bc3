/* progress.c - the one progress path's coalescing slot: the latest update
 * wins, the replaced ones are counted.  See th/progress.h. */
#include <stdlib.h>
#include <string.h>

#include "th/err.h"
#include "th/progress.h"

int th_progress_copy(th_progress_update *u, uint64_t task_id, double fraction,
                     const char *message, const uint8_t *data,
                     size_t data_len, uint32_t coalesced)
{
    memset(u, 0, sizeof *u);
    u->task_id = task_id;
    u->fraction = fraction;
    u->coalesced = coalesced;
    if (message && !(u->message = strdup(message)))
        return TH_ENOMEM;
    if (data && data_len) {
        if (!(u->data = malloc(data_len))) {
            th_progress_update_destroy(u);
            return TH_ENOMEM;
        }
        memcpy(u->data, data, data_len);
        u->data_len = data_len;
    }
    return 0;
}

int th_progress_copy_event(th_progress_update *u, const th_event *ev)
{
    return th_progress_copy(u, ev->task_id, ev->fraction, ev->message,
                            ev->data, ev->data_len, ev->coalesced);
}

void th_progress_update_destroy(th_progress_update *u)
{
    free(u->message);
    free(u->data);
    u->message = NULL;
    u->data = NULL;
    u->data_len = 0;
}

void th_progress_put(th_progress_slot *p, th_progress_update *u)
{
    uint32_t folded = p->pending ? p->coalesced + 1 : 0;
    free(p->message);
    free(p->data);
    p->pending = true;
    p->task_id = u->task_id;
    p->fraction = u->fraction;
    p->message = u->message;
    p->data = u->data;
    p->data_len = u->data ? u->data_len : 0;
    p->coalesced = folded + u->coalesced;
    memset(u, 0, sizeof *u);
}

bool th_progress_take(th_progress_slot *p, th_progress_update *u)
{
    memset(u, 0, sizeof *u);
    if (!p->pending)
        return false;
    u->task_id = p->task_id;
    u->fraction = p->fraction;
    u->message = p->message;
    u->data = p->data;
    u->data_len = p->data_len;
    u->coalesced = p->coalesced;
    memset(p, 0, sizeof *p);
    return true;
}

void th_progress_event(const th_progress_update *u, uint64_t call_id,
                       th_event *ev)
{
    memset(ev, 0, sizeof *ev);
    ev->kind = TH_EV_PROGRESS;
    ev->call_id = call_id;
    ev->task_id = u->task_id;
    ev->fraction = u->fraction;
    ev->message = u->message;
    ev->data = u->data;
    ev->data_len = u->data_len;
    ev->coalesced = u->coalesced;
}

void th_progress_clear(th_progress_slot *p)
{
    free(p->message);
    free(p->data);
    memset(p, 0, sizeof *p);
}
