/* test_rpc_tasks.c - tasks over msgpack-RPC read the core's task store
 * through the one codec: tasks.list and the built-in get_running_tasks show
 * the same fields for the same task, tasks.result of a running task shows
 * the last progress message (as tasks.list does), and another uid's task
 * is never shown. */
#include <CUnit/CUnit.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "common/th_test.h"
#include "integration/test_rpc_harness.h"
#include "th/json.h"

static bool jstr_is(const json_t *j, const char *want)
{
    const char *v = json_string_value(j);
    return v && strcmp(v, want) == 0;
}

static bool field_is(const msgpack_object *map, const char *key, const char *want)
{
    const msgpack_object *v = th_rpc_map_get(map, key);
    return v && th_rpc_obj_streq(v, want);
}

static void test_list_matches_get_running_tasks(void)
{
    rpc_srv s;
    CU_ASSERT_FATAL(rpc_srv_start(&s, NULL) == 0);
    rpc_raw w;
    CU_ASSERT_FATAL(rpc_raw_open(&w, &s) == 0);
    rpc_raw_request(&w, 1, "tools.call",
                    "[\"echo_async\", {\"text\": \"x\", \"steps\": 2, "
                    "\"delay_ms\": 20000}]");
    const msgpack_object *m = rpc_raw_response(&w, 1, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *ack = &m->via.array.ptr[3];
    CU_ASSERT_FATAL(field_is(ack, "status", "running"));
    uint64_t task = th_rpc_map_get(ack, "task_id")->via.u64;

    /* tasks.list: one running task */
    rpc_raw_request(&w, 2, "tasks.list", "[]");
    m = rpc_raw_response(&w, 2, rpc_wait_ms());
    CU_ASSERT_FATAL(m && m->via.array.ptr[3].type == MSGPACK_OBJECT_ARRAY &&
                    m->via.array.ptr[3].via.array.size == 1);
    th_error e;
    json_t *listed = th_json_from_object_lossy(&m->via.array.ptr[3].via.array.ptr[0], &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(listed);

    /* get_running_tasks: its stdout is a JSON array */
    rpc_raw_request(&w, 3, "tools.call", "[\"get_running_tasks\", {}]");
    m = rpc_raw_response(&w, 3, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *out = th_rpc_map_get(&m->via.array.ptr[3], "stdout");
    const char *text;
    size_t n;
    CU_ASSERT_FATAL(out && th_rpc_obj_str(out, &text, &n));
    json_t *arr = json_loadb(text, n, 0, NULL);
    CU_ASSERT_FATAL(json_is_array(arr) && json_array_size(arr) == 1);
    json_t *tool_view = json_array_get(arr, 0);

    /* the same fields, the same values (but the clock) */
    CU_ASSERT_EQUAL(json_object_size(listed), json_object_size(tool_view));
    const char *k;
    json_t *v;
    json_object_foreach(listed, k, v)
    {
        json_t *o = json_object_get(tool_view, k);
        CU_ASSERT_PTR_NOT_NULL(o);
        if (o && strcmp(k, "elapsed_ms") != 0 && !json_equal(v, o))
            fprintf(stderr, "field %s differs\n", k);
        if (o && strcmp(k, "elapsed_ms") != 0)
            CU_ASSERT_TRUE(json_equal(v, o));
    }
    CU_ASSERT_EQUAL((uint64_t)json_integer_value(json_object_get(listed, "task_id")), task);
    CU_ASSERT_TRUE(jstr_is(json_object_get(listed, "state"), "working"));
    CU_ASSERT_TRUE(jstr_is(json_object_get(listed, "message"), "step 1/2"));
    CU_ASSERT_TRUE(jstr_is(json_object_get(json_object_get(listed, "arguments"), "text"), "x"));
    json_decref(arr);
    json_decref(listed);

    /* tasks.result of the running task: the last message, as listed */
    char p[64];
    snprintf(p, sizeof p, "[%llu]", (unsigned long long)task);
    rpc_raw_request(&w, 4, "tasks.result", p);
    m = rpc_raw_response(&w, 4, rpc_wait_ms());
    CU_ASSERT_FATAL(m != NULL);
    const msgpack_object *rr = &m->via.array.ptr[3];
    CU_ASSERT(field_is(rr, "status", "running"));
    CU_ASSERT(field_is(rr, "message", "step 1/2"));

    /* cancel; the finished task is listed done/cancelled */
    rpc_raw_request(&w, 5, "tasks.cancel", p);
    m = rpc_raw_response(&w, 5, rpc_wait_ms());
    CU_ASSERT(m && m->via.array.ptr[2].type == MSGPACK_OBJECT_NIL);
    CU_ASSERT(rpc_raw_notification(&w, "task.done", rpc_wait_ms()) != NULL);
    rpc_raw_request(&w, 6, "tasks.list", "[]");
    m = rpc_raw_response(&w, 6, rpc_wait_ms());
    CU_ASSERT_FATAL(m && m->via.array.ptr[3].type == MSGPACK_OBJECT_ARRAY &&
                    m->via.array.ptr[3].via.array.size >= 1);
    const msgpack_object *t = &m->via.array.ptr[3].via.array.ptr[0];
    CU_ASSERT(field_is(t, "status", "done"));
    CU_ASSERT(field_is(t, "state", "cancelled"));
    rpc_raw_request(&w, 7, "tasks.cancel", p);
    m = rpc_raw_response(&w, 7, rpc_wait_ms());
    CU_ASSERT(m && m->via.array.ptr[2].type == MSGPACK_OBJECT_ARRAY &&
              m->via.array.ptr[2].via.array.ptr[0].via.i64 == TH_ESTATE);
    rpc_raw_close(&w);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

void th_suite_rpc_tasks(void)
{
    CU_pSuite s = CU_add_suite("rpc_tasks", NULL, NULL);
    CU_add_test(s, "list_matches_get_running_tasks", test_list_matches_get_running_tasks);
}
