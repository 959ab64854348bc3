/* test_iso_wire.c - the frames between the host and an isolated plugin's
 * workers (host/core/iso/iso_wire.c): th_iso_take()'s cap (a header that
 * declares more than rx.max is refused with its 4 bytes alone, before
 * any body; exactly the cap is taken), the receive buffer given back
 * after a large frame, its growth to exactly one large frame, and
 * th_iso_send()'s refusal of a frame longer than its peer reads. */
#include <CUnit/CUnit.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "iso/iso_wire.h"

static void put_header(th_iso_rx *rx, uint32_t n)
{
    uint8_t h[4] = {(uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8),
                    (uint8_t)n};
    CU_ASSERT_EQUAL_FATAL(th_buf_append(&rx->b, h, 4), 0);
}

static void put_body(th_iso_rx *rx, size_t n, char c)
{
    CU_ASSERT_EQUAL_FATAL(th_buf_reserve(&rx->b, n), 0);
    memset(rx->b.data + rx->b.len, c, n);
    rx->b.len += n;
}

/* cap + 1 refused on the header alone; the cap itself taken whole. */
static void test_take_cap(void)
{
    const uint8_t *f = NULL;
    size_t n = 0;
    th_iso_rx rx = {.max = 1000};
    put_header(&rx, 1001);
    CU_ASSERT_EQUAL(th_iso_take(&rx, &f, &n), -1);
    CU_ASSERT_EQUAL(rx.refused, 1001);
    th_iso_rx_destroy(&rx);

    rx = (th_iso_rx){.max = 1000};
    put_header(&rx, 0xffffffffu); /* the largest a header says */
    CU_ASSERT_EQUAL(th_iso_take(&rx, &f, &n), -1);
    CU_ASSERT_EQUAL(rx.refused, 0xffffffffu);
    th_iso_rx_destroy(&rx);

    rx = (th_iso_rx){.max = 1000};
    put_header(&rx, 1000);
    CU_ASSERT_EQUAL(th_iso_take(&rx, &f, &n), 0); /* waits for the body */
    put_body(&rx, 999, 'a');
    CU_ASSERT_EQUAL(th_iso_take(&rx, &f, &n), 0);
    put_body(&rx, 1, 'b');
    put_header(&rx, 1); /* the next frame's header, and one byte */
    put_body(&rx, 1, 'c');
    CU_ASSERT_EQUAL(th_iso_take(&rx, &f, &n), 1);
    CU_ASSERT_EQUAL(n, 1000);
    CU_ASSERT(f && f[0] == 'a' && f[998] == 'a' && f[999] == 'b');
    CU_ASSERT_EQUAL(th_iso_take(&rx, &f, &n), 1);
    CU_ASSERT(n == 1 && f[0] == 'c');
    CU_ASSERT_EQUAL(th_iso_take(&rx, &f, &n), 0);
    CU_ASSERT_EQUAL(rx.refused, 0);
    th_iso_rx_destroy(&rx);
}

/* max 0, or more than ISO_MAX_FRAME: ISO_MAX_FRAME (the worker's cap of
 * what the host sends). */
static void test_take_default(void)
{
    const uint8_t *f;
    size_t n;
    size_t maxes[] = {0, (size_t)ISO_MAX_FRAME * 4};
    for (size_t i = 0; i < 2; i++) {
        th_iso_rx rx = {.max = maxes[i]};
        put_header(&rx, ISO_MAX_FRAME);
        CU_ASSERT_EQUAL(th_iso_take(&rx, &f, &n), 0);
        th_iso_rx_destroy(&rx);
        rx = (th_iso_rx){.max = maxes[i]};
        put_header(&rx, ISO_MAX_FRAME + 1);
        CU_ASSERT_EQUAL(th_iso_take(&rx, &f, &n), -1);
        CU_ASSERT_EQUAL(rx.refused, ISO_MAX_FRAME + 1);
        th_iso_rx_destroy(&rx);
    }
}

/* After a large frame, the take that finds no whole frame gives the
 * buffer back (what is left of a next frame moves to a small one). */
static void test_shrink(void)
{
    const uint8_t *f;
    size_t n;
    th_iso_rx rx = {.max = 4u << 20};
    put_header(&rx, 2u << 20);
    put_body(&rx, 2u << 20, 'z');
    put_header(&rx, 10);
    put_body(&rx, 3, 'q'); /* 3 of the next frame's 10 bytes */
    CU_ASSERT(rx.b.cap > (2u << 20));
    CU_ASSERT_EQUAL(th_iso_take(&rx, &f, &n), 1);
    CU_ASSERT_EQUAL(n, 2u << 20);
    CU_ASSERT_EQUAL(th_iso_take(&rx, &f, &n), 0);
    CU_ASSERT(rx.b.cap <= ISO_RX_KEEP);
    CU_ASSERT_EQUAL(rx.off, 0);
    CU_ASSERT_EQUAL(rx.b.len, 7); /* the partial frame kept */
    put_body(&rx, 7, 'r');
    CU_ASSERT_EQUAL(th_iso_take(&rx, &f, &n), 1);
    CU_ASSERT(n == 10 && f[0] == 'q' && f[2] == 'q' && f[3] == 'r');
    CU_ASSERT_EQUAL(th_iso_take(&rx, &f, &n), 0);
    CU_ASSERT(rx.b.cap <= ISO_RX_KEEP);
    th_iso_rx_destroy(&rx);
}

typedef struct writer {
    int fd;
    size_t n;
    int rc;
} writer;

static void *write_frame(void *arg)
{
    writer *w = arg;
    uint8_t *d = malloc(w->n);
    w->rc = -1;
    if (d) {
        memset(d, 'w', w->n);
        w->rc = th_iso_send(w->fd, d, w->n, w->n);
        free(d);
    }
    return NULL;
}

/* Through a socket: a frame of 3 MiB is read whole and the buffer grows
 * to hold exactly it (not to the next power of two); the buffer is given
 * back once it is taken. */
static void test_fill_exact(void)
{
    int sv[2];
    CU_ASSERT_EQUAL_FATAL(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    writer w = {.fd = sv[0], .n = (3u << 20) + 123};
    pthread_t t;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, write_frame, &w), 0);
    th_iso_rx rx = {.max = 4u << 20};
    const uint8_t *f = NULL;
    size_t n = 0;
    int got = 0;
    size_t peak = 0;
    while (got == 0) {
        int r = th_iso_rx_fill(&rx, sv[1]);
        CU_ASSERT_FATAL(r > 0);
        if (rx.b.cap > peak)
            peak = rx.b.cap;
        got = th_iso_take(&rx, &f, &n);
    }
    CU_ASSERT_EQUAL(got, 1);
    CU_ASSERT_EQUAL(n, w.n);
    CU_ASSERT(f && f[0] == 'w' && f[n - 1] == 'w');
    /* the frame, its header, a NUL, and one read's room at most */
    CU_ASSERT(peak <= w.n + 4 + 1 + 65536);
    CU_ASSERT_EQUAL(th_iso_take(&rx, &f, &n), 0);
    CU_ASSERT(rx.b.cap <= ISO_RX_KEEP);
    pthread_join(t, NULL);
    CU_ASSERT_EQUAL(w.rc, 0);
    th_iso_rx_destroy(&rx);
    close(sv[0]);
    close(sv[1]);
}

/* A frame longer than `max` is not sent (EMSGSIZE), nothing of it: the
 * peer never gets what it would refuse.  Parts whose sum passes it (or
 * would wrap) likewise; exactly max goes. */
static void test_send_cap(void)
{
    int sv[2];
    CU_ASSERT_EQUAL_FATAL(
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    static uint8_t d[1001];
    memset(d, 'd', sizeof d);
    errno = 0;
    CU_ASSERT_EQUAL(th_iso_send(sv[0], d, 1001, 1000), -1);
    CU_ASSERT_EQUAL(errno, EMSGSIZE);
    struct iovec two[2] = {{d, 600}, {d, 401}};
    errno = 0;
    CU_ASSERT_EQUAL(th_iso_sendv(sv[0], two, 2, 1000), -1);
    CU_ASSERT_EQUAL(errno, EMSGSIZE);
    struct iovec wrap[2] = {{d, 10}, {d, SIZE_MAX - 5}};
    errno = 0;
    CU_ASSERT_EQUAL(th_iso_sendv(sv[0], wrap, 2, 1000), -1);
    CU_ASSERT_EQUAL(errno, EMSGSIZE);
    uint8_t probe;
    CU_ASSERT_EQUAL(read(sv[1], &probe, 1), -1); /* nothing was sent */
    CU_ASSERT_EQUAL(errno, EAGAIN);
    /* max 0 or past ISO_MAX_FRAME: ISO_MAX_FRAME */
    struct iovec huge = {d, (size_t)ISO_MAX_FRAME + 1};
    errno = 0;
    CU_ASSERT_EQUAL(th_iso_sendv(sv[0], &huge, 1, 0), -1);
    CU_ASSERT_EQUAL(errno, EMSGSIZE);
    errno = 0;
    CU_ASSERT_EQUAL(th_iso_sendv(sv[0], &huge, 1, SIZE_MAX), -1);
    CU_ASSERT_EQUAL(errno, EMSGSIZE);
    /* exactly the cap goes, and a reader with that cap takes it */
    CU_ASSERT_EQUAL(th_iso_sendv(sv[0], two, 1, 600), 0);
    th_iso_rx rx = {.max = 600};
    const uint8_t *f = NULL;
    size_t n = 0;
    int got = 0;
    while (got == 0 && th_iso_rx_fill(&rx, sv[1]) > 0)
        got = th_iso_take(&rx, &f, &n);
    CU_ASSERT_EQUAL(got, 1);
    CU_ASSERT_EQUAL(n, 600);
    th_iso_rx_destroy(&rx);
    close(sv[0]);
    close(sv[1]);
}

void th_suite_iso_wire(void)
{
    CU_pSuite s = CU_add_suite("iso_wire", NULL, NULL);
    CU_add_test(s, "take_cap", test_take_cap);
    CU_add_test(s, "take_default", test_take_default);
    CU_add_test(s, "shrink", test_shrink);
    CU_add_test(s, "fill_exact", test_fill_exact);
    CU_add_test(s, "send_cap", test_send_cap);
}
