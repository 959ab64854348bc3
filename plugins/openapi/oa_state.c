/* oa_state.c - freeing the openapi plugin's state (openapi.h): the APIs
 * read from the config and the tools made from their documents.  Apart
 * from the rest so that the document converter can be driven without the
 * plugin's descriptor (fuzz/openapi.c). */
#include <curl/curl.h>
#include <stdlib.h>

#include "openapi.h"

static void strv_free(char **v)
{
    if (!v)
        return;
    for (char **p = v; *p; p++)
        free(*p);
    free(v);
}

static void api_free(oa_api *a)
{
    free(a->name);
    free(a->spec);
    free(a->base_url);
    free(a->base_host);
    free(a->prefix);
    strv_free(a->include);
    strv_free(a->exclude);
    free(a->auth_env);
    free(a->auth_env2);
    free(a->key_header);
    free(a->key_query);
    strv_free(a->headers);
    free(a->tags[0]);
    if (a->pool) {
        for (long i = 0; i < a->pool->n; i++)
            curl_easy_cleanup(a->pool->idle[i]);
        pthread_mutex_destroy(&a->pool->mu);
        free(a->pool);
    }
}

void oa_state_free(oa_state *st)
{
    if (!st)
        return;
    for (uint32_t i = 0; i < st->n_tools; i++) {
        toolhost_tool *t = &st->tools_rw[i];
        free((char *)t->name);
        free((char *)t->description);
        free((char *)t->long_description);
        free((char *)t->input_schema);
        free((char *)t->output_schema);
        oa_op *op = &st->ops[i];
        free(op->method);
        free(op->path);
        for (size_t k = 0; k < op->n_params; k++)
            free(op->params[k].name);
        free(op->params);
    }
    free(st->tools_rw);
    free(st->ops);
    for (size_t i = 0; i < st->n_apis; i++)
        api_free(&st->apis[i]);
    free(st->apis);
    if (st->curl_ready)
        curl_global_cleanup();
    free(st);
}

