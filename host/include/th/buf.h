/* th/buf.h - a growable byte buffer, and a msgpack-c writer into it.
 *
 * Ownership: th_buf_init() on caller storage, th_buf_destroy() releases the
 * data.  th_buf_take() hands the data to the caller (free() it).
 */
#ifndef TH_BUF_H
#define TH_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct th_buf {
    uint8_t *data; /* NULL while empty; always NUL-terminated when not NULL
                      (the NUL is not counted in len) */
    size_t len;
    size_t cap;
} th_buf;

#define TH_BUF_INIT {NULL, 0, 0}

void th_buf_init(th_buf *b);
void th_buf_destroy(th_buf *b);
void th_buf_reset(th_buf *b); /* len = 0, keeps the memory */
/* Ensures room for `extra` more bytes. 0 or TH_ENOMEM. */
int th_buf_reserve(th_buf *b, size_t extra);
int th_buf_append(th_buf *b, const void *data, size_t len);
/* Inline, so that the length of a string literal is known where it is
 * written (no strlen per call). */
static inline int th_buf_puts(th_buf *b, const char *s)
{
    return th_buf_append(b, s, strlen(s));
}
int th_buf_printf(th_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Returns the data (caller frees) and leaves `b` empty. */
uint8_t *th_buf_take(th_buf *b, size_t *len);

/* A msgpack_packer write callback: msgpack_packer_init(&pk, buf,
 * th_buf_msgpack_write) packs into a th_buf. */
int th_buf_msgpack_write(void *data, const char *buf, size_t len);

/* Packs a NUL-terminated string as a msgpack str, or nil for NULL.
 * Returns msgpack-c's 0 / nonzero, so calls can be or-ed together. */
struct msgpack_packer;
int th_pack_cstr(struct msgpack_packer *pk, const char *s);

#endif
