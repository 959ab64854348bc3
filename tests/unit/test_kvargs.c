/* test_kvargs.c - th_kv_args: tool arguments from key=value words. */
#include <CUnit/CUnit.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"
#include "th/kvargs.h"
#include "toolhost/plugin.h"

static int type_of(void *ud, const char *name)
{
    (void)ud;
    if (!strcmp(name, "n"))
        return TOOLHOST_TYPE_INTEGER;
    if (!strcmp(name, "r"))
        return TOOLHOST_TYPE_NUMBER;
    if (!strcmp(name, "b"))
        return TOOLHOST_TYPE_BOOLEAN;
    if (!strcmp(name, "list"))
        return TOOLHOST_TYPE_ARRAY;
    if (!strcmp(name, "obj"))
        return TOOLHOST_TYPE_OBJECT;
    if (!strcmp(name, "s"))
        return TOOLHOST_TYPE_STRING;
    return 0;
}

/* th_kv_args over a NULL-terminated list of words. */
static json_t *kv(const char *json_text, th_error *err, ...)
{
    char *words[16];
    int n = 0;
    va_list ap;
    va_start(ap, err);
    for (char *w; n < 16 && (w = va_arg(ap, char *)) != NULL;)
        words[n++] = w;
    va_end(ap);
    th_error_clear(err);
    return th_kv_args(words, n, json_text, type_of, NULL, err);
}

static void test_typing(void)
{
    th_error err;
    json_t *a = kv(NULL, &err, "n=42", "r=2.5", "b=yes", "list=[1,2]",
                   "obj={\"k\":1}", "s=42", "other=x", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(a, "n")), 42);
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(a, "r")), 2.5,
                           1e-9);
    CU_ASSERT_TRUE(json_is_true(json_object_get(a, "b")));
    CU_ASSERT_EQUAL(json_array_size(json_object_get(a, "list")), 2);
    CU_ASSERT_TRUE(json_is_object(json_object_get(a, "obj")));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "s")), "42");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "other")),
                           "x");
    json_decref(a);
}

/* Text that does not convert stays a string: validation words it. */
static void test_no_conversion_stays_string(void)
{
    th_error err;
    json_t *a = kv(NULL, &err, "n=4x", "r=nan", "b=maybe", "list=[", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "n")), "4x");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "r")), "nan");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "b")),
                           "maybe");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "list")),
                           "[");
    json_decref(a);
}

static void test_json_and_words(void)
{
    th_error err;
    json_t *a = kv("{\"n\": 1, \"keep\": true}", &err, "n=2", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(a, "n")), 2);
    CU_ASSERT_TRUE(json_is_true(json_object_get(a, "keep")));
    json_decref(a);
    CU_ASSERT_PTR_NULL(kv("[1]", &err, NULL));
    CU_ASSERT_EQUAL(err.code, TH_EARGS);
    CU_ASSERT_STRING_EQUAL(err.msg,
                           "--json: the arguments must be a JSON object");
    CU_ASSERT_PTR_NULL(kv("{", &err, NULL));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "--json: "));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "(at character"));
}

static void test_files(void)
{
    char *dir = th_test_tmpdir();
    char *path = th_test_write_file(dir, "v.txt", "from a file\n", (size_t)-1);
    char word[4200];
    snprintf(word, sizeof word, "s=@%s", path);
    th_error err;
    json_t *a = kv(NULL, &err, word, "t=@@at", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "s")),
                           "from a file\n");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(a, "t")), "@at");
    json_decref(a);
    snprintf(word, sizeof word, "s=@%s/missing", dir);
    CU_ASSERT_PTR_NULL(kv(NULL, &err, word, NULL));
    CU_ASSERT_EQUAL(err.code, TH_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "cannot read the file: No such"));
    free(th_test_write_file(dir, "bin", "\xff\xfe", 2));
    snprintf(word, sizeof word, "s=@%s/bin", dir);
    CU_ASSERT_PTR_NULL(kv(NULL, &err, word, NULL));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "the file is not UTF-8 text"));
    th_test_rmtree(dir);
    free(path);
    free(dir);
}

static void test_bad_words(void)
{
    th_error err;
    CU_ASSERT_PTR_NULL(kv(NULL, &err, "novalue", NULL));
    CU_ASSERT_STRING_EQUAL(err.msg, "'novalue' is not key=value");
    CU_ASSERT_PTR_NULL(kv(NULL, &err, "=x", NULL));
    CU_ASSERT_STRING_EQUAL(err.msg, "'=x' is not key=value");
    char longk[300];
    memset(longk, 'k', 200);
    strcpy(longk + 200, "=v");
    CU_ASSERT_PTR_NULL(kv(NULL, &err, longk, NULL));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "parameter name too long"));
    CU_ASSERT_PTR_NULL(kv(NULL, &err, "s=\xff", NULL));
    CU_ASSERT_STRING_EQUAL(err.msg, "s=...: the value is not UTF-8 text");
    CU_ASSERT_PTR_NULL(kv(NULL, &err, "\xff=v", NULL));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "the parameter name is not UTF-8"));
    /* no words, no --json: an empty object */
    json_t *a = kv(NULL, &err, NULL);
    CU_ASSERT_TRUE(json_is_object(a) && json_object_size(a) == 0);
    json_decref(a);
}

void th_suite_kvargs(void)
{
    CU_pSuite s = CU_add_suite("kvargs", NULL, NULL);
    CU_add_test(s, "typing", test_typing);
    CU_add_test(s, "no_conversion_stays_string",
                test_no_conversion_stays_string);
    CU_add_test(s, "json_and_words", test_json_and_words);
    CU_add_test(s, "files", test_files);
    CU_add_test(s, "bad_words", test_bad_words);
}
