/* bench/plugins/named_echo.c - an echo plugin that takes its plugin and
 * tool name from its own file name, for the start-up benchmark.
 *
 * Tool names must be unique across a host, so 100 byte-identical copies of
 * echo.so cannot be loaded side by side.  bench/startup.c compiles this
 * file once (cc -shared) and copies the object to e001.so ... e100.so:
 * every copy is a separate file the dynamic loader maps and relocates, and
 * each one's entry point names its tool after its file ("e042"), found
 * with dladdr().  The tool is `echo`'s: one required string parameter
 * "text", written back to stdout.  Only the ABI header and msgpack-c are
 * used, so the benchmark does not depend on the SDK build.
 */
#include <dlfcn.h>
#include <msgpack.h>
#include <stdio.h>
#include <string.h>

#include "toolhost/plugin.h"

static char ne_name[65] = "named_echo";

static int ne_execute(void *state, const toolhost_tool *tool,
                      toolhost_call *call, const uint8_t *args, size_t len)
{
    (void)state, (void)tool;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    int rc = TOOLHOST_FAILED;
    if (msgpack_unpack_next(&u, (const char *)args, len, &off) ==
            MSGPACK_UNPACK_SUCCESS &&
        u.data.type == MSGPACK_OBJECT_MAP) {
        for (uint32_t i = 0; i < u.data.via.map.size; i++) {
            const msgpack_object *k = &u.data.via.map.ptr[i].key;
            const msgpack_object *v = &u.data.via.map.ptr[i].val;
            if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == 4 &&
                memcmp(k->via.str.ptr, "text", 4) == 0 &&
                v->type == MSGPACK_OBJECT_STR) {
                rc = call->host->write(call, TOOLHOST_STDOUT, v->via.str.ptr,
                                       v->via.str.size) == 0
                         ? TOOLHOST_OK
                         : TOOLHOST_FAILED;
                break;
            }
        }
    }
    msgpack_unpacked_destroy(&u);
    return rc;
}

static const toolhost_param ne_params[] = {
    {.struct_size = sizeof(toolhost_param),
     .name = "text",
     .type = TOOLHOST_TYPE_STRING,
     .required = 1,
     .description = "The text to write to stdout."},
};

static toolhost_tool ne_tools[] = {
    {.struct_size = sizeof(toolhost_tool),
     .name = ne_name,
     .description = "Writes `text` to stdout unchanged.",
     .params = ne_params,
     .n_params = 1,
     .stdout_type = TOOLHOST_SEM_TEXT,
     .stderr_type = TOOLHOST_SEM_ERROR,
     .flags = TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT,
     .execute = ne_execute},
};

static const toolhost_plugin ne_plugin = {
    .struct_size = sizeof(toolhost_plugin),
    .abi_major = TOOLHOST_ABI_MAJOR,
    .abi_minor = TOOLHOST_ABI_MINOR,
    .name = ne_name,
    .version = "1.0.0",
    .description = "echo, named after its file (start-up benchmark)",
    .tools = ne_tools,
    .n_tools = 1,
};

TOOLHOST_EXPORT const toolhost_plugin *toolhost_plugin_v1(void);
TOOLHOST_EXPORT const toolhost_plugin *toolhost_plugin_v1(void)
{
    /* the name: this object's file name without folder and ".so" (the
     * same answer every time, so the descriptor never changes after the
     * first call) */
    Dl_info info;
    if (dladdr((void *)&ne_plugin, &info) && info.dli_fname) {
        const char *b = strrchr(info.dli_fname, '/');
        b = b ? b + 1 : info.dli_fname;
        size_t n = strcspn(b, ".");
        if (n > 0 && n < sizeof ne_name) {
            memcpy(ne_name, b, n);
            ne_name[n] = '\0';
        }
    }
    return &ne_plugin;
}
