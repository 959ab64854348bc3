/* front/nats.h - the NATS front (host/nats/nats.c): the nats:// entry of
 * host.listen.  The host joins a NATS server as a client and serves each
 * toolset named in nats.toolsets, one endpoint per tool on the subject
 * <prefix>.<toolset>.<tool> in the queue group "toolhost", so every host
 * with that toolset shares its calls.  It answers the service discovery
 * subjects $SRV.PING, $SRV.INFO and $SRV.STATS.  docs/scale.md describes
 * the wire: request bodies, headers, replies. */
#ifndef TH_NATS_FRONT_H
#define TH_NATS_FRONT_H

#include <nats/nats.h>

#include "th/config.h"
#include "th/err.h"
#include "th/host.h"

typedef struct th_nats th_nats;

/* Header names of requests and replies. */
#define TH_NATS_H_TIMEOUT "Toolhost-Timeout-Ms" /* request: per-call ms    */
#define TH_NATS_H_DEADLINE "Toolhost-Deadline" /* request: the caller's
                                                  deadline, Unix ms       */
#define TH_NATS_H_PROGRESS "Toolhost-Progress"  /* request: "0": none      */
#define TH_NATS_H_OUTPUT_INFO "Toolhost-Output-Info" /* request: "1": meta
                                           describes both streams (the
                                           tools.call option output_info) */
#define TH_NATS_H_KIND "Toolhost-Kind"  /* reply: result, ack, progress,
                                           took                            */
#define TH_NATS_H_TASK "Toolhost-Task"  /* reply: HOSTID.TASKID            */
#define TH_NATS_H_HOST "Toolhost-Host"  /* reply: the host's id            */
#define TH_NATS_H_ASK "Toolhost-Ask"    /* request: "1": the caller answers
                                           `ask` messages (docs/scale.md)  */
#define TH_NATS_H_CLIENT_ASKS "Toolhost-Client-Asks" /* request: what the
                                           caller answers when the tool
                                           asks it: "sampling", "form" or
                                           both, comma-separated          */
#define TH_NATS_H_ASK_KIND "Toolhost-Ask-Kind" /* client_ask: sampling or
                                           form                            */
#define TH_NATS_H_ERROR "Toolhost-Error" /* an answer to client_ask: "1",
                                           the body is the error           */
#define TH_NATS_H_START_BY "Toolhost-Start-By" /* request: Unix ms by which
                                           a host must take the call: it
                                           answers `took` at once, and
                                           one that gets the request later
                                           does not start it               */
#define TH_NATS_H_STORED "Toolhost-Stored" /* reply (an async task's
                                           result): "1" it is in the
                                           results bucket, "0" it is not   */

/* Connects to cfg->host.listen_nats (the host's config; it and h outlive
 * the front) and subscribes.  With no nats:// entry, *out is NULL and 0 is
 * returned.  The front keeps its own reference to the host's config of
 * that moment (credentials, prefix, nats.toolsets); a reload that adds or
 * removes tools of those toolsets (un)subscribes them (the sessions'
 * tools_changed).  A server that is not up yet is retried in the
 * background (the subscriptions are sent when it comes); wrong
 * credentials or a TLS failure at the first connect are an error
 * (TH_ECONFIG).  Finished async results also go to the JetStream
 * key-value bucket nats.results_bucket when the server has JetStream.
 * 0, or a TH_E* code with a sentence in err (nothing is left running
 * then). */
int th_nats_start(th_host *h, const th_config *cfg, th_nats **out,
                  th_error *err);
/* Sets the server URL of o: one URL, or the servers of one cluster
 * comma-separated ("nats://a:4222,nats://b:4222"; spaces around the commas
 * are fine).  The host (listen) and the CLI (--connect) both use it. */
natsStatus th_nats_set_urls(natsOptions *o, const char *list);
/* The host's id on NATS (its $SRV id, the HOSTID of task ids). */
const char *th_nats_id(const th_nats *f);
/* Stops taking new calls (at SIGTERM, before the host lets its calls
 * finish): the tool subjects are drained, so the server routes new calls
 * to other hosts (or answers "no responders"), and what it had already
 * delivered is answered `cancelled`; calls in flight, tasks, `ask`
 * answers and discovery go on.  Once; any thread; NULL is fine. */
void th_nats_quiesce(th_nats *f);
/* Stops taking requests (th_nats_quiesce if not yet), cancels the calls in
 * flight (their callers get `cancelled`; every call delivered gets an
 * answer), closes the connection.  NULL is fine. */
void th_nats_stop(th_nats *f);

#endif
