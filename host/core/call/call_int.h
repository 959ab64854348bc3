/* call_int.h - what the files of one call share (call.c, call_start.c,
 * call_cb.c, call_sync.c).  Private to host/core. */
#ifndef TH_CALL_INT_H
#define TH_CALL_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "manager.h"
#include "th/progress.h"

/* An error answered before a call object exists (on the caller's thread). */
void th_call_emit_error(th_event_fn fn, void *ud, uint64_t id, int code,
                        const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* With c->mu held: delivers every pending event (ack, progress, final)
 * unless another thread is delivering.  Returns with mu held. */
void th_call_deliver_locked(th_mcall *c);

/* Answers with a tool error unless already answered; true when this
 * answer won.  No lock held. */
bool th_call_answer_error(th_mcall *c, int code, const char *msg);
/* The same with a retry-after hint in the answer (0: none). */
bool th_call_answer_error_retry(th_mcall *c, int code, const char *msg,
                                uint64_t retry_after_ms);

/* A call waiting for permission that got answered meanwhile: whoever moves
 * it out of PERM_WAIT drops its execution reference. */
void th_call_perm_settle(th_mcall *c);

/* The stages after the call record (call_start.c): arguments, permission,
 * then the manager.  Consumes the execution reference.  On the caller's
 * thread, or on a pool worker for a caller that must not block. */
void th_call_prepare(th_mcall *c);

/* ABI 1.1 cancel hooks (call_cb.c).  Cancellation reached the call: wake
 * its cancel_fd and run its on_cancel hook once, unless it has ended.  No
 * lock held. */
void th_call_cancel_hooks_fire(th_mcall *c);
/* Frees what write_block() and ask_client() left in x (call_cb.c). */
void th_call_answers_free(th_mcall_x *x);
/* Under c->mu: the call ends; no hook may run after this returns. */
void th_call_cancel_hooks_end_locked(th_mcall *c);

/* With c->mu and s->mu held (s = c->s): the call enters its session's
 * call map and counts as executing there (exec_live), unless it is there
 * already or answered.  What a call in a call slot (th_mgr_cslot_put)
 * does when it outlives its inline run.  0, TH_ESTATE (the session
 * closes: nothing changed) or TH_ENOMEM. */
int th_call_session_put_locked(th_mcall *c);
/* The same taking s->mu; c->mu held. */
int th_call_session_enter_locked(th_mcall *c);

/* A zeroed call record (call.c) with its mutex set up; with `room`,
 * followed by the room for its th_mcall_x (c->x, x_room set), set up as
 * th_call_x_init does; taken from this thread's pool of freed ones when
 * it has one (which keep the mutex and condition variable set up).  NULL
 * when out of memory.  th_call_rec_free gives it back (or frees it, with
 * an x of its own). */
th_mcall *th_call_rec_new(bool room);
void th_call_rec_free(th_mcall *c);

/* A call's x (th_mcall_x), zeroed: its answer part set up (condition
 * variable, no eventfd, fraction unknown). */
void th_call_x_init(th_mcall_x *x);
/* With c->mu held: waits on the call's condition variable (in its x; a
 * call with no x polls); th_call_wake_locked wakes every waiter. */
void th_call_wait_locked(th_mcall *c);
/* The owner's inline call leaves its call slot (call.c: counted in the
 * session's finals_owed while its final callback is still to return). */
void th_call_slot_leave_locked(th_mcall *c);
void th_call_wake_locked(th_mcall *c);

#endif
