/* test_buf.c - th_buf and the error table. */
#include <CUnit/CUnit.h>
#include <msgpack.h>
#include <string.h>

#include "th/buf.h"
#include "th/err.h"

static void test_append_printf(void)
{
    th_buf b = TH_BUF_INIT;
    CU_ASSERT_EQUAL(th_buf_puts(&b, "abc"), 0);
    CU_ASSERT_EQUAL(th_buf_printf(&b, "-%d-", 42), 0);
    CU_ASSERT_EQUAL(b.len, 7);
    CU_ASSERT_STRING_EQUAL((char *)b.data, "abc-42-");
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CU_ASSERT_EQUAL(th_buf_printf(&b, "%s", big), 0);
    CU_ASSERT_EQUAL(b.len, 7 + 999);
    CU_ASSERT_EQUAL(b.data[b.len], '\0');
    size_t n;
    uint8_t *p = th_buf_take(&b, &n);
    CU_ASSERT_EQUAL(n, 1006);
    CU_ASSERT_PTR_NULL(b.data);
    free(p);
    th_buf_destroy(&b);
}

static void test_msgpack_writer(void)
{
    th_buf b = TH_BUF_INIT;
    msgpack_packer pk;
    msgpack_packer_init(&pk, &b, th_buf_msgpack_write);
    msgpack_pack_map(&pk, 1);
    msgpack_pack_str_with_body(&pk, "k", 1);
    msgpack_pack_int(&pk, 7);
    CU_ASSERT_EQUAL(b.len, 4); /* fixmap, fixstr "k", fixint */
    CU_ASSERT_EQUAL(b.data[0], 0x81);
    th_buf_destroy(&b);
}

static void test_errors(void)
{
    CU_ASSERT_STRING_EQUAL(th_err_name(TH_EARGS), "invalid_arguments");
    CU_ASSERT_STRING_EQUAL(th_err_name(TH_ETIMEOUT), "timeout");
    CU_ASSERT_STRING_EQUAL(th_err_name(12345), "internal");
    th_error e;
    CU_ASSERT_EQUAL(th_error_set(&e, TH_EBUSY, "queue %s", "full"), TH_EBUSY);
    th_error_prefix(&e, "%s: ", "host");
    CU_ASSERT_STRING_EQUAL(e.msg, "host: queue full");
    CU_ASSERT_EQUAL(e.code, TH_EBUSY);
}

void th_suite_buf(void)
{
    CU_pSuite s = CU_add_suite("buf", NULL, NULL);
    CU_add_test(s, "append_printf", test_append_printf);
    CU_add_test(s, "msgpack_writer", test_msgpack_writer);
    CU_add_test(s, "errors", test_errors);
}
