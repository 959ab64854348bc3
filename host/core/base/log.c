/* log.c - one line per event on stderr (th/log.h).
 *
 * The log is written through a descriptor of its own: th_log_own_stderr()
 * duplicates stderr to a high, close-on-exec descriptor and remembers which
 * file it is.  A plugin that closes 0-2 then cannot steer the log into
 * whatever the host opens next under those numbers (a client's socket);
 * and should the log's own descriptor be closed and its number reused, the
 * identity check drops the line instead of writing it into a stranger. */
#include "th/log.h"
#include "th/utf8.h"
#include "th/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <nettle/base16.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <yajl/yajl_gen.h>

#define OWN_FD_MIN 64 /* out of the way of the numbers files usually get */

static atomic_int log_level = TOOLHOST_LOG_INFO;
static atomic_int log_fd = 2;
/* The descriptor th_log_own_stderr() made, and the file it is. */
static atomic_int own_fd = -1;
static atomic_ullong own_dev, own_ino;

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static atomic_int log_json;    /* host.log_format: json */
static atomic_int log_journal; /* stderr is the journal: <N> prefixes */

void th_log_set_format(int json)
{
    atomic_store(&log_json, json != 0);
}

void th_log_set_journal(int on)
{
    atomic_store(&log_journal, on != 0);
}

bool th_log_is_journal(int fd)
{
    /* sd-daemon(3): JOURNAL_STREAM is "DEV:INO" of the stream the service
     * manager connected stdout/stderr to; it counts only when that is
     * still the file at fd (not when the output was redirected). */
    const char *e = getenv("JOURNAL_STREAM");
    if (!e || !*e)
        return false;
    char *end;
    unsigned long long dev = strtoull(e, &end, 10), ino;
    if (*end != ':')
        return false;
    ino = strtoull(end + 1, &end, 10);
    struct stat st;
    return !*end && fstat(fd, &st) == 0 &&
           (unsigned long long)st.st_dev == dev &&
           (unsigned long long)st.st_ino == ino;
}

void th_log_set_level(int level)
{
    if (level < TOOLHOST_LOG_ERROR)
        level = TOOLHOST_LOG_ERROR;
    if (level > TOOLHOST_LOG_DEBUG)
        level = TOOLHOST_LOG_DEBUG;
    atomic_store(&log_level, level);
}

int th_log_get_level(void)
{
    return atomic_load(&log_level);
}

void th_log_set_fd(int fd)
{
    atomic_store(&log_fd, fd);
}

int th_log_own_stderr(void)
{
    int fd = fcntl(2, F_DUPFD_CLOEXEC, OWN_FD_MIN);
    if (fd < 0 && errno == EINVAL) /* a low RLIMIT_NOFILE */
        fd = fcntl(2, F_DUPFD_CLOEXEC, 3);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    atomic_store(&own_dev, (unsigned long long)st.st_dev);
    atomic_store(&own_ino, (unsigned long long)st.st_ino);
    int old = atomic_exchange(&own_fd, fd);
    atomic_store(&log_fd, fd);
    atomic_store(&log_journal, th_log_is_journal(fd));
    if (old >= 0)
        close(old);
    return fd;
}

/* Still the file th_log_own_stderr() duplicated? */
static bool fd_ok(int fd)
{
    if (fd != atomic_load(&own_fd))
        return true;
    struct stat st;
    return fstat(fd, &st) == 0 &&
           (unsigned long long)st.st_dev == atomic_load(&own_dev) &&
           (unsigned long long)st.st_ino == atomic_load(&own_ino);
}

int th_log_level_from_name(const char *name)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(name, level_names[i]) == 0)
            return i;
    return -1;
}

const char *th_log_level_name(int level)
{
    return level >= 0 && level < 4 ? level_names[level] : "info";
}

/* ---- one line, text or JSON ------------------------------------------------ */

/* th_log_raw() is called from a signal handler (serve.c, on_stop_signal:
 * a second SIGTERM while stopping), so the line is made with no lock, no
 * heap, no stdio and no locale: the JSON object by yajl's generator with
 * its handle in an arena on the stack and its output printed straight
 * into the line buffer (json_line), the escapes by log_escape.  Only the
 * time differs by caller: th_log() and th_log_event() take it from
 * gmtime_r + strftime (put_time), th_log_raw() from put_time_safe. */

#define TS_LEN 24 /* "2026-11-25T21:30:00.123Z" */

/* Writes v as `w` decimal digits at p. */
static void put_num(char *p, int64_t v, int w)
{
    for (int i = w - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
}

/* The time of a line (TS_LEN bytes at p, no NUL) by the C library:
 * gmtime_r + strftime for the second, the milliseconds after it.  Each
 * thread keeps the second it formatted last, so that a burst of lines
 * asks gmtime_r (which takes the C library's time zone lock) once a
 * second. */
static void put_time(char *p)
{
    static _Thread_local int64_t tl_sec = -1;
    static _Thread_local char tl_text[20]; /* "2026-11-25T21:30:00" + NUL */
    int64_t wall = th_wall_ns();
    int64_t sec = wall / 1000000000, ms = wall % 1000000000 / 1000000;
    if (sec != tl_sec) {
        time_t t = (time_t)sec;
        struct tm tm;
        if (!gmtime_r(&t, &tm) ||
            strftime(tl_text, sizeof tl_text, "%Y-%m-%dT%H:%M:%S", &tm) !=
                sizeof tl_text - 1)
            memcpy(tl_text, "0000-00-00T00:00:00", sizeof tl_text);
        tl_sec = sec;
    }
    memcpy(p, tl_text, sizeof tl_text - 1);
    p[19] = '.';
    put_num(p + 20, ms, 3);
    p[23] = 'Z';
}

/* The same time for th_log_raw(), which runs in signal handlers: not
 * gmtime_r + strftime, since glibc's gmtime_r takes the time zone lock
 * (a handler that interrupts a thread holding it would wait forever) and
 * strftime reads the locale; the civil date from the day count by
 * arithmetic alone (proleptic Gregorian). */
static void put_time_safe(char *p)
{
    int64_t wall = th_wall_ns();
    int64_t secs = wall / 1000000000, days = secs / 86400, sod = secs % 86400;
    int64_t z = days + 719468, era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153, d = doy - (153 * mp + 2) / 5 + 1;
    int64_t mo = mp < 10 ? mp + 3 : mp - 9, y = yoe + era * 400 + (mo <= 2);
    memcpy(p, "0000-00-00T00:00:00.000Z", TS_LEN);
    put_num(p, y, 4);
    put_num(p + 5, mo, 2);
    put_num(p + 8, d, 2);
    put_num(p + 11, sod / 3600, 2);
    put_num(p + 14, sod / 60 % 60, 2);
    put_num(p + 17, sod % 60, 2);
    put_num(p + 20, wall % 1000000000 / 1000000, 3);
}

typedef struct lbuf {
    char *p;
    size_t n, cap; /* cap keeps room for the closing bytes */
    bool full;
} lbuf;

static void lb_raw(lbuf *b, const char *s, size_t len)
{
    if (b->full || len > b->cap - b->n) {
        b->full = true;
        return;
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
}

static bool key_char(char ch, bool first)
{
    return (ch >= 'a' && ch <= 'z') || ch == '_' ||
           (!first && ch >= '0' && ch <= '9');
}

/* The word at s[0..n): "key=value" with a key of [a-z_][a-z0-9_]*; the
 * key's length, or 0. */
static size_t kv_key(const char *s, size_t n)
{
    size_t k = 0;
    while (k < n && key_char(s[k], k == 0))
        k++;
    return k > 0 && k + 1 < n && s[k] == '=' ? k : 0;
}

static bool is_int(const char *s, size_t n)
{
    size_t i = s[0] == '-';
    if (n <= i || n - i > 18 || (s[i] == '0' && n - i > 1))
        return false;
    for (; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

/* A decimal fraction as JSON writes it: -?(0|[1-9][0-9]*)\.[0-9]+
 * (dur_ms=0.312). */
static bool is_dec(const char *s, size_t n)
{
    const char *dot = memchr(s, '.', n);
    if (!dot || dot == s || (size_t)(dot - s) + 1 >= n)
        return false;
    size_t a = (size_t)(dot - s), f = n - a - 1;
    if (!is_int(s, a) || (a == 1 && s[0] == '-') || f > 18)
        return false;
    for (size_t i = 0; i < f; i++)
        if (dot[1 + i] < '0' || dot[1 + i] > '9')
            return false;
    return true;
}

/* Fields of the JSON format that a message's key=value words may not
 * take ("event=" names the event instead, th_log_event). */
static bool reserved(const char *k, size_t n)
{
    static const char *const names[] = {"ts", "level", "event", "msg"};
    for (size_t i = 0; i < 4; i++)
        if (strlen(names[i]) == n && memcmp(names[i], k, n) == 0)
            return true;
    return false;
}

static bool ev_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '.';
}

/* The event's name into out[0..64), its length: the value of the
 * message's first event= word (th_log_event), else its first word that
 * is not key=value, lowercased, cut at the first byte outside [a-z0-9_.]
 * ("reload:" -> "reload"), else "log".  Always ^[a-z0-9_.]{1,64}$
 * (docs/ops.md, "Log lines"). */
static size_t event_name(const char *msg, size_t len, char out[64])
{
    const char *ev = NULL;
    size_t evn = 0;
    bool named = false;
    for (size_t i = 0; i < len && !named;) {
        while (i < len && msg[i] == ' ')
            i++;
        size_t j = i;
        while (j < len && msg[j] != ' ')
            j++;
        size_t k = kv_key(msg + i, j - i);
        if (k == 5 && memcmp(msg + i, "event", 5) == 0) {
            ev = msg + i + 6;
            evn = j - i - 6;
            named = true;
        } else if (!k && !ev && j > i) {
            ev = msg + i;
            evn = j - i;
        }
        i = j;
    }
    size_t n = 0;
    for (size_t i = 0; ev && i < evn && n < 64; i++) {
        char ch = ev[i];
        if (ch >= 'A' && ch <= 'Z')
            ch = (char)(ch - 'A' + 'a');
        if (!ev_char(ch))
            break;
        out[n++] = ch;
    }
    if (n == 0) {
        memcpy(out, "log", 3);
        n = 3;
    }
    return n;
}

/* The longest prefix of s[0..n) (ending at a character's end) whose JSON
 * string form takes at most `room` bytes: the bytes yajl's generator
 * writes for it (\" and \\ two, \b \f \n \r \t two, other controls six
 * as \u00XX, any other byte one). */
static size_t json_fit(const char *s, size_t n, size_t room)
{
    if (n <= room / 6)
        return n; /* fits even if every byte took six */
    size_t used = 0, fit = 0;
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        size_t w = ch == '"' || ch == '\\' ? 2
                   : ch >= 0x20            ? 1
                   : ch == '\b' || ch == '\f' || ch == '\n' || ch == '\r' ||
                           ch == '\t'
                       ? 2
                       : 6;
        if (w > room - used)
            break;
        used += w;
        i++;
        if (i == n || ((unsigned char)s[i] & 0xC0) != 0x80)
            fit = i; /* not inside a UTF-8 sequence */
    }
    return fit;
}

/* yajl's generator without the heap: its handle comes from an arena on
 * json_line()'s stack (yajl_gen_alloc takes two blocks: the handle, then
 * a small buffer header it uses without checking for NULL, so the first
 * block must leave room for the second), and its output goes through
 * yajl_gen_print_callback into the line buffer, so yajl never grows a
 * buffer (ar_realloc is never called). */
typedef struct arena {
    unsigned char *p;
    size_t n, cap;
} arena;

#define ARENA_SECOND 64 /* the second block: yajl's buffer header */

static void *ar_malloc(void *ctx, size_t size)
{
    arena *a = ctx;
    size_t need = (size + 15) & ~(size_t)15;
    size_t keep = a->n == 0 ? ARENA_SECOND : 0;
    if (need < size || need + keep > a->cap - a->n)
        return NULL;
    void *r = a->p + a->n;
    a->n += need;
    return r;
}

static void *ar_realloc(void *ctx, void *p, size_t size)
{
    (void)ctx, (void)p, (void)size;
    return NULL;
}

static void ar_free(void *ctx, void *p)
{
    (void)ctx, (void)p; /* the arena goes with the stack frame */
}

/* yajl's output: a byte at a time for its brackets, quotes, commas and
 * colons, so that case goes first. */
static void lb_print(void *ctx, const char *s, size_t len)
{
    lbuf *b = ctx;
    if (len == 1 && !b->full && b->n < b->cap)
        b->p[b->n++] = s[0];
    else
        lb_raw(b, s, len);
}

static void gen_str(yajl_gen g, const char *s, size_t n)
{
    yajl_gen_string(g, (const unsigned char *)s, n);
}

/* {"ts":..., "level":..., "event":..., KEY: VALUE..., "msg": ...} by
 * yajl's generator: the message's key=value words become keys (integers
 * and decimals as numbers, their text as it is; the first of a repeated
 * key wins; at most 32); event_name() names the event.  A line that
 * would not fit the buffer keeps fewer keys and a shorter msg, but stays
 * one well-formed object.  false: yajl could not be set up (its handle
 * outgrew the arena), nothing written. */
static bool json_line(lbuf *b, const char *ts, int level, const char *msg,
                      size_t len)
{
    alignas(16) unsigned char mem[1024];
    arena a = {.p = mem, .cap = sizeof mem};
    yajl_alloc_funcs af = {ar_malloc, ar_realloc, ar_free, &a};
    yajl_gen g = yajl_gen_alloc(&af);
    if (!g)
        return false;
    yajl_gen_config(g, yajl_gen_print_callback, lb_print, b);
    yajl_gen_map_open(g);
    gen_str(g, "ts", 2);
    gen_str(g, ts, TS_LEN);
    const char *lv = th_log_level_name(level);
    gen_str(g, "level", 5);
    gen_str(g, lv, strlen(lv));
    char ev[64];
    size_t evn = event_name(msg, len, ev);
    gen_str(g, "event", 5);
    gen_str(g, ev, evn);
    /* key=value words, each key once */
    const char *seen[32];
    size_t seen_n[32], n_seen = 0;
    for (size_t i = 0; i < len;) {
        while (i < len && msg[i] == ' ')
            i++;
        size_t j = i;
        while (j < len && msg[j] != ' ')
            j++;
        const char *w = msg + i;
        size_t wn = j - i, k = kv_key(w, wn);
        i = j;
        if (!k || reserved(w, k))
            continue;
        bool dup = false;
        for (size_t x = 0; x < n_seen && !dup; x++)
            dup = seen_n[x] == k && memcmp(seen[x], w, k) == 0;
        if (dup || n_seen == 32)
            continue;
        if (b->cap - b->n < 16 + 8 + k + 6 * (wn - k)) /* keep room */
            break;
        seen[n_seen] = w;
        seen_n[n_seen++] = k;
        const char *v = w + k + 1;
        size_t vn = wn - k - 1;
        while (vn > 1 && (v[vn - 1] == ',' || v[vn - 1] == ';' ||
                          v[vn - 1] == ':'))
            vn--;
        gen_str(g, w, k);
        if (is_int(v, vn) || is_dec(v, vn))
            yajl_gen_number(g, v, vn);
        else
            gen_str(g, v, vn);
    }
    /* ,"msg":"..."} : 9 bytes around the text, and a margin */
    if (b->cap - b->n >= 16 + 10) {
        gen_str(g, "msg", 3);
        gen_str(g, msg, json_fit(msg, len, b->cap - b->n - 16));
    }
    yajl_gen_map_close(g);
    yajl_gen_free(g);
    return true;
}

/* The one escaping rule for what reaches the log (docs/security.md, "Log
 * lines"): a message may carry a caller's words (a tool name, an Origin, a
 * path), so every byte that could end the line or drive a terminal is
 * written as the four characters \xHH: C0 controls but tab (newline, ESC),
 * DEL, the C1 controls U+0080-U+009F (each byte of their encoding), and
 * every byte that is not part of well-formed UTF-8.  Applied here, in
 * the writer, to every line of either format, so no caller can forget it.
 * Writes at most cap bytes of dst (whole escapes only); returns the
 * length. */
static size_t log_escape(char *dst, size_t cap, const char *src, size_t n)
{
    const unsigned char *s = (const unsigned char *)src;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t bad, l = th_utf8_seq(s + i, n - i, &bad);
        bool esc = l == 0 || (l == 1 && ((s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7f)) ||
                   (l == 2 && s[i] == 0xC2 && s[i + 1] < 0xA0);
        size_t take = l ? l : 1;
        if (!esc) {
            if (take > cap - o)
                break;
            memcpy(dst + o, s + i, take);
            o += take;
        } else {
            if (4 * take > cap - o)
                break;
            for (size_t k = 0; k < take; k++) {
                dst[o++] = '\\';
                dst[o++] = 'x';
                base16_encode_single(dst + o, s[i + k]);
                o += 2;
            }
        }
        i += take;
    }
    return o;
}

/* One line to the log's descriptor with one write(2).  in_signal: the
 * caller may be a signal handler (th_log_raw), the time comes from
 * put_time_safe. */
static void emit(int level, const char *raw, size_t raw_len, bool in_signal)
{
    int fd = atomic_load(&log_fd);
    if (level > atomic_load(&log_level) || fd < 0 || !fd_ok(fd))
        return;
    char msg[4 * 2048];
    size_t len = log_escape(msg, sizeof msg, raw, raw_len);
    char line[16384];
    lbuf b = {.p = line, .cap = sizeof line - 1}; /* 1: the newline */
    if (atomic_load(&log_journal)) {
        /* sd-daemon(3): "<N>" is the syslog priority (3 err, 4 warning,
         * 6 info, 7 debug); the journal stamps the time itself. */
        static const char pri[] = {'3', '4', '6', '7'};
        char p[3] = {'<', pri[level >= 0 && level < 4 ? level : 2], '>'};
        lb_raw(&b, p, 3);
    }
    size_t start = b.n;
    char t[TS_LEN + 1];
    if (in_signal)
        put_time_safe(t);
    else
        put_time(t);
    if (!atomic_load(&log_json) || !json_line(&b, t, level, msg, len)) {
        b.n = start;
        if (!atomic_load(&log_journal)) {
            t[TS_LEN] = ' ';
            lb_raw(&b, t, sizeof t);
        }
        const char *lv = th_log_level_name(level);
        size_t l = strlen(lv);
        lb_raw(&b, lv, l);
        lb_raw(&b, "      ", 6 - l); /* "info  ", "error " */
        lb_raw(&b, msg, len < b.cap - b.n ? len : b.cap - b.n);
    }
    line[b.n++] = '\n';
    (void)!write(fd, line, b.n);
}

void th_log(int level, const char *fmt, ...)
{
    if (level > atomic_load(&log_level) || atomic_load(&log_fd) < 0)
        return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    emit(level, msg, (size_t)m < sizeof msg ? (size_t)m : sizeof msg - 1,
         false);
}

void th_log_event(int level, const char *event, const char *fmt, ...)
{
    if (level > atomic_load(&log_level) || atomic_load(&log_fd) < 0)
        return;
    char msg[2048];
    int p = snprintf(msg, sizeof msg, "event=%s ", event);
    if (p < 0 || (size_t)p >= sizeof msg)
        return;
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg + p, sizeof msg - (size_t)p, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    size_t n = (size_t)p + (size_t)m;
    emit(level, msg, n < sizeof msg ? n : sizeof msg - 1, false);
}

void th_log_raw(int level, const char *msg)
{
    size_t n = strlen(msg);
    emit(level, msg, n < 480 ? n : 480, true);
}
