/* front/mcp_config.h - the `mcp:` config section (host/mcp/mcp_config.c):
 * the Streamable HTTP front's tokens and limits, and the http:// and
 * https:// entries of host.listen, which this section claims (th/section.h).
 * docs/config.md lists the keys. */
#ifndef TH_MCP_CONFIG_H
#define TH_MCP_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/config.h"
#include "th/section.h"

/* A bearer token of the MCP HTTP front, known by its SHA-256 only. */
typedef struct th_mcp_token_cfg {
    char *user;            /* the name toolsets' allow_users match       */
    uint8_t sha256[32];    /* of the token's text                        */
    char *sha256_hex;      /* the key as written (or NULL)               */
    char *file;            /* read the token from this file (or NULL)    */
    char *env;             /* read it from this variable (or NULL)       */
    bool disabled;         /* env: the variable is unset or empty; the
                              token matches nothing (serve warns)       */
    int line, col;
    uint32_t uid;          /* `uid`: the local uid the token acts as for
                              task ownership (tasks.list over RPC of that
                              uid sees its toolset tasks) and caller.uid */
    bool has_uid;          /* else the token's sessions have no uid      */
} th_mcp_token_cfg;

/* A principal of mcp.oauth.users: a value of the tokens' user_claim that
 * toolsets' allow_users may name, and the local uid it acts as. */
typedef struct th_mcp_oauth_user {
    char *name;
    uint32_t uid;
    bool has_uid;
} th_mcp_oauth_user;

/* mcp.oauth: the HTTP front as an OAuth 2.1 resource server (docs/mcp.md,
 * "Authorization"; host/mcp/oauth.h checks the tokens). */
typedef struct th_mcp_oauth_cfg {
    bool on;               /* the section has an `oauth:` map            */
    char *issuer;          /* the tokens' `iss`, exactly                 */
    char *audience;        /* the tokens' `aud` must hold it; NULL: the
                              resource URL (each http:// entry's)      */
    char *resource;        /* the resource URL advertised; NULL: the
                              http:// entry's own URL                  */
    char *jwks_file;       /* the issuer's keys: a JWKS file ...         */
    char *jwks_url;        /* ... or its https:// URL (one of the two)  */
    char **authorization_servers; /* NULL: [issuer]                     */
    size_t n_authorization_servers;
    char **scopes_supported;
    size_t n_scopes_supported;
    char *user_claim;      /* the claim naming the principal; "sub"      */
    char *required_scope;  /* a scope every token must carry, or NULL   */
    uint64_t jwks_refresh_ms; /* the keys re-read this often; 10 m      */
    uint64_t jwks_min_interval_ms; /* a token of an unknown kid asks for
                              a re-read at most this often; 30 s      */
    uint64_t jwks_timeout_ms; /* one fetch of jwks_url at most; 10 s    */
    uint64_t leeway_ms;    /* clock skew allowed on exp and nbf; 30 s    */
    uint64_t max_token;    /* bytes of a token; 8 KiB                    */
    uint64_t max_jwks;     /* bytes of the JWKS document; 256 KiB        */
    uint32_t max_keys;     /* keys of the JWKS used; 32                  */
    th_mcp_oauth_user *users;
    size_t n_users;
    int line, col;
} th_mcp_oauth_cfg;

/* The `mcp:` section: the Streamable HTTP front (docs/mcp.md). */
typedef struct th_mcp_cfg {
    th_mcp_token_cfg *tokens;
    size_t n_tokens;
    char **allow_origins;  /* Origin values accepted besides loopback ones */
    size_t n_allow_origins;
    bool allow_remote;     /* an http:// entry may bind a non-loopback
                              address; default false                    */
    char *tls_cert, *tls_key; /* PEM files for https:// entries         */
    uint64_t max_body;     /* bytes of one POST body; default 4 MiB      */
    uint32_t max_sessions; /* MCP sessions at once; default 64           */
    uint32_t max_sessions_per_user; /* of them, one token's user; 16     */
    uint32_t max_streams;  /* GET SSE streams per session; default 2     */
    uint32_t max_connections; /* HTTP connections at once; default 256  */
    uint64_t session_idle_ms; /* a session unused this long ends; 30 m  */
    uint64_t max_queued;   /* bytes waiting for one slow client; 8 MiB   */
    uint64_t client_timeout_ms; /* a client that reads nothing this long
                                  is dropped; default 60 s             */
    uint64_t keepalive_ms; /* SSE comment when a stream is quiet; 15 s   */
    uint64_t header_timeout_ms; /* the request line and headers must be
                                  in within this of the connection (or of
                                  the previous response); bytes do not
                                  extend it; default 10 s              */
    uint64_t body_timeout_ms; /* the whole body within this of the
                                  headers; default 60 s                */
    uint32_t max_connections_per_address; /* of max_connections, from one
                                  client address; default 64           */
    uint32_t http_threads; /* libmicrohttpd's thread pool of each
                              http:// entry (poll); default 2        */
    uint32_t max_json_depth; /* nesting of a POST body; default 64      */
    uint32_t max_json_elements; /* values in a POST body; 100000        */
    char *tls_priorities;  /* GnuTLS priority string of https:// entries;
                              NULL: TH_HTTP_TLS_PRIORITIES              */
    uint64_t sse_poll_ms;  /* a POST still unanswered this long becomes a
                              resumable event stream, whose connection
                              ends after this long again (the client
                              resumes with GET + Last-Event-ID); 0: off,
                              the default                               */
    uint32_t sse_replay_events; /* events of one resumable stream kept
                              for replay; default 64                    */
    uint64_t sse_replay_ms; /* a resumable stream without a connection
                              waits this long for its client; 60 s     */
    uint32_t max_subscriptions; /* resources/subscribe URIs one session
                              may hold at once, and of 2026-07-28
                              subscriptions/listen streams; 256        */
    uint64_t input_ttl_ms; /* a 2026-07-28 input_required state waits
                              this long for its retry; 10 min          */
    uint32_t max_pending_inputs; /* such states kept at once (the
                              process); 1024                           */
    uint32_t max_pending_inputs_per_user; /* of them, one principal's
                              (uid, token user); 64                    */
    uint64_t max_pending_input_bytes; /* the answers such states keep, in
                              all (one principal's: a quarter); 64 MiB */
    int line, col;
    char **listen_http;    /* the http:// and https:// entries of
                              host.listen, as written (docs/mcp.md)     */
    size_t n_listen_http;
    char **listen_metrics; /* the http:// entries whose path is /metrics:
                              the Prometheus endpoint (docs/ops.md), not
                              MCP                                       */
    size_t n_listen_metrics;
    th_mcp_oauth_cfg oauth; /* mcp.oauth                              */
    uint64_t max_message;  /* host.mcp_max_message: one MCP message at
                              most (stdio and HTTP); 16 MiB             */
} th_mcp_cfg;

extern const th_section th_mcp_section;

/* The `mcp:` section of cfg (defaults when the file has none).  cfg must
 * have been read with th_mcp_section registered (th_front_register of the
 * MCP front); NULL otherwise. */
static inline const th_mcp_cfg *th_mcp_config(const th_config *cfg)
{
    return (const th_mcp_cfg *)th_config_section(cfg, &th_mcp_section);
}

#endif
