/* th/progress.h - the one progress path's coalescing slot
 * (host/core/call/progress.c).
 *
 * A producer (a tool's progress() callback, a call's event callback on
 * another thread) puts updates into a slot; the slot keeps only the latest
 * one and counts how many it replaced.  A subscriber (the notifier thread
 * delivering a call's events, th_call_sync's waiter, run_code forwarding a
 * nested tool's progress, a front) takes it when it is ready: it never sees
 * a backlog, only the newest update and how many were folded into it.
 *
 * A slot has no lock of its own: its owner's lock guards it (call->mu,
 * the waiter's mutex). */
#ifndef TH_PROGRESS_H
#define TH_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/host.h"

typedef struct th_progress_slot {
    bool pending;           /* an update waits to be taken */
    uint64_t task_id;
    double fraction;        /* < 0: unknown */
    char *message;          /* owned, may be NULL */
    uint8_t *data;          /* owned msgpack value, may be NULL */
    size_t data_len;
    uint32_t coalesced;     /* updates folded into the pending one */
} th_progress_slot;

/* An update copied out of the producer's buffers before the owner's lock
 * is taken (so that no allocation happens under it). */
typedef struct th_progress_update {
    uint64_t task_id;
    double fraction;
    char *message;
    uint8_t *data;
    size_t data_len;
    uint32_t coalesced;     /* already folded upstream */
} th_progress_update;

/* Copies (message, data) into *u.  0 or TH_ENOMEM (then *u holds
 * nothing).  No lock needed. */
int th_progress_copy(th_progress_update *u, uint64_t task_id, double fraction,
                     const char *message, const uint8_t *data,
                     size_t data_len, uint32_t coalesced);
/* The same from a PROGRESS event. */
int th_progress_copy_event(th_progress_update *u, const th_event *ev);
void th_progress_update_destroy(th_progress_update *u);

/* Makes *u the pending update (taking its buffers), folding the one it
 * replaces into the count.  Under the owner's lock. */
void th_progress_put(th_progress_slot *p, th_progress_update *u);

/* Moves the pending update into *u (the caller frees it with
 * th_progress_update_destroy).  False when nothing is pending.  Under the
 * owner's lock. */
bool th_progress_take(th_progress_slot *p, th_progress_update *u);

/* A PROGRESS event that views *u (valid while *u lives). */
void th_progress_event(const th_progress_update *u, uint64_t call_id,
                       th_event *ev);

/* Drops what is pending. */
void th_progress_clear(th_progress_slot *p);

#endif
