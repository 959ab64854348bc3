/* th/section.h - a config section of the host's own, brought by a module.
 *
 * The core's config reader (config.c) knows its own sections (host,
 * limits, plugins, toolsets, mocks, admin, rate_limits) and nothing else.
 * A front brings its section as a th_section: a top-level key, a table of
 * keys mapped onto a struct of the front's own with offsetof and the
 * reader's shared setters (so every value gets the same forms, ranges and
 * "FILE:LINE:COL: message" errors as the core's keys), and hooks for what
 * a table cannot say.  Registered once, before the first config is read
 * (th_section_register, or th_front_register for a front's), a section is
 * read from every config: its struct is allocated and filled with the
 * defaults even when the file has no such key, and a front reads it with
 * th_config_section().
 *
 * The order of the work for one config: the core's keys and the sections
 * in the file's order of keys of the table (the core's first, then the
 * sections in registration order); then each section's `finish` (the
 * whole config is read by then: cross-section checks, defaults that
 * depend on other sections); `host.listen` entries whose scheme a section
 * claims are handed to its `listen` hook while the host section is read.
 *
 * Threads: registration is for the main thread before any config is
 * read; everything else runs on the thread that reads the config.
 */
#ifndef TH_SECTION_H
#define TH_SECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "th/config.h"

/* Units for key ranges. */
#define TH_KIB 1024ull
#define TH_MIB (1024ull * 1024)
#define TH_GIB (1024ull * 1024 * 1024)
#define TH_SEC_MS 1000ull
#define TH_MINUTE_MS (60 * TH_SEC_MS)
#define TH_HOUR_MS (60 * TH_MINUTE_MS)
#define TH_DAY_MS (24 * TH_HOUR_MS)

/* The reading of one config (opaque). */
typedef struct th_cfctx th_cfctx;
typedef struct th_cfkey th_cfkey;
/* Sets the field of `k` in the struct at `base` from the value `v`;
 * 0 or an error (th_cf_err). */
typedef int (*th_cfset_fn)(th_cfctx *c, const th_cfkey *k, th_ynode *v,
                           void *base);

#define TH_CF_REQUIRED 1u
#define TH_CF_PATH 2u /* strings: resolved against the config's folder */
#define TH_CF_NOT 4u  /* booleans: stored negated (a key whose default is
                         true, in a field whose zero is that default) */

/* One key of a table; a table ends with an entry whose name is NULL. */
struct th_cfkey {
    const char *name;
    th_cfset_fn set;
    size_t off;               /* the field in the struct at `base` */
    size_t off2;              /* its count, for lists */
    uint64_t min, max;        /* numbers, sizes, durations (ms) */
    const char *const *names; /* enum values, NULL-terminated, = 0, 1, ... */
    const th_cfkey *sub;      /* keys of a nested map or of list items */
    size_t elem_size;         /* list items */
    void (*init)(th_cfctx *c, void *elem);
    int (*check)(th_cfctx *c, th_ynode *n, void *elem);
    unsigned flags;
    const char *what;         /* names a list item or section in messages */
};

/* The shared setters (docs/config.md gives the forms of each). */
int th_cf_str(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base);
int th_cf_bool(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base);
int th_cf_u32(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base);
int th_cf_size(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base);
int th_cf_duration(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base);
int th_cf_enum(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base);
/* An octal file mode ("0600", at most 0777) into a uint32_t. */
int th_cf_mode(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base);
int th_cf_strlist(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base);
/* A nested map (sub, check) and a list of maps (sub, elem_size, off2,
 * init, check, what). */
int th_cf_section(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base);
int th_cf_list(th_cfctx *c, const th_cfkey *k, th_ynode *v, void *base);

/* An error at the node `at` (NULL: the top of the file):
 * "FILE:LINE:COL: message"; returns TH_ECONFIG. */
int th_cf_err(th_cfctx *c, const th_ynode *at, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int th_cf_nomem(th_cfctx *c);
/* Frees n strings and the array that holds them (a section's string
 * lists, such as th_cf_strlist fills). */
void th_strv_free(char **v, size_t n);
/* A path of the config resolved against the config file's folder (an
 * absolute one as it is), malloc'd; NULL when out of memory. */
char *th_cf_resolve_path(th_cfctx *c, const char *path);
/* The config being read (its core sections are filled in by the time a
 * section's `finish` runs) and the whole document. */
th_config *th_cf_config(th_cfctx *c);

typedef struct th_section {
    const char *name;   /* the top-level key: "mcp" */
    size_t size;        /* of the struct the keys fill */
    const th_cfkey *keys; /* NULL: no top-level key (a section of
                             host_keys or listen entries only) */
    /* Defaults, before any key (may be NULL: zeroes). */
    void (*init)(void *sec);
    /* After the keys, when the file has the section: checks of the
     * section alone; `n` is its node. */
    int (*check)(th_cfctx *c, th_ynode *n, void *sec);
    /* After the whole config, always (n: the section's node or NULL). */
    int (*finish)(th_cfctx *c, const th_ynode *n, void *sec);
    /* Keys the section adds to the `host:` section, read like the host's
     * own but into this struct: the keys a front had there before fronts
     * were modules (host.max_frame is the RPC socket's), which configs
     * keep.  NULL: none. */
    const th_cfkey *host_keys;
    /* Frees what the struct owns (not the struct). */
    void (*free)(void *sec);
    /* host.listen entries this section takes: each scheme such as
     * "http://" (a prefix of the entry); `listen` stores one (already
     * ${VAR}-expanded) or refuses it with th_cf_err at `v`. */
    const char *const *schemes;
    int (*listen)(th_cfctx *c, const th_ynode *v, void *sec);
    /* The entries' form for messages: "http://HOST:PORT/PATH (MCP)". */
    const char *listen_form;
    /* Whether the section declares `name` as a user of the host (one
     * allow_users may list without a system account), read from the
     * section's node `n` (toolsets come before it in the file). */
    bool (*names_user)(const th_ynode *n, const char *name);
    /* A reload from `old` to `cur`: a warning when something of the
     * section only changes at the next restart, or NULL. */
    const char *(*reload_note)(const void *old, const void *cur);
    /* Appends to a "did you mean" for allow_users names: e.g. " an
     * mcp.tokens entry may declare a user;" (or NULL). */
    const char *user_hint;
} th_section;

/* Registers a section for every config read from now on.  0 (the same
 * descriptor again too); TH_ESTATE when a core key or another section has
 * its name, another section claims a listen scheme that overlaps one of
 * its own, or a key of its host_keys is taken (the core's, another
 * section's, or past 64 added keys); TH_ELIMIT past TH_SECTIONS_MAX. */
int th_section_register(const th_section *s);

/* The struct of section `s` in `cfg` (never NULL for a section that was
 * registered when cfg was read; NULL otherwise). */
void *th_config_section(const th_config *cfg, const th_section *s);
/* Calls fn for every registered section with its struct in cfg. */
void th_config_sections_each(const th_config *cfg,
                             void (*fn)(const th_section *s, void *sec,
                                        void *ud),
                             void *ud);

#endif
