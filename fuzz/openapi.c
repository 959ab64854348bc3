/* fuzz/openapi.c - libFuzzer target: the openapi plugin's document reader
 * and converter (plugins/openapi/oa_load.c, oa_spec.c) on random bytes,
 * as a vendor's OpenAPI document would bring them.
 *
 * The input is the document (JSON when it starts with '{', else YAML;
 * seeds are real documents), read from a memfd as from a file, then
 * converted into tools for an API with a fixed base URL.  Properties
 * beyond "no crash, no leak, no UB, bounded time":
 *   - a refused document leaves a message naming the file or the API;
 *   - an accepted one gives tools whose names match ^[a-zA-Z0-9_-]{1,64}$
 *     and whose input schema is one JSON object with "type": "object"
 *     (an output schema, when there is one, is JSON too).
 *
 * The plugin's sources are included (its symbols are hidden in the .so);
 * oa_execute() is only referred to by the converter, never called here.
 *
 * needs: plugins/openapi/oa_load.c plugins/openapi/oa_spec.c
 * plugins/openapi/oa_state.c (and libcurl: curl_url, for the base URL)
 */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"

#include "../plugins/openapi/oa_load.c"
#include "../plugins/openapi/oa_spec.c"
#include "../plugins/openapi/oa_state.c"

int oa_execute(void *state, const toolhost_tool *tool, toolhost_call *call,
               const uint8_t *args, size_t args_len)
{
    (void)state, (void)tool, (void)call, (void)args, (void)args_len;
    return TOOLHOST_FAILED;
}

static bool openapi_name_ok(const char *n)
{
    size_t len = strlen(n);
    return len >= 1 && len <= 64 &&
           strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                     "0123456789_-") == len;
}

static int fuzz_openapi(const uint8_t *data, size_t len)
{
    int fd = memfd_create("openapi-fuzz", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    char err[1024] = "";
    json_t *doc = oa_load_document(path, 1 << 20, err, sizeof err);
    close(fd);
    if (!doc) {
        TH_FUZZ_CHECK(strstr(err, "spec /proc/self/fd/") != NULL);
        return 0;
    }
    oa_state *st = calloc(1, sizeof *st);
    st->apis = calloc(1, sizeof *st->apis);
    st->n_apis = 1;
    oa_api *api = &st->apis[0];
    api->name = strdup("f");
    api->spec = strdup(path);
    api->base_url = strdup("http://api.example/v1");
    api->max_spec = 1 << 20;
    int rc = oa_spec_tools(st, api, doc, err, sizeof err);
    json_decref(doc);
    if (rc != 0) {
        TH_FUZZ_CHECK(strstr(err, "api 'f'") != NULL);
    } else {
        for (uint32_t i = 0; i < st->n_tools; i++) {
            const toolhost_tool *t = &st->tools_rw[i];
            TH_FUZZ_CHECK(openapi_name_ok(t->name));
            json_t *in = json_loads(t->input_schema, 0, NULL);
            TH_FUZZ_CHECK(json_is_object(in));
            TH_FUZZ_CHECK(!strcmp(
                json_string_value(json_object_get(in, "type")), "object"));
            json_decref(in);
            if (t->output_schema) {
                json_t *out = json_loads(t->output_schema, JSON_DECODE_ANY,
                                         NULL);
                TH_FUZZ_CHECK(out != NULL);
                json_decref(out);
            }
        }
    }
    oa_state_free(st);
    return 0;
}

#ifndef TH_FUZZ_NO_ENTRY
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    return fuzz_openapi(data, len);
}
#endif
