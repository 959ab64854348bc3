/* result.c - a call's result copied into owned memory (th_result_copy,
 * th/host.h): a leaf of the core, so the codec, the task store and the
 * fronts can copy results without calling into the call path. */
#include <stdlib.h>
#include <string.h>

#include "th/host.h"

void th_result_copy_destroy(th_result_copy *r)
{
    if (!r)
        return;
    if (!r->out.data && !r->err.data && !r->meta.data && !r->message) {
        /* nothing owned (a result moved out, an error with the default
         * message): the common case of the several per call */
        r->out.len = r->out.cap = r->err.len = r->err.cap = 0;
        r->meta.len = r->meta.cap = 0;
        return;
    }
    th_buf_destroy(&r->out);
    th_buf_destroy(&r->err);
    th_buf_destroy(&r->meta);
    free(r->message);
    r->message = NULL;
}

int th_result_copy_from(th_result_copy *dst, const th_result *src)
{
    memset(dst, 0, sizeof *dst);
    dst->kind = src->kind;
    dst->ok = src->ok;
    dst->error = src->error;
    dst->task_id = src->task_id;
    dst->structured = src->structured;
    dst->retry_after_ms = src->retry_after_ms;
    if ((src->out_len && th_buf_append(&dst->out, src->out, src->out_len)) ||
        (src->err_len && th_buf_append(&dst->err, src->err, src->err_len)) ||
        (src->meta && th_buf_append(&dst->meta, src->meta, src->meta_len)) ||
        (src->message && !(dst->message = strdup(src->message)))) {
        th_result_copy_destroy(dst);
        return TH_ENOMEM;
    }
    return 0;
}
