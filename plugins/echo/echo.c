/* echo.c - the echo plugin: the example of the toolhost SDK.  `echo`
 * writes its text back; `echo_async` does the same after reporting a few
 * progress steps, stopping early when cancelled.  execute() reads its
 * arguments with th_sdk_args_init_call(): on a 1.2 host the getters read
 * the host's decoded view (nothing parsed twice), on an older one they
 * parse the map. */
#include <stdio.h>

#include <toolhost/sdk.h>

static int echo(void *state, const toolhost_tool *tool, toolhost_call *call,
                const uint8_t *args, size_t len)
{
    (void)state, (void)tool;
    th_sdk_args a;
    const char *text;
    size_t n;
    int rc = th_sdk_args_init_call(&a, call, args, len);
    if (rc == 0 && (rc = th_sdk_arg_string(&a, "text", &text, &n)) != 0) {
        th_sdk_args_destroy(&a);
        return th_sdk_fail(call, "'text' must be a string: %s",
                           th_sdk_strerror(rc));
    }
    if (rc == 0)
        rc = th_sdk_write(call, TOOLHOST_STDOUT, text, n);
    th_sdk_args_destroy(&a);
    if (rc != 0)
        return th_sdk_fail(call, "echo: %s", th_sdk_strerror(rc));
    return TOOLHOST_OK;
}

/* Async: the first progress update acknowledges the call; the caller gets
 * the others as events.  Cancellation is checked between steps. */
static int echo_async(void *state, const toolhost_tool *tool,
                      toolhost_call *call, const uint8_t *args, size_t len)
{
    (void)state, (void)tool;
    th_sdk_args a;
    const char *text;
    size_t n;
    if (th_sdk_args_init_call(&a, call, args, len) != 0 ||
        th_sdk_arg_string(&a, "text", &text, &n) != 0) {
        th_sdk_args_destroy(&a);
        return th_sdk_fail(call, "'text' must be a string");
    }
    int64_t steps = th_sdk_arg_int_or(&a, "steps", 3);
    int64_t delay_ms = th_sdk_arg_int_or(&a, "delay_ms", 10);
    for (int64_t i = 1; i <= steps; i++) {
        th_sdk_progress(call, (double)i / (double)steps, "step %lld/%lld",
                        (long long)i, (long long)steps);
        /* th_sdk_sleep_ms() wakes up early when the call is cancelled */
        if (th_sdk_cancelled(call) || th_sdk_sleep_ms(call, delay_ms) != 0) {
            th_sdk_args_destroy(&a);
            return th_sdk_fail(call, "cancelled");
        }
    }
    int rc = th_sdk_write(call, TOOLHOST_STDOUT, text, n);
    th_sdk_args_destroy(&a);
    return rc == 0 ? TOOLHOST_OK : TOOLHOST_FAILED;
}

/* steps and delay_ms may not be negative: the parameter table cannot say
 * so, validate_args() does. */
static int echo_async_check(void *state, const toolhost_tool *tool,
                            const uint8_t *args, size_t len, char *err,
                            size_t err_size)
{
    (void)state, (void)tool;
    th_sdk_args a;
    int bad = th_sdk_args_init(&a, args, len) != 0 ||
              th_sdk_arg_int_or(&a, "steps", 0) < 0 ||
              th_sdk_arg_int_or(&a, "delay_ms", 0) < 0;
    th_sdk_args_destroy(&a);
    if (bad)
        snprintf(err, err_size, "'steps' and 'delay_ms' must be >= 0");
    return bad;
}

static const toolhost_param echo_params[] = {
    TH_SDK_PARAM("text", STRING, "The text to write to stdout.",
                 TH_SDK_REQUIRED),
};

static const toolhost_param echo_async_params[] = {
    TH_SDK_PARAM("text", STRING, "The text to write at the end.",
                 TH_SDK_REQUIRED),
    TH_SDK_PARAM("steps", INTEGER, "How many progress steps to report.",
                 TH_SDK_DEFAULT("3")),
    TH_SDK_PARAM("delay_ms", INTEGER, "Milliseconds to wait per step.",
                 TH_SDK_DEFAULT("10")),
};

static const toolhost_tool echo_tools[] = {
    TH_SDK_TOOL("echo", echo, "Writes `text` to stdout unchanged.",
                TH_SDK_PARAMS(echo_params), TH_SDK_OUTPUT(TEXT, ERROR),
                .flags = TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT |
                         TOOLHOST_TOOL_SHORT),
    TH_SDK_TOOL("echo_async", echo_async,
                "Reports `steps` progress updates, then writes `text`.",
                TH_SDK_PARAMS(echo_async_params), TH_SDK_OUTPUT(TEXT, ERROR),
                .flags = TOOLHOST_TOOL_ASYNC | TOOLHOST_TOOL_READ_ONLY,
                .validate_args = echo_async_check),
};

TH_SDK_PLUGIN("echo", "1.0.0", echo_tools,
              "Echoes text back; an example and a test aid.")
