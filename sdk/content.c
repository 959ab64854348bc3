/* content.c - the SDK's helpers for what a resource read, a prompt get or
 * a completion returns (ABI 1.4, toolhost_host_api.content_add;
 * toolhost/sdk.h): one toolhost_block each, checked against the host's
 * minor. */
#include <string.h>

#include "toolhost/sdk.h"

static int add(toolhost_content *out, uint32_t kind, const char *role,
               const char *mime, const void *data, size_t len,
               const char *uri, const char *name)
{
    if (!out || !TH_SDK_HOST_HAS(out->host, content_add))
        return TOOLHOST_EINVAL;
    toolhost_block b = {.struct_size = sizeof b, .kind = kind, .role = role,
                        .mime_type = mime, .data = data, .len = len,
                        .uri = uri, .name = name};
    return out->host->content_add(out, &b);
}

int th_sdk_content_text(toolhost_content *out, const char *text)
{
    if (!text)
        return TOOLHOST_EINVAL;
    return add(out, TOOLHOST_BLOCK_TEXT, NULL, NULL, text, strlen(text),
               NULL, NULL);
}

int th_sdk_content_bytes(toolhost_content *out, const char *mime,
                         const void *data, size_t len)
{
    return add(out, TOOLHOST_BLOCK_RESOURCE, NULL, mime, data, len, NULL,
               NULL);
}

int th_sdk_prompt_text(toolhost_content *out, const char *role,
                       const char *text)
{
    if (!text)
        return TOOLHOST_EINVAL;
    return add(out, TOOLHOST_BLOCK_TEXT, role, NULL, text, strlen(text), NULL,
               NULL);
}

int th_sdk_prompt_image(toolhost_content *out, const char *role,
                        const char *mime, const void *data, size_t len)
{
    return add(out, TOOLHOST_BLOCK_IMAGE, role, mime, data, len, NULL, NULL);
}

int th_sdk_prompt_audio(toolhost_content *out, const char *role,
                        const char *mime, const void *data, size_t len)
{
    return add(out, TOOLHOST_BLOCK_AUDIO, role, mime, data, len, NULL, NULL);
}

int th_sdk_prompt_resource(toolhost_content *out, const char *role,
                           const char *uri, const char *mime,
                           const void *data, size_t len)
{
    return add(out, TOOLHOST_BLOCK_RESOURCE, role, mime, data, len, uri,
               NULL);
}

int th_sdk_prompt_link(toolhost_content *out, const char *role,
                       const char *uri, const char *name, const char *mime)
{
    return add(out, TOOLHOST_BLOCK_LINK, role, mime, NULL, 0, uri, name);
}

int th_sdk_complete_value(toolhost_content *out, const char *value)
{
    return th_sdk_content_text(out, value);
}

void th_sdk_resource_updated(const toolhost_host_api *host, const char *uri)
{
    if (TH_SDK_HOST_HAS(host, resource_updated) && uri)
        host->resource_updated(host, uri);
}

/* ---- Tool results of several blocks; asks --------------------------------- */

static int write_block(toolhost_call *call, uint32_t kind, const char *mime,
                       const void *data, size_t len, const char *uri,
                       const char *name)
{
    if (!call || !call->host)
        return TOOLHOST_EINVAL;
    if (!TH_SDK_HOST_HAS(call->host, write_block))
        return TOOLHOST_ENOTSUP;
    toolhost_block b = {.struct_size = sizeof b, .kind = kind,
                        .mime_type = mime, .data = data, .len = len,
                        .uri = uri, .name = name};
    return call->host->write_block(call, &b);
}

int th_sdk_write_text_block(toolhost_call *call, const char *text)
{
    if (!text)
        return TOOLHOST_EINVAL;
    return write_block(call, TOOLHOST_BLOCK_TEXT, NULL, text, strlen(text),
                       NULL, NULL);
}

int th_sdk_write_image(toolhost_call *call, const char *mime,
                       const void *data, size_t len)
{
    return write_block(call, TOOLHOST_BLOCK_IMAGE, mime, data, len, NULL,
                       NULL);
}

int th_sdk_write_audio(toolhost_call *call, const char *mime,
                       const void *data, size_t len)
{
    return write_block(call, TOOLHOST_BLOCK_AUDIO, mime, data, len, NULL,
                       NULL);
}

int th_sdk_write_resource(toolhost_call *call, const char *uri,
                          const char *mime, const void *data, size_t len)
{
    return write_block(call, TOOLHOST_BLOCK_RESOURCE, mime, data, len, uri,
                       NULL);
}

int th_sdk_write_link(toolhost_call *call, const char *uri, const char *name,
                      const char *mime)
{
    return write_block(call, TOOLHOST_BLOCK_LINK, mime, NULL, 0, uri, name);
}

int th_sdk_ask_client(toolhost_call *call, int kind, const char *request,
                      const char **answer, size_t *answer_len)
{
    if (!call || !call->host || !request || !answer || !answer_len)
        return TOOLHOST_EINVAL;
    if (!TH_SDK_HOST_HAS(call->host, ask_client))
        return TOOLHOST_ENOTSUP;
    return call->host->ask_client(call, kind, request, strlen(request),
                                  answer, answer_len);
}
