/* front/content.h - resources, prompts and completion answered for a
 * front: the methods resources.list, resources.templates, resources.read,
 * prompts.list, prompts.get and completion.complete, their params (a
 * msgpack array) checked and their results packed once, in the forms of
 * docs/protocol.md ("Resources, prompts and completion"), for every front
 * that carries msgpack (msgpack-RPC, NATS).  Served through the core's
 * session functions (th/content.h): a caller sees what its toolsets
 * offer and nothing else.
 *
 * Threads: the caller's; the plugins' read(), get() and complete() run
 * on it (plugin.h: they never block).  Params may be freed once
 * th_front_content() returns: nothing is kept. */
#ifndef TH_FRONT_CONTENT_H
#define TH_FRONT_CONTENT_H

#include <msgpack.h>
#include <stddef.h>

#include "th/buf.h"
#include "th/err.h"

struct th_session;

typedef enum th_fc_method {
    TH_FC_RESOURCES_LIST,
    TH_FC_RESOURCES_TEMPLATES,
    TH_FC_RESOURCES_READ,
    TH_FC_PROMPTS_LIST,
    TH_FC_PROMPTS_GET,
    TH_FC_COMPLETE,
    TH_FC_N
} th_fc_method;

/* The methods' names ("resources.list", ...), indexed by th_fc_method. */
extern const char *const th_fc_names[TH_FC_N];

/* What one answer's blocks may hold at most (16 MiB); a front passes
 * less when its own output budget is smaller. */
#define TH_FC_CONTENT_MAX (16u << 20)

/* Answers method m with `params` (a msgpack array, as msgpack-RPC's) for
 * session s.  `budget`: the bytes the answer's blocks may hold (0 or more
 * than TH_FC_CONTENT_MAX: TH_FC_CONTENT_MAX); past it the plugin's
 * content_add() is refused, the core logs it and the request fails.
 * 0 with the result's msgpack bytes appended to out; otherwise a TH_E*
 * code with a sentence in err naming the problem:
 *   TH_EINVAL  params of the wrong shape ("resources.read takes [uri],
 *              got 2 params", "...: uri must be 1 to 2048 bytes without
 *              NUL, got 5000 bytes", ...);
 *   TH_ENOTFOUND, TH_EARGS, TH_EFAILED, TH_ETOOL  as th_session_read(),
 *              th_session_prompt_get() and th_session_complete() say;
 *   TH_ENOMEM  "out of memory". */
int th_front_content(struct th_session *s, th_fc_method m,
                     const msgpack_object *params, size_t budget, th_buf *out,
                     th_error *err);

#endif /* TH_FRONT_CONTENT_H */
