/* test_utf8.c - th/utf8.h: well-formedness and th_utf8_scrub(), the one
 * way untrusted bytes (a plugin's stderr, an isolated worker's reason)
 * become text safe to show. */
#include <CUnit/CUnit.h>
#include <string.h>

#include "th/utf8.h"

static void test_valid(void)
{
    CU_ASSERT_TRUE(th_utf8_valid("", 0));
    CU_ASSERT_TRUE(th_utf8_valid("h\xc3\xa9 \xe2\x82\xac", 7));
    CU_ASSERT_FALSE(th_utf8_valid("\xff", 1));
    CU_ASSERT_FALSE(th_utf8_valid("\xc0\xaf", 2));         /* overlong */
    CU_ASSERT_FALSE(th_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    CU_ASSERT_FALSE(th_utf8_valid("\xe2\x82", 2));         /* cut */
}

/* Bad bytes become '?', control characters spaces (a newline kept when
 * asked), valid text whole. */
static void test_scrub_bytes(void)
{
    char out[64];
    const char in[] = "ok \xff\xfe \xc3\xa9\tx\ny\x7f";
    size_t n = th_utf8_scrub(out, sizeof out - 1, in, sizeof in - 1, false);
    CU_ASSERT_STRING_EQUAL(out, "ok ?? \xc3\xa9 x y ");
    CU_ASSERT_EQUAL(n, strlen(out));
    th_utf8_scrub(out, sizeof out - 1, in, sizeof in - 1, true);
    CU_ASSERT_STRING_EQUAL(out, "ok ?? \xc3\xa9 x\ny ");
    CU_ASSERT_TRUE(th_utf8_valid(out, strlen(out)));
}

/* The cap cuts between sequences, never inside one, and valid text
 * before the cut stays as it was. */
static void test_scrub_cap(void)
{
    char out[8];
    const char in[] = "ab\xe2\x82\xac\xe2\x82\xac"; /* ab + two euro signs */
    CU_ASSERT_EQUAL(th_utf8_scrub(out, 4, in, sizeof in - 1, false), 2);
    CU_ASSERT_STRING_EQUAL(out, "ab");
    CU_ASSERT_EQUAL(th_utf8_scrub(out, 5, in, sizeof in - 1, false), 5);
    CU_ASSERT_STRING_EQUAL(out, "ab\xe2\x82\xac");
    CU_ASSERT_EQUAL(th_utf8_scrub(out, 0, in, sizeof in - 1, false), 0);
    CU_ASSERT_STRING_EQUAL(out, "");
}

void th_suite_utf8(void)
{
    CU_pSuite s = CU_add_suite("utf8", NULL, NULL);
    CU_add_test(s, "valid", test_valid);
    CU_add_test(s, "scrub_bytes", test_scrub_bytes);
    CU_add_test(s, "scrub_cap", test_scrub_cap);
}
