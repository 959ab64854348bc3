/* test_log.c - the host's log lines (th/log.h): the text form, the JSON
 * form (host.log_format: json, docs/ops.md "Log lines") with a message's
 * key=value words as keys and th_log_event's stable event names,
 * and journal mode (JOURNAL_STREAM: "<N>" priorities, no time in text). */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/th_test.h"
#include "th/log.h"

/* The log into a fresh memory file for one test; fx_text() reads it. */
static int fx_fd = -1, fx_level;

static void fx_open(void)
{
    fx_level = th_log_get_level();
    fx_fd = memfd_create("test-log", MFD_CLOEXEC);
    CU_ASSERT_FATAL(fx_fd >= 0);
    th_log_set_fd(fx_fd);
    th_log_set_level(TOOLHOST_LOG_DEBUG);
}

/* What was written since fx_open (malloc()ed), and the log back off. */
static char *fx_text(void)
{
    off_t n = lseek(fx_fd, 0, SEEK_END);
    char *s = calloc(1, (size_t)n + 1);
    CU_ASSERT_FATAL(s != NULL);
    CU_ASSERT_EQUAL(pread(fx_fd, s, (size_t)n, 0), n);
    return s;
}

static void fx_close(void)
{
    th_log_set_fd(2); /* as the other suites have it */
    th_log_set_format(0);
    th_log_set_journal(0);
    th_log_set_level(fx_level);
    close(fx_fd);
    fx_fd = -1;
}

static void test_text(void)
{
    fx_open();
    th_log_info("session=3 tool=echo call=17 dur=0.2ms ok");
    th_log_error("boom");
    th_log_debug("quiet");
    th_log_set_level(TOOLHOST_LOG_INFO);
    th_log_debug("dropped");
    char *s = fx_text();
    /* "2026-11-25T21:30:00.123Z info  session=3 ..." */
    CU_ASSERT_EQUAL(strlen(s) > 25 && s[4] == '-' && s[10] == 'T' &&
                        s[23] == 'Z' && s[24] == ' ', 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(s, "Z info  session=3 tool=echo call=17 "
                                     "dur=0.2ms ok\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s, "Z error boom\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s, "Z debug quiet\n"));
    CU_ASSERT_PTR_NULL(strstr(s, "dropped"));
    free(s);
    fx_close();
}

/* Each line of s as a JSON object, in `objs` (at most n); their count. */
static size_t json_lines(char *s, json_t **objs, size_t n)
{
    size_t k = 0;
    for (char *line = strtok(s, "\n"); line && k < n;
         line = strtok(NULL, "\n")) {
        json_error_t e;
        objs[k] = json_loads(line, 0, &e);
        if (!objs[k])
            printf("\n  not JSON (%s): %.200s\n", e.text, line);
        CU_ASSERT_PTR_NOT_NULL(objs[k]);
        if (objs[k])
            k++;
    }
    return k;
}

static void test_json(void)
{
    fx_open();
    th_log_set_format(1);
    th_log_event(TOOLHOST_LOG_DEBUG, "call.end",
                 "front=rpc session=3 tool=echo call_id=17 dur_ms=0.213 "
                 "bytes_out=5 outcome=ok");
    th_log_warn("session=4 connect uid=1000 gid=1000");
    th_log_info("reload: plugin \"a\\b\" moved\tby x=1 x=2 ts=now");
    th_log_raw(TOOLHOST_LOG_INFO, "shutdown: SIGTERM");
    th_log_info("Weird!name v=1.2.3 w=-0.5 z=.5");
    th_log_info("event=Bad/Name q=1");
    char *s = fx_text();
    json_t *o[8];
    size_t n = json_lines(s, o, 8);
    CU_ASSERT_EQUAL_FATAL(n, 6);
    /* the call line: the event named, numbers as numbers (dur_ms a
     * decimal), the event= word not a key */
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[0], "level")),
                           "debug");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[0], "event")),
                           "call.end");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(o[0], "session")), 3);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(o[0], "call_id")), 17);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(o[0], "bytes_out")), 5);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[0], "tool")),
                           "echo");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[0], "outcome")),
                           "ok");
    CU_ASSERT(json_is_real(json_object_get(o[0], "dur_ms")));
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(o[0], "dur_ms")),
                           0.213, 1e-9);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[0], "msg")),
                           "event=call.end front=rpc session=3 tool=echo "
                           "call_id=17 dur_ms=0.213 bytes_out=5 outcome=ok");
    const char *t = json_string_value(json_object_get(o[0], "ts"));
    CU_ASSERT(t && strlen(t) == 24 && t[23] == 'Z');
    CU_ASSERT_PTR_NULL(json_object_get(o[0], "time"));
    /* without event=, the first word that is not key=value names it */
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[1], "event")),
                           "connect");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[1], "level")),
                           "warn");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(o[1], "uid")), 1000);
    /* quotes, backslashes, tabs escaped; a repeated key once (the first);
     * the format's own keys are not taken by the message */
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[2], "event")),
                           "reload");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[2], "msg")),
                           "reload: plugin \"a\\b\" moved\tby x=1 x=2 "
                           "ts=now");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(o[2], "x")), 1);
    CU_ASSERT_STRING_NOT_EQUAL(
        json_string_value(json_object_get(o[2], "ts")), "now");
    /* the signal-safe path writes the same form */
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[3], "event")),
                           "shutdown");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[3], "msg")),
                           "shutdown: SIGTERM");
    /* event names stay [a-z0-9_.]: lowercased, cut at the first other
     * byte; only well-formed decimals become numbers */
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[4], "event")),
                           "weird");
    CU_ASSERT(json_is_string(json_object_get(o[4], "v")));
    CU_ASSERT(json_is_real(json_object_get(o[4], "w")));
    CU_ASSERT(json_is_string(json_object_get(o[4], "z")));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o[5], "event")),
                           "bad");
    CU_ASSERT_PTR_NULL(json_object_get(o[5], "event_"));
    for (size_t i = 0; i < n; i++)
        json_decref(o[i]);
    free(s);
    fx_close();
}

/* th_log_event in the text format: the event= word leads the message. */
static void test_event_text(void)
{
    fx_open();
    th_log_event(TOOLHOST_LOG_INFO, "reload.ok", "reload #%d ok", 1);
    th_log_event(TOOLHOST_LOG_DEBUG, "call.end", "tool=echo");
    th_log_set_level(TOOLHOST_LOG_INFO);
    th_log_event(TOOLHOST_LOG_DEBUG, "call.end", "dropped");
    char *s = fx_text();
    CU_ASSERT_PTR_NOT_NULL(strstr(s, "Z info  event=reload.ok reload #1 ok\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s, "Z debug event=call.end tool=echo\n"));
    CU_ASSERT_PTR_NULL(strstr(s, "dropped"));
    free(s);
    fx_close();
}

/* A long line of quotes and control bytes (2 and 6 bytes escaped) is cut
 * short but stays one well-formed object. */
static void test_json_long(void)
{
    fx_open();
    th_log_set_format(1);
    char big[4000];
    for (size_t i = 0; i < sizeof big - 1; i++)
        big[i] = i % 3 == 0 ? '"' : i % 3 == 1 ? '\x01' : 'k';
    big[sizeof big - 1] = '\0';
    th_log_info("a=%s b=%s", big, big);
    char *s = fx_text();
    json_t *o[2];
    CU_ASSERT_EQUAL(json_lines(s, o, 2), 1);
    json_decref(o[0]);
    free(s);
    fx_close();
}

/* The one escaping rule (log.c, log_escape): a caller's word with a
 * newline, ESC, DEL, a C1 control or a byte that is not UTF-8 cannot
 * forge a second line nor drive a terminal, in either format; tabs and
 * well-formed UTF-8 pass as they are. */
static void test_escape(void)
{
    const char *evil = "x\n2026-01-01T00:00:00.000Z error forged\x1b[31mred"
                       "\x7f\xc2\x9b" "1m\xff\xc3(\tcaf\xc3\xa9 \xf0\x9f\x94\xa7";
    const char *want = "x\\x0a2026-01-01T00:00:00.000Z error forged"
                       "\\x1b[31mred\\x7f\\xc2\\x9b1m\\xff\\xc3(\t"
                       "caf\xc3\xa9 \xf0\x9f\x94\xa7";
    for (int json = 0; json <= 1; json++) {
        fx_open();
        th_log_set_format(json);
        th_log_warn("unknown tool %s", evil);
        th_log_info("next");
        char *s = fx_text();
        /* two lines, no more: the newline inside did not end the first */
        size_t lines = 0;
        for (const char *p = s; *p; p++)
            lines += *p == '\n';
        CU_ASSERT_EQUAL(lines, 2);
        CU_ASSERT_PTR_NULL(strchr(s, '\x1b'));
        CU_ASSERT_PTR_NULL(strchr(s, '\x7f'));
        CU_ASSERT_PTR_NULL(strstr(s, "\xc2\x9b"));
        if (!json) {
            char line[512];
            snprintf(line, sizeof line, "warn  unknown tool %s\n", want);
            CU_ASSERT_PTR_NOT_NULL(strstr(s, line));
        } else {
            json_t *o[3];
            CU_ASSERT_EQUAL_FATAL(json_lines(s, o, 3), 2);
            char m[512];
            snprintf(m, sizeof m, "unknown tool %s", want);
            CU_ASSERT_STRING_EQUAL(
                json_string_value(json_object_get(o[0], "msg")), m);
            json_decref(o[0]);
            json_decref(o[1]);
        }
        free(s);
        fx_close();
    }
}

/* The seconds since the epoch that a line's "2026-11-25T21:30:00.123Z"
 * says, or -1 when it is not that form. */
static time_t ts_secs(const char *t)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(t, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end || end != t + 19 || t[19] != '.' || t[23] != 'Z' ||
        strspn(t + 20, "0123456789") != 3)
        return -1;
    return timegm(&tm);
}

/* Both clocks of a line tell UTC now: th_log's (gmtime_r + strftime) and
 * th_log_raw's (the signal-safe civil date), in the text and the JSON
 * form. */
/* The seconds of CLOCK_REALTIME, the lines' clock: not time(), which
 * reads the coarse clock and can still say the second before the one a
 * line just took (seen at a second's turn). */
static time_t real_secs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec;
}

static void test_time(void)
{
    fx_open();
    time_t before = real_secs();
    th_log_info("one");
    th_log_raw(TOOLHOST_LOG_INFO, "two");
    th_log_set_format(1);
    th_log_info("three");
    th_log_raw(TOOLHOST_LOG_INFO, "four");
    time_t after = real_secs();
    char *s = fx_text();
    char *l2 = strchr(s, '\n');
    CU_ASSERT_PTR_NOT_NULL_FATAL(l2);
    char *l3 = strchr(l2 + 1, '\n');
    CU_ASSERT_PTR_NOT_NULL_FATAL(l3);
    time_t t1 = ts_secs(s), t2 = ts_secs(l2 + 1);
    CU_ASSERT(t1 >= before && t1 <= after);
    CU_ASSERT(t2 >= t1 && t2 <= after);
    json_t *o[2];
    CU_ASSERT_EQUAL_FATAL(json_lines(l3 + 1, o, 2), 2);
    for (size_t i = 0; i < 2; i++) {
        const char *t = json_string_value(json_object_get(o[i], "ts"));
        time_t ti = t ? ts_secs(t) : -1;
        CU_ASSERT(t && strlen(t) == 24 && ti >= t1 && ti <= after);
        json_decref(o[i]);
    }
    free(s);
    fx_close();
}

static void test_journal(void)
{
    fx_open();
    th_log_set_journal(1);
    th_log_info("listening on unix:/x");
    th_log_error("bad");
    th_log_warn("careful");
    th_log_debug("detail");
    th_log_set_format(1);
    th_log_warn("session=1 careful");
    char *s = fx_text();
    CU_ASSERT_PTR_NOT_NULL(strstr(s, "<6>info  listening on unix:/x\n<3>error "
                                     "bad\n<4>warn  careful\n<7>debug "
                                     "detail\n<4>{\"ts\":"));
    free(s);
    fx_close();
}

static void test_journal_detect(void)
{
    char *dir = th_test_tmpdir();
    char *p = th_test_write_file(dir, "j", "", 0);
    FILE *f = fopen(p, "a");
    CU_ASSERT_FATAL(f != NULL);
    struct stat st;
    CU_ASSERT_EQUAL_FATAL(fstat(fileno(f), &st), 0);
    char v[64];
    snprintf(v, sizeof v, "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino);
    const char *old = getenv("JOURNAL_STREAM");
    char *saved = old ? strdup(old) : NULL;
    setenv("JOURNAL_STREAM", v, 1);
    CU_ASSERT_TRUE(th_log_is_journal(fileno(f)));
    int other = memfd_create("other", MFD_CLOEXEC);
    CU_ASSERT_FALSE(th_log_is_journal(other)); /* redirected elsewhere */
    setenv("JOURNAL_STREAM", "12:x", 1);
    CU_ASSERT_FALSE(th_log_is_journal(fileno(f)));
    unsetenv("JOURNAL_STREAM");
    CU_ASSERT_FALSE(th_log_is_journal(fileno(f)));
    if (saved)
        setenv("JOURNAL_STREAM", saved, 1);
    free(saved);
    close(other);
    fclose(f);
    free(p);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_log(void)
{
    CU_pSuite s = CU_add_suite("log", NULL, NULL);
    CU_add_test(s, "text", test_text);
    CU_add_test(s, "json", test_json);
    CU_add_test(s, "event_text", test_event_text);
    CU_add_test(s, "json_long", test_json_long);
    CU_add_test(s, "escape", test_escape);
    CU_add_test(s, "time", test_time);
    CU_add_test(s, "journal", test_journal);
    CU_add_test(s, "journal_detect", test_journal_detect);
}
