/* fuzz/cli_args.c - libFuzzer target: the typing of key=value words and
 * --json text (th_kv_args in host/core/config/kvargs.c), what a human types
 * after `toolhost call TOOL`.
 *
 * Input: lines; a first line starting with '{' is the --json text, every
 * other line a key=value word.  Parameters are typed from a fixed table:
 * text string, n integer, r number, b boolean, list array, obj object
 * (others unknown).  Values starting with a single '@' name a file to read:
 * the target drops those words (no file access while fuzzing); "@@x" is
 * kept.
 * Properties beyond "no crash, no leak, no UB":
 *   - the result is NULL or a JSON object with no more members than
 *     words (plus the --json members);
 *   - a NULL result comes with its reason in the error (the CLI prints
 *     it: it must never fail silently);
 *   - a result converts to msgpack (th_json_to_msgpack) for the call path.
 *
 * (Fixed, in fuzz/corpus/cli_args/: a word that is not UTF-8 and a number
 * parameter given "nan" or "inf" returned NULL without saying why; "nan"
 * now stays a string for validation to refuse.)
 */
#define _GNU_SOURCE 1
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "th/buf.h"
#include "th/json.h"
#include "th/kvargs.h"
#include "toolhost/plugin.h"

static int cli_type_of(void *ud, const char *name)
{
    (void)ud;
    static const struct {
        const char *n;
        int t;
    } tab[] = {{"text", TOOLHOST_TYPE_STRING}, {"n", TOOLHOST_TYPE_INTEGER},
               {"r", TOOLHOST_TYPE_NUMBER},    {"b", TOOLHOST_TYPE_BOOLEAN},
               {"list", TOOLHOST_TYPE_ARRAY},  {"obj", TOOLHOST_TYPE_OBJECT}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(tab[i].n, name) == 0)
            return tab[i].t;
    return 0;
}

static int fuzz_cli_args(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    char *text = malloc(size + 1);
    char **words = malloc(sizeof(char *) * (size + 1));
    if (!text || !words) {
        free(text);
        free(words);
        return 0;
    }
    memcpy(text, data, size);
    text[size] = '\0';
    int n = 0;
    const char *json_text = NULL;
    char *save = NULL;
    int first = 1;
    for (char *w = strtok_r(text, "\n", &save); w;
         w = strtok_r(NULL, "\n", &save)) {
        if (first && w[0] == '{') {
            json_text = w;
        } else {
            const char *eq = strchr(w, '=');
            if (eq && eq[1] == '@' && eq[2] != '@')
                continue; /* a file to read: not while fuzzing */
            words[n++] = w;
        }
        first = 0;
    }
    th_error err;
    th_error_clear(&err);
    json_t *j = th_kv_args(words, n, json_text, cli_type_of, NULL, &err);
    if (!j) {
        TH_FUZZ_CHECK(err.code != 0 && err.msg[0] != '\0');
    } else {
        TH_FUZZ_CHECK(json_is_object(j));
        size_t extra = 0;
        if (json_text) {
            json_t *jt = json_loads(json_text, 0, NULL);
            extra = jt ? json_object_size(jt) : 0;
            json_decref(jt);
        }
        TH_FUZZ_CHECK(json_object_size(j) <= (size_t)n + extra);
        th_buf mp = TH_BUF_INIT;
        TH_FUZZ_CHECK(th_json_to_msgpack(j, &mp) == 0);
        th_buf_destroy(&mp);
        json_decref(j);
    }
    free(words);
    free(text);
    return 0;
}

TH_FUZZ_ENTRY(fuzz_cli_args)
