/* front/nats_config.h - the `nats:` config section (host/nats/nats_config.c):
 * the NATS front's subjects, credentials and results bucket, and the
 * nats:// entry of host.listen, which this section claims (th/section.h).
 * docs/config.md lists the keys, docs/scale.md what they do. */
#ifndef TH_NATS_CONFIG_H
#define TH_NATS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/config.h"
#include "th/section.h"

/* The `nats:` section: the NATS front (docs/scale.md). */
typedef struct th_nats_cfg {
    char *prefix;          /* subjects <prefix>.<toolset>.<tool>; "toolhost" */
    char *name;            /* the service name of $SRV; "toolhost"       */
    char *user, *password; /* NATS user credentials, or NULL            */
    char *token;           /* a NATS token, or NULL                     */
    char *creds;           /* a .creds file (JWT + NKey), or NULL       */
    char *tls_ca, *tls_cert, *tls_key; /* PEM files; tls:// or tls_ca:
                                  TLS to the NATS server                */
    char **toolsets;       /* the toolsets served on NATS (only these)  */
    size_t n_toolsets;
    char *as_user;         /* the user name NATS calls run as (the one
                              allow_users must list); default "nats"    */
    uint64_t reconnect_wait_ms; /* between reconnect attempts; 250 ms   */
    uint32_t max_pending;  /* messages queued per subscription before
                              the host is a slow consumer; 65536        */
    char *results_bucket;  /* JetStream KV bucket of finished task
                              results; "toolhost_results"; "off": none  */
    uint64_t results_ttl_ms; /* their TTL; 0: host.result_ttl           */
    int line, col;
    /* Appended.  The NATS users that may call (docs/scale.md, "Caller
     * identity"): with any, each calls on <prefix>.u.<user>.… and its
     * replies go to _INBOX.<user>.…, the NATS server's permissions tie
     * the subject to the user, and the call runs as the host user of
     * that name (allow_users lists it); none: the anonymous layout, every
     * call as as_user. */
    char **users;
    size_t n_users;
    char *results_key_file; /* the HMAC-SHA256 key that signs results
                               bucket entries; NULL: no bucket         */
    uint32_t results_replicas; /* the bucket's stream replicas when this
                                  host creates it (1..5); 0: min(3, the
                                  JetStream cluster's size)            */
    bool no_reply_batching; /* reply_batching: false - every reply on
                               the host's one connection, at once      */
    char *listen;          /* the nats:// (or tls://) entry of
                              host.listen, or NULL: no NATS front      */
} th_nats_cfg;

extern const th_section th_nats_section;

/* The `nats:` section of cfg (defaults when the file has none); NULL when
 * cfg was read without th_nats_section registered. */
static inline const th_nats_cfg *th_nats_config(const th_config *cfg)
{
    return (const th_nats_cfg *)th_config_section(cfg, &th_nats_section);
}

#endif
