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
#include <nettle/base16.h>
#include <fcntl.h>
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

/* ---- one line, text or JSON (async-signal-safe from here on) ------------ */

/* Writes v as `w` decimal digits at p. */
static void put_num(char *p, int64_t v, int w)
{
    for (int i = w - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
}

/* "2026-11-25T21:30:00.123Z" (24 bytes) at p: no locks, no locale.  Not
 * gmtime_r + strftime: those take the time zone lock and read the
 * locale, and this runs from crash paths (async-signal-safe). */
static void put_time(char *p)
{
    int64_t wall = th_wall_ns();
    struct timespec ts = {.tv_sec = (time_t)(wall / 1000000000),
                          .tv_nsec = (long)(wall % 1000000000)};
    /* days to civil date (proleptic Gregorian), no locks, no locale */
    int64_t secs = ts.tv_sec, days = secs / 86400, sod = secs % 86400;
    int64_t z = days + 719468, era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153, d = doy - (153 * mp + 2) / 5 + 1;
    int64_t mo = mp < 10 ? mp + 3 : mp - 9, y = yoe + era * 400 + (mo <= 2);
    memcpy(p, "0000-00-00T00:00:00.000Z", 24);
    put_num(p, y, 4);
    put_num(p + 5, mo, 2);
    put_num(p + 8, d, 2);
    put_num(p + 11, sod / 3600, 2);
    put_num(p + 14, sod / 60 % 60, 2);
    put_num(p + 17, sod % 60, 2);
    put_num(p + 20, ts.tv_nsec / 1000000, 3);
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

static void lb_str(lbuf *b, const char *s)
{
    lb_raw(b, s, strlen(s));
}

/* s as the inside of a JSON string; stops (the string cut short but
 * well-formed) where less than 16 bytes would be left for what closes the
 * line. */
static void lb_json(lbuf *b, const char *s, size_t len)
{
    for (size_t i = 0; i < len && b->n + 6 + 16 <= b->cap; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[6];
        size_t k = 0;
        if (ch == '"' || ch == '\\') {
            e[k++] = '\\';
            e[k++] = (char)ch;
        } else if (ch == '\n') {
            e[k++] = '\\';
            e[k++] = 'n';
        } else if (ch == '\t') {
            e[k++] = '\\';
            e[k++] = 't';
        } else if (ch < 0x20 || ch == 0x7f) {
            memcpy(e, "\\u00", 4);
            base16_encode_single(e + 4, ch);
            k = 6;
        } else {
            e[k++] = (char)ch;
        }
        lb_raw(b, e, k);
    }
}

static bool key_char(char ch, bool first)
{
    return (ch >= 'a' && ch <= 'z') || ch == '_' ||
           (!first && ch >= '0' && ch <= '9');
}

/* The word at s[0..n): "key=value" with a key of [a-z_][a-z0-9_]*; the
 * key's length in *kl, or 0. */
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

/* Writes the event's name: the value of the message's first event= word
 * (th_log_event), else its first word that is not key=value, lowercased,
 * cut at the first byte outside [a-z0-9_.] ("reload:" -> "reload"), else
 * "log".  Always ^[a-z0-9_.]{1,64}$ (docs/ops.md, "Log lines"). */
static void put_event(lbuf *b, const char *msg, size_t len)
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
    char out[64];
    size_t n = 0;
    for (size_t i = 0; ev && i < evn && n < sizeof out; i++) {
        char ch = ev[i];
        if (ch >= 'A' && ch <= 'Z')
            ch = (char)(ch - 'A' + 'a');
        if (!ev_char(ch))
            break;
        out[n++] = ch;
    }
    if (n == 0)
        lb_str(b, "log");
    else
        lb_raw(b, out, n);
}

/* {"ts":..., "level":..., "event":..., KEY: VALUE..., "msg": ...}: the
 * message's key=value words become keys (integers and decimals as
 * numbers; the first of a repeated key wins); put_event names the
 * event. */
static void json_line(lbuf *b, int level, const char *msg, size_t len)
{
    char t[24];
    put_time(t);
    lb_str(b, "{\"ts\":\"");
    lb_raw(b, t, sizeof t);
    lb_str(b, "\",\"level\":\"");
    lb_str(b, th_log_level_name(level));
    lb_str(b, "\",\"event\":\"");
    put_event(b, msg, len);
    lb_str(b, "\"");
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
        lb_str(b, ",\"");
        lb_raw(b, w, k);
        lb_str(b, "\":");
        if (is_int(v, vn) || is_dec(v, vn)) {
            lb_raw(b, v, vn);
        } else {
            lb_str(b, "\"");
            lb_json(b, v, vn);
            lb_str(b, "\"");
        }
    }
    if (b->cap - b->n >= 16 + 10) {
        lb_str(b, ",\"msg\":\"");
        lb_json(b, msg, len);
        lb_str(b, "\"");
    }
    lb_str(b, "}");
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

/* One line to the log's descriptor with one write(2). */
static void emit(int level, const char *raw, size_t raw_len)
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
    if (atomic_load(&log_json)) {
        json_line(&b, level, msg, len);
    } else {
        if (!atomic_load(&log_journal)) {
            char t[25];
            put_time(t);
            t[24] = ' ';
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
    emit(level, msg, (size_t)m < sizeof msg ? (size_t)m : sizeof msg - 1);
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
    emit(level, msg, n < sizeof msg ? n : sizeof msg - 1);
}

void th_log_raw(int level, const char *msg)
{
    size_t n = strlen(msg);
    emit(level, msg, n < 480 ? n : 480);
}
