/* test_openapi_spec.c - the openapi plugin's document -> tools conversion
 * through the fake host (the host's own loader: every input and output
 * schema the plugin makes is compiled by the host's validator).
 *
 * The pet store fixture: names (operationId, or method and path), flags,
 * input schemas (parameters by name, `body`, component $refs as $defs,
 * a recursive schema, 3.0's nullable and boolean exclusive bounds,
 * OpenAPI-only keywords dropped), output schemas (inlined; none for a
 * recursive one or for none declared).  Documents that lie or attack:
 * every one refused at load with a message naming the API, the operation
 * and the problem. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/plugin_harness.h"
#include "common/th_test.h"

static th_harness *load_spec(const char *spec, const char *extra, char *err,
                             size_t es)
{
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"apis\": [{\"name\": \"t\", \"spec\": \"%s\", \"base_url\": "
             "\"http://api.example/v1\"%s%s}]}",
             spec, extra ? ", " : "", extra ? extra : "");
    return th_harness_load(th_test_build_path("plugins/openapi.so"), cfg, err,
                           es);
}

static json_t *schema_of(const th_harness *h, const char *tool, bool output)
{
    const toolhost_tool *t = th_harness_tool(h, tool);
    if (!t) {
        fprintf(stderr, "\nno tool %s\n", tool);
        return NULL;
    }
    const char *s = output ? t->output_schema : t->input_schema;
    return s ? json_loads(s, 0, NULL) : NULL;
}

/* The value at a slash-separated path of object keys. */
static json_t *at(json_t *j, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *save = NULL, *k = strtok_r(buf, "/", &save); k && j;
         k = strtok_r(NULL, "/", &save))
        j = json_object_get(j, k);
    return j;
}

static bool str_at(json_t *j, const char *path, const char *want)
{
    const char *s = json_string_value(at(j, path));
    if (!s || strcmp(s, want))
        fprintf(stderr, "\n%s is %s, wanted %s\n", path, s ? s : "(none)",
                want);
    return s && !strcmp(s, want);
}

static void test_petstore(void)
{
    char err[1024] = "";
    th_harness *h = load_spec(th_test_source_path("tests/openapi/petstore.yaml"),
                              NULL, err, sizeof err);
    if (!h)
        fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    CU_ASSERT_EQUAL(th_harness_n_tools(h), 23);

    /* getPet: the path-level parameter, its pattern and description */
    json_t *in = schema_of(h, "getPet", false);
    CU_ASSERT(str_at(in, "type", "object"));
    CU_ASSERT(str_at(in, "properties/petId/type", "string"));
    CU_ASSERT(str_at(in, "properties/petId/pattern", "^[^/]*$"));
    CU_ASSERT(str_at(in, "properties/petId/description", "the pet's id"));
    CU_ASSERT_EQUAL(json_array_size(at(in, "required")), 1);
    CU_ASSERT(str_at(json_array_get(at(in, "required"), 0), "", "petId"));
    CU_ASSERT(json_is_false(at(in, "additionalProperties")));
    json_decref(in);
    json_t *out = schema_of(h, "getPet", true);
    CU_ASSERT(str_at(out, "properties/name/type", "string"));
    CU_ASSERT_PTR_NULL(at(out, "properties/id/format")); /* not in the subset */
    CU_ASSERT_EQUAL(json_array_size(at(out, "properties/tag/type")), 2);
    json_decref(out);
    CU_ASSERT_EQUAL(th_harness_tool(h, "getPet")->stdout_type,
                    TOOLHOST_SEM_STRUCTURED);
    CU_ASSERT(th_harness_tool(h, "getPet")->flags & TOOLHOST_TOOL_READ_ONLY);
    CU_ASSERT(th_harness_tool(h, "deletePet")->flags &
              TOOLHOST_TOOL_DESTRUCTIVE);
    CU_ASSERT_FALSE(th_harness_tool(h, "createPet")->flags &
                    TOOLHOST_TOOL_IDEMPOTENT);
    CU_ASSERT_STRING_EQUAL(th_harness_tool(h, "getPet")->description,
                           "Get one pet by id");

    /* createPet: the body as a $ref into $defs; nullable; no `example` */
    in = schema_of(h, "createPet", false);
    CU_ASSERT(str_at(in, "properties/body/$ref", "#/$defs/NewPet"));
    CU_ASSERT(str_at(in, "$defs/NewPet/properties/name/type", "string"));
    CU_ASSERT_PTR_NULL(at(in, "$defs/NewPet/properties/name/example"));
    json_t *tag_type = at(in, "$defs/NewPet/properties/tag/type");
    CU_ASSERT_EQUAL(json_array_size(tag_type), 2);
    CU_ASSERT(str_at(json_array_get(tag_type, 1), "", "null"));
    json_decref(in);

    /* placeOrder: 3.0's boolean exclusiveMinimum; xml dropped */
    in = schema_of(h, "placeOrder", false);
    CU_ASSERT_EQUAL(json_integer_value(
                        at(in, "$defs/Order/properties/quantity/exclusiveMinimum")),
                    0);
    CU_ASSERT_PTR_NULL(at(in, "$defs/Order/properties/quantity/minimum"));
    CU_ASSERT_PTR_NULL(at(in, "$defs/Order/xml"));
    json_decref(in);

    /* listPets: query and header parameters; an array output */
    in = schema_of(h, "listPets", false);
    CU_ASSERT(str_at(in, "properties/limit/type", "integer"));
    CU_ASSERT_EQUAL(json_integer_value(at(in, "properties/limit/maximum")), 100);
    CU_ASSERT(str_at(in, "properties/X-Request-Id/type", "string"));
    /* a cookie of one scalar is offered; one whose name is no token, or
     * whose value is an object, is not */
    CU_ASSERT(str_at(in, "properties/view/type", "string"));
    CU_ASSERT_PTR_NULL(at(in, "properties/list;all"));
    CU_ASSERT_PTR_NULL(at(in, "properties/prefs"));
    CU_ASSERT_PTR_NULL(at(in, "required"));
    json_decref(in);
    out = schema_of(h, "listPets", true);
    CU_ASSERT(str_at(out, "type", "array"));
    CU_ASSERT(str_at(out, "items/properties/name/type", "string"));
    json_decref(out);

    /* createCategory: recursion through $defs; no output schema */
    in = schema_of(h, "createCategory", false);
    CU_ASSERT(str_at(in, "$defs/Category/properties/children/items/$ref",
                     "#/$defs/Category"));
    json_decref(in);
    CU_ASSERT_PTR_NULL(th_harness_tool(h, "createCategory")->output_schema);
    CU_ASSERT_EQUAL(th_harness_tool(h, "createCategory")->stdout_type,
                    TOOLHOST_SEM_TEXT);
    /* no response body: no output schema */
    CU_ASSERT_PTR_NULL(th_harness_tool(h, "deletePet")->output_schema);

    /* every tool carries the API's name as its tag (ABI 1.5) */
    const char *const *tags = th_harness_tool(h, "getPet")->tags;
    CU_ASSERT(tags && tags[0] && !strcmp(tags[0], "t") && !tags[1]);

    /* a form body: its object schema is the body's, nullable kept */
    in = schema_of(h, "updatePetWithForm", false);
    CU_ASSERT(str_at(in, "properties/body/type", "object"));
    CU_ASSERT(str_at(in, "properties/body/properties/vaccines/type", "array"));
    CU_ASSERT(str_at(in, "properties/body/properties/vaccines/items/type",
                     "string"));
    CU_ASSERT_EQUAL(json_array_size(at(in, "properties/body/properties/tag/type")),
                    2);
    CU_ASSERT_EQUAL(json_array_size(at(in, "required")), 2); /* petId, body */
    json_decref(in);

    /* no operationId: method and path */
    const toolhost_tool *owner = th_harness_tool(h, "get_pets_petId_owner");
    CU_ASSERT_PTR_NOT_NULL_FATAL(owner);
    CU_ASSERT_STRING_EQUAL(owner->description, "The owner of a pet");
    CU_ASSERT_PTR_NOT_NULL(strstr(owner->long_description,
                                  "HTTP: GET /pets/{petId}/owner"));
    th_harness_unload(h);
}

static void test_prefix_and_filters(void)
{
    char err[1024] = "";
    th_harness *h = load_spec(
        th_test_source_path("tests/openapi/petstore.yaml"),
        "\"prefix\": \"ps_\", \"include\": [\"tag:pets\"], "
        "\"exclude\": [\"deletePet\", \"get_pets_petId_owner\"]",
        err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    CU_ASSERT_EQUAL(th_harness_n_tools(h), 4);
    CU_ASSERT_PTR_NOT_NULL(th_harness_tool(h, "ps_listPets"));
    CU_ASSERT_PTR_NOT_NULL(th_harness_tool(h, "ps_updatePet"));
    CU_ASSERT_PTR_NULL(th_harness_tool(h, "ps_deletePet"));
    CU_ASSERT_PTR_NULL(th_harness_tool(h, "ps_getInventory"));
    th_harness_unload(h);
}

/* A document that must be refused, with every `want` in the message. */
static void refused(const char *text, const char *extra, const char *want)
{
    char *dir = th_test_tmpdir();
    char *spec = th_test_write_file(dir, "spec.yaml", text, (size_t)-1);
    char err[1024] = "";
    th_harness *h = load_spec(spec, extra, err, sizeof err);
    CU_ASSERT_PTR_NULL(h);
    if (!strstr(err, want))
        fprintf(stderr, "\nwanted [%s] in [%s]\n", want, err);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, want));
    th_harness_unload(h);
    free(spec);
    th_test_rmtree(dir);
    free(dir);
}

#define HEAD "openapi: 3.1.0\npaths:\n"

static void test_lies(void)
{
    refused(HEAD "  /a:\n    get:\n      operationId: a\n      parameters:\n"
                 "        - {name: q, in: query, schema: {$ref: "
                 "'other.yaml#/X'}}\n",
            NULL, "api 't': get /a (a): $ref 'other.yaml#/X' is not local");
    refused(HEAD "  /a:\n    get:\n      operationId: a\n      parameters:\n"
                 "        - {name: q, in: query, schema: {$ref: "
                 "'#/components/schemas/Nope'}}\n",
            NULL, "$ref '#/components/schemas/Nope' points at nothing");
    refused(HEAD "  /a:\n    get:\n      operationId: a\n      parameters:\n"
                 "        - {$ref: '#/components/parameters/P'}\n"
                 "components:\n  parameters:\n"
                 "    P: {$ref: '#/components/parameters/P'}\n",
            NULL, "$ref cycle: #/components/parameters/P -> "
                  "#/components/parameters/P");
    refused(HEAD "  /a/{id}:\n    get:\n      operationId: a\n",
            NULL, "the path's {id} has no path parameter");
    refused(HEAD "  /a:\n    get:\n      operationId: a\n      parameters:\n"
                 "        - {name: id, in: path, required: true}\n",
            NULL, "path parameter 'id' is not in the path");
    refused(HEAD "  /a:\n    get:\n      operationId: a\n      parameters:\n"
                 "        - {name: id, in: query}\n"
                 "        - {name: id, in: header}\n",
            NULL, "parameter 'id' is declared twice");
    /* request bodies: a form must be an object; neither JSON nor a
     * form, when required, stops the load */
    refused(HEAD "  /a:\n    post:\n      operationId: a\n"
                 "      requestBody:\n        content:\n"
                 "          application/x-www-form-urlencoded:\n"
                 "            schema: {type: string}\n",
            NULL, "api 't': post /a (a): the form request body's schema is "
                  "not an object");
    refused(HEAD "  /a:\n    post:\n      operationId: a\n"
                 "      requestBody:\n        required: true\n"
                 "        content:\n"
                 "          multipart/form-data:\n"
                 "            schema: {type: object}\n",
            NULL, "the request body has no JSON or form media type");
    refused(HEAD "  /a:\n    get: {operationId: same}\n"
                 "  /b:\n    get: {operationId: same}\n",
            NULL, "tool name 'same' is already taken");
    refused(HEAD "  /a:\n    get: {operationId: "
                 "a_forty_character_operation_id_for_tests}\n",
            "\"prefix\": \"a_very_long_prefix_for_tools_xyz\"",
            "is empty or longer than 64 characters");
}

static void test_attacks(void)
{
    /* a schema nested past the host's 32 levels */
    char deep[8192];
    size_t w = (size_t)snprintf(deep, sizeof deep,
                                HEAD "  /a:\n    post:\n      operationId: a\n"
                                     "      requestBody:\n        content:\n"
                                     "          application/json:\n"
                                     "            schema: ");
    for (int i = 0; i < 40; i++)
        w += (size_t)snprintf(deep + w, sizeof deep - w,
                              "{type: array, items: ");
    w += (size_t)snprintf(deep + w, sizeof deep - w, "{type: string}");
    for (int i = 0; i < 40; i++)
        w += (size_t)snprintf(deep + w, sizeof deep - w, "}");
    snprintf(deep + w, sizeof deep - w, "\n");
    refused(deep, NULL, "nested deeper than 32 levels");
    /* a reference bomb: each schema uses the next four times, 12 levels:
     * 4^12 nodes once inlined.  In a response schema: no output schema (and a
     * bounded load); through references the input inlines (not to
     * #/components/schemas): refused. */
    char bomb[16384];
    w = (size_t)snprintf(bomb, sizeof bomb,
                         HEAD "  /a:\n    get:\n      operationId: a\n"
                              "      responses:\n        '200':\n"
                              "          description: x\n          content:\n"
                              "            application/json:\n"
                              "              schema: {$ref: '#/components/"
                              "schemas/S0'}\ncomponents:\n  schemas:\n");
    for (int i = 0; i < 12; i++)
        w += (size_t)snprintf(bomb + w, sizeof bomb - w,
                              "    S%d: {type: object, properties: {a: {$ref: "
                              "'#/components/schemas/S%d'}, b: {$ref: "
                              "'#/components/schemas/S%d'}, c: {$ref: "
                              "'#/components/schemas/S%d'}, d: {$ref: "
                              "'#/components/schemas/S%d'}}}\n",
                              i, i + 1, i + 1, i + 1, i + 1);
    snprintf(bomb + w, sizeof bomb - w, "    S12: {type: string}\n");
    char *dir = th_test_tmpdir();
    char *spec = th_test_write_file(dir, "bomb.yaml", bomb, (size_t)-1);
    char err[1024] = "";
    th_harness *h = load_spec(spec, NULL, err, sizeof err);
    if (!h)
        fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_PTR_NOT_NULL(h);
    if (h) {
        CU_ASSERT_PTR_NULL(th_harness_tool(h, "a")->output_schema);
        /* the input keeps each component once, in $defs */
        th_harness_unload(h);
    }
    free(spec);
    th_test_rmtree(dir);
    free(dir);
    w = (size_t)snprintf(bomb, sizeof bomb,
                         HEAD "  /a:\n    post:\n      operationId: a\n"
                              "      requestBody:\n        content:\n"
                              "          application/json:\n"
                              "            schema: {$ref: '#/x-s/S0'}\n"
                              "x-s:\n");
    for (int i = 0; i < 12; i++)
        w += (size_t)snprintf(bomb + w, sizeof bomb - w,
                              "  S%d: {type: object, properties: {a: {$ref: "
                              "'#/x-s/S%d'}, b: {$ref: '#/x-s/S%d'}, c: {$ref: "
                              "'#/x-s/S%d'}, d: {$ref: '#/x-s/S%d'}}}\n",
                              i, i + 1, i + 1, i + 1, i + 1);
    snprintf(bomb + w, sizeof bomb - w, "  S12: {type: string}\n");
    refused(bomb, NULL, "a schema of more than 100000 nodes once its "
                        "references are inlined");
    /* the alias bomb */
    refused("openapi: 3.1.0\na: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\n"
            "paths: {}\n", NULL, "spec.yaml:3:8: YAML aliases");
    refused("openapi: 3.1.0\nopenapi: 3.1.0\npaths: {}\n", NULL,
            "spec.yaml:2:1: duplicate key 'openapi'");
    refused("openapi: 3.1.0\npaths: {}\n", "\"max_spec\": \"10B\"",
            "more than max_spec (10)");
    refused("openapi: 3.1.0\npaths: {}\n", "\"base_url\": \"file:///etc\"",
            "only http and https");
    refused("openapi: 3.1.0\npaths: {}\n", "\"base_url\": \"ftp://x\"",
            "only http and https");
}

/* A recursive or composed response schema gives no output schema, and
 * the tool still loads. */
static void test_output_subset(void)
{
    char *dir = th_test_tmpdir();
    char *spec = th_test_write_file(
        dir, "spec.yaml",
        HEAD "  /a:\n    get:\n      operationId: a\n      responses:\n"
             "        '200':\n          description: x\n"
             "          content:\n            application/json:\n"
             "              schema: {allOf: [{type: object}]}\n"
             "  /b:\n    get:\n      operationId: b\n      responses:\n"
             "        '201':\n          description: x\n"
             "          content:\n            application/problem+json:\n"
             "              schema: {type: object, properties: {n: "
             "{type: [integer, 'null']}}}\n",
        (size_t)-1);
    char err[1024] = "";
    th_harness *h = load_spec(spec, NULL, err, sizeof err);
    if (!h)
        fprintf(stderr, "\n%s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    CU_ASSERT_PTR_NULL(th_harness_tool(h, "a")->output_schema);
    json_t *o = schema_of(h, "b", true);
    CU_ASSERT_EQUAL(json_array_size(at(o, "properties/n/type")), 2);
    json_decref(o);
    th_harness_unload(h);
    free(spec);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_openapi_spec(void)
{
    CU_pSuite s = CU_add_suite("openapi_spec", NULL, NULL);
    CU_add_test(s, "petstore", test_petstore);
    CU_add_test(s, "prefix_and_filters", test_prefix_and_filters);
    CU_add_test(s, "lies", test_lies);
    CU_add_test(s, "attacks", test_attacks);
    CU_add_test(s, "output_subset", test_output_subset);
}
