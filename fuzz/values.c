/* fuzz/values.c - libFuzzer target: the value forms an operator or a CLI
 * user types, th_parse_size ("64KiB", "1.5MiB", "512") and
 * th_parse_duration_ms ("500ms", "30s", "1h30m"), shared by the config
 * loader and the CLI.
 *
 * Input: byte 0 picks the parser (even: size, odd: duration), the rest is
 * the text (cut at a NUL byte, as a C string would be).
 * Properties beyond "no crash, no UB":
 *   - the result is 0 or TH_EINVAL, and *out is untouched on failure;
 *   - a plain number of up to 18 digits is itself as a size; with "KiB"
 *     it is 1024 times that, with "s" 1000 times that as a duration, with
 *     "m" 60,000 times and with "ms" itself (when nothing overflows).
 *
 * needs: host/core/config/config.c
 */
#include <string.h>

#include "fuzz.h"
#include "th/config.h"
#include "th/err.h"

static int values_digits(const char *s, uint64_t *v)
{
    size_t n = strlen(s);
    if (n == 0 || n > 18)
        return 0;
    uint64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    *v = x;
    return 1;
}

static void values_with_unit(int dur, const char *s, const char *unit,
                             uint64_t want)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%s%s", s, unit);
    uint64_t got = 0;
    int rc = dur ? th_parse_duration_ms(buf, &got) : th_parse_size(buf, &got);
    TH_FUZZ_CHECK(rc == 0 && got == want);
}

static int fuzz_values(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 256)
        return 0;
    int dur = data[0] & 1;
    char s[257];
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';
    const uint64_t sentinel = 0xdeadbeefcafef00dull;
    uint64_t v = sentinel;
    int rc = dur ? th_parse_duration_ms(s, &v) : th_parse_size(s, &v);
    TH_FUZZ_CHECK(rc == 0 || rc == TH_EINVAL);
    if (rc != 0)
        TH_FUZZ_CHECK(v == sentinel);
    uint64_t d;
    if (values_digits(s, &d)) {
        if (!dur) {
            TH_FUZZ_CHECK(rc == 0 && v == d);
            if (d <= UINT64_MAX / 1024)
                values_with_unit(0, s, "KiB", d * 1024);
        } else {
            values_with_unit(1, s, "ms", d);
            if (d <= UINT64_MAX / 1000)
                values_with_unit(1, s, "s", d * 1000);
            if (d <= UINT64_MAX / 60000)
                values_with_unit(1, s, "m", d * 60000);
        }
    }
    return 0;
}

TH_FUZZ_ENTRY(fuzz_values)
