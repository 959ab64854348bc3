/* test_sdk_rust.c - the Rust SDK (sdk/rust) end to end.  Its examples
 * (build/examples/rust_*.so, built by `make examples` with Debian's cargo)
 * pass `toolhost check --strict`, answer through the real `toolhost serve`
 * (the RPC client library) and over MCP (stdio `toolhost mcp`): echo, the
 * async countdown's progress and its cancellation (the tool sees it and
 * stops), the constrained tool's refusals and its structured output, a
 * panic inside a tool answered as the tool's error while the host keeps
 * serving.  What the call handles' types forbid does not compile (a write
 * to a completed call, the Call after suspend(), a Call sent to another
 * thread).  Then what an author does: `make install`, `toolhost new
 * --lang rust`, build the project against the installed crates, call it.
 * Without the Rust toolchain the tests skip, saying what is missing
 * (build/examples/rust.missing); with CI=true that is a failure. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "integration/test_rpc_harness.h"

static const char *rust_so[] = {"examples/rust_echo.so",
                                "examples/rust_async.so",
                                "examples/rust_constrained.so"};

/* NULL when the examples are built, else why not (static text). */
static const char *rust_missing(void)
{
    static char why[1024];
    for (size_t i = 0; i < sizeof rust_so / sizeof rust_so[0]; i++) {
        if (access(th_test_build_path(rust_so[i]), R_OK) == 0)
            continue;
        char *m = th_test_read_file(th_test_build_path("examples/rust.missing"),
                                    NULL);
        if (m)
            m[strcspn(m, "\n")] = '\0';
        snprintf(why, sizeof why,
                 "build/%s is not built: make examples needs Debian's cargo, "
                 "rustc, bindgen and Rust crates (scripts/install-deps)%s%s",
                 rust_so[i], m && *m ? "; missing: " : "", m ? m : "");
        free(m);
        return why;
    }
    return NULL;
}

/* Skips (fails with CI=true) when the examples are not built. */
#define NEED_RUST()                                                           \
    do {                                                                      \
        const char *why_ = rust_missing();                                    \
        if (why_) {                                                           \
            const char *ci_ = getenv("CI");                                   \
            if (ci_ && strcmp(ci_, "true") == 0) {                            \
                fprintf(stderr, "\n  %s\n", why_);                            \
                CU_FAIL("the Rust SDK is not built, with CI=true");           \
                return;                                                       \
            }                                                                 \
            TH_SKIP(why_);                                                    \
        }                                                                     \
    } while (0)

static const char rust_config[] =
    "host:\n"
    "  log_level: debug\n"
    "  shutdown_grace: 1s\n"
    "plugins:\n"
    "  - name: echo\n"
    "    path: @BUILD@/examples/rust_echo.so\n"
    "  - name: rust_async\n"
    "    path: @BUILD@/examples/rust_async.so\n"
    "  - name: rust_constrained\n"
    "    path: @BUILD@/examples/rust_constrained.so\n"
    "toolsets:\n"
    "  - name: public\n"
    "    tools: [\"*\"]\n";

/* ---- check --strict ------------------------------------------------------- */

static void test_check_strict(void)
{
    NEED_RUST();
    for (size_t i = 0; i < sizeof rust_so / sizeof rust_so[0]; i++) {
        const char *so = th_test_build_path(rust_so[i]);
        /* Not under valgrind (serve and mcp below run these objects
         * there): check gives init in its child a fixed 10 s, which two
         * valgrind start-ups loading a Rust object can pass on a loaded
         * machine. */
        char *argv[] = {(char *)th_test_build_path("toolhost"), "check",
                        "--strict", (char *)so, NULL};
        th_test_run r;
        CU_ASSERT_EQUAL_FATAL(
            th_test_run_argv(argv, NULL, (int)(60), 0,
                             &r),
            0);
        if (r.status != 0 || !strstr(r.out, "0 errors, 0 warnings"))
            fprintf(stderr, "\n  toolhost check --strict %s:\n%s%s", so,
                    r.out, r.err);
        CU_ASSERT_EQUAL(r.status, 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "0 errors, 0 warnings"));
        th_test_run_free(&r);
    }
}

/* ---- through `toolhost serve` ------------------------------------------ */

typedef struct rust_call {
    msgpack_unpacked u;
    uint8_t *raw;              /* the packed result u points into */
    const msgpack_object *res; /* the final result map */
    char text[8192];           /* it printed, for strstr() */
    int progress;              /* progress notifications seen */
    bool counting;             /* the acknowledgement's message seen */
    volatile sig_atomic_t cancel; /* the client's cancel flag */
    bool cancel_on_progress;
} rust_call;

static int on_progress(const char *method, size_t method_len,
                       const msgpack_object *params, void *ud)
{
    (void)method, (void)method_len;
    rust_call *rc = ud;
    char buf[512];
    msgpack_object_print_buffer(buf, sizeof buf, *params);
    rc->progress++;
    if (strstr(buf, "counting down from"))
        rc->counting = true;
    if (rc->cancel_on_progress)
        rc->cancel = 1;
    return 0;
}

/* tools.call of `tool` with JSON arguments; 0 when a result came. */
static int rust_call_tool(rpc_srv *s, const char *tool, const char *json,
                          rust_call *rc)
{
    th_rpc_client *c = rpc_connect(s);
    if (!c)
        return -1;
    if (rc->cancel_on_progress)
        th_rpc_client_set_cancel_flag(c, &rc->cancel);
    th_buf args = TH_BUF_INIT;
    rpc_pack_json(&args, json);
    uint8_t *res = NULL;
    size_t len = 0;
    th_error e;
    int rv = th_rpc_client_call_tool(c, tool, args.data, args.len, 0,
                                     on_progress, rc, &res, &len, &e);
    th_buf_destroy(&args);
    th_rpc_client_close(c);
    if (rv != 0) {
        fprintf(stderr, "\n  %s: %s\n", tool, e.msg);
        return -1;
    }
    msgpack_unpacked_init(&rc->u);
    size_t off = 0;
    if (msgpack_unpack_next(&rc->u, (const char *)res, len, &off) ==
        MSGPACK_UNPACK_SUCCESS) {
        rc->res = &rc->u.data;
        msgpack_object_print_buffer(rc->text, sizeof rc->text, *rc->res);
    }
    rc->raw = res;
    return rc->res ? 0 : -1;
}

static void rust_call_free(rust_call *rc)
{
    msgpack_unpacked_destroy(&rc->u); /* a zeroed one holds nothing */
    free(rc->raw);
    memset(rc, 0, sizeof *rc);
}

static void test_serve(void)
{
    NEED_RUST();
    rpc_srv s;
    rpc_opts o = {.config = rust_config};
    CU_ASSERT_FATAL(rpc_srv_start(&s, &o) == 0);
    rust_call rc = {0};

    /* echo: the text back, unchanged */
    CU_ASSERT_EQUAL(rust_call_tool(&s, "echo", "{\"text\": \"hello, Rust\"}",
                                   &rc),
                    0);
    CU_ASSERT(rpc_ok(rc.res) && rpc_stdout_is(rc.res, "hello, Rust"));
    rust_call_free(&rc);

    /* structured output that matches the output schema (the host checks
     * it when the call ends) */
    CU_ASSERT_EQUAL(rust_call_tool(&s, "rust_constrained_pad",
                                   "{\"word\": \"abc\", \"width\": 7, "
                                   "\"align\": \"center\", \"fill\": \".\"}",
                                   &rc),
                    0);
    CU_ASSERT(rpc_ok(rc.res) &&
              rpc_stdout_is(rc.res, "{\"text\":\"..abc..\",\"width\":7,"
                                    "\"padding\":4}"));
    rust_call_free(&rc);
    /* defaults filled in by the host: width 10, align left */
    CU_ASSERT_EQUAL(rust_call_tool(&s, "rust_constrained_pad",
                                   "{\"word\": \"ab\"}", &rc),
                    0);
    CU_ASSERT(rpc_ok(rc.res) &&
              rpc_stdout_is(rc.res, "{\"text\":\"ab        \",\"width\":10,"
                                    "\"padding\":8}"));
    rust_call_free(&rc);

    /* each constraint refused with a message naming it */
    static const struct {
        const char *args, *says;
    } bad[] = {
        {"{\"word\": \"ABC\"}", "must match the pattern '^[a-z]+$'"},
        {"{\"word\": \"abc\", \"width\": 81}", "must be <= 80"},
        {"{\"word\": \"abc\", \"width\": 0}", "must be >= 1"},
        {"{\"word\": \"abc\", \"align\": \"middle\"}", "align"},
        {"{\"word\": \"abc\", \"fill\": \"--\"}", "at most 1"},
        {"{}", "missing required parameter 'word'"},
        /* the tool's own validate: what the table cannot say */
        {"{\"word\": \"abc\", \"fill\": \"x\"}",
         "'fill' must not be a letter, got 'x'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CU_ASSERT_EQUAL(rust_call_tool(&s, "rust_constrained_pad",
                                       bad[i].args, &rc),
                        0);
        CU_ASSERT(rpc_tool_error_is(rc.res, "invalid_arguments"));
        if (!strstr(rc.text, bad[i].says))
            fprintf(stderr, "\n  %s: %s\n", bad[i].args, rc.text);
        CU_ASSERT_PTR_NOT_NULL(strstr(rc.text, bad[i].says));
        rust_call_free(&rc);
    }

    /* a panic inside the tool: the call's error, and the host serves on */
    CU_ASSERT_EQUAL(rust_call_tool(&s, "rust_async_panic",
                                   "{\"message\": \"boom\"}", &rc),
                    0);
    CU_ASSERT(!rpc_ok(rc.res));
    CU_ASSERT_PTR_NOT_NULL(strstr(rc.text, "the tool panicked: boom"));
    rust_call_free(&rc);
    CU_ASSERT(rpc_alive(&s));
    CU_ASSERT(rpc_log_wait(&s, "panicked at 'boom'", rpc_wait_ms()));

    /* ABI 1.5: a backend's failure is its code with its hint, from the
     * call's thread and from the tool's own */
    static const struct {
        const char *args, *code;
        uint64_t retry_ms;
    } be[] = {
        {"{\"kind\": \"rate_limited\", \"retry_after_ms\": 7000}",
         "rate_limited", 7000},
        {"{\"kind\": \"unavailable\", \"later\": true}", "unavailable", 0},
        {"{\"kind\": \"unavailable\", \"retry_after_ms\": 1500, "
         "\"later\": true}",
         "unavailable", 1500},
        /* a timeout carries no hint (docs/protocol.md) */
        {"{\"kind\": \"timeout\", \"retry_after_ms\": 1500}",
         "backend_timeout", 0},
    };
    for (size_t i = 0; i < sizeof be / sizeof be[0]; i++) {
        CU_ASSERT_EQUAL(rust_call_tool(&s, "rust_async_backend", be[i].args,
                                       &rc),
                        0);
        bool code = rpc_tool_error_is(rc.res, be[i].code);
        const msgpack_object *ra =
            th_rpc_map_get(th_rpc_map_get(rc.res, "error"), "retry_after_ms");
        bool hint = be[i].retry_ms
                        ? ra && ra->type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
                              ra->via.u64 == be[i].retry_ms
                        : !ra;
        if (!code || !hint)
            fprintf(stderr, "\n  rust_async_backend %s: %s\n", be[i].args,
                    rc.text);
        CU_ASSERT(code);
        CU_ASSERT(hint);
        CU_ASSERT_PTR_NOT_NULL(strstr(rc.text, "the service said"));
        rust_call_free(&rc);
    }

    /* async: progress from the tool's own thread, then its text */
    CU_ASSERT_EQUAL(rust_call_tool(&s, "rust_async_countdown",
                                   "{\"steps\": 3, \"delay_ms\": 5, "
                                   "\"text\": \"done\"}",
                                   &rc),
                    0);
    CU_ASSERT(rpc_ok(rc.res) && rpc_stdout_is(rc.res, "done"));
    CU_ASSERT(rc.counting);
    CU_ASSERT(rc.progress >= 1);
    rust_call_free(&rc);

    /* cancelled at its first progress update: the caller gets
     * `cancelled` long before the 1000 s the steps would take, and the
     * tool itself stops (its log line says where) */
    int64_t t0 = rpc_now_ms();
    rc.cancel_on_progress = true;
    CU_ASSERT_EQUAL(rust_call_tool(&s, "rust_async_countdown",
                                   "{\"steps\": 1000, \"delay_ms\": 1000}",
                                   &rc),
                    0);
    CU_ASSERT(rpc_tool_error_is(rc.res, "cancelled"));
    CU_ASSERT(rpc_now_ms() - t0 < rpc_wait_ms());
    rust_call_free(&rc);
    CU_ASSERT(rpc_log_wait(&s, "stopped at step 1 of 1000: cancelled",
                           rpc_wait_ms()));
    CU_ASSERT(rpc_alive(&s));

    if (!rpc_alive(&s))
        rpc_dump_log(&s);
    CU_ASSERT_EQUAL(rpc_srv_stop(&s, SIGTERM), 0);
    rpc_srv_free(&s);
}

/* ---- over MCP (stdio) ----------------------------------------------------- */

#define MCP_CALL(id, tool, args, meta)                                        \
    "{\"jsonrpc\":\"2.0\",\"id\":" #id ",\"method\":\"tools/call\","          \
    "\"params\":{\"name\":\"" tool "\",\"arguments\":" args meta "}}\n"

/* The line of out whose "id" is id (NULL when none), as text. */
static const char *mcp_answer(char *out, int id, char *buf, size_t cap)
{
    char key[32];
    snprintf(key, sizeof key, "\"id\":%d,", id);
    char key2[32];
    snprintf(key2, sizeof key2, "\"id\":%d}", id);
    for (char *line = out; line && *line;) {
        char *nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        if (n < cap) {
            memcpy(buf, line, n);
            buf[n] = '\0';
            if ((strstr(buf, key) || strstr(buf, key2)) &&
                !strstr(buf, "\"method\""))
                return buf;
        }
        line = nl ? nl + 1 : NULL;
    }
    return NULL;
}

static void test_mcp(void)
{
    NEED_RUST();
    char *dir = th_test_tmpdir();
    char text[2048];
    snprintf(text, sizeof text, "%s", rust_config);
    /* @BUILD@ -> the build folder */
    char cfgtext[4096];
    size_t n = 0;
    for (const char *p = text; *p && n + 1 < sizeof cfgtext;) {
        if (!strncmp(p, "@BUILD@", 7)) {
            n += (size_t)snprintf(cfgtext + n, sizeof cfgtext - n, "%s",
                                  TH_BUILD_DIR);
            p += 7;
        } else {
            cfgtext[n++] = *p++;
        }
    }
    cfgtext[n] = '\0';
    char *cfg = th_test_write_file(dir, "mcp.yaml", cfgtext, (size_t)-1);
    const char *input =
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
        "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"
        "\"clientInfo\":{\"name\":\"raw\",\"version\":\"1\"}}}\n"
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n"
        "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}\n"
        MCP_CALL(3, "echo", "{\"text\":\"over MCP\"}", "")
        MCP_CALL(4, "rust_constrained_pad",
                 "{\"word\":\"xy\",\"width\":4,\"align\":\"right\"}", "")
        MCP_CALL(5, "rust_constrained_pad", "{\"word\":\"XY\"}", "")
        MCP_CALL(6, "rust_async_panic", "{}", "")
        MCP_CALL(7, "rust_async_countdown",
                 "{\"steps\":2,\"delay_ms\":5,\"text\":\"mcp\"}",
                 ",\"_meta\":{\"progressToken\":77}")
        MCP_CALL(8, "echo", "{\"text\":\"still here\"}", "");
    th_test_run r;
    char *argv[] = {(char *)th_test_build_path("toolhost"), "mcp", "-c", cfg,
                    NULL};
    CU_ASSERT_EQUAL_FATAL(
        th_test_run_argv(argv, input, (int)(60), 1, &r),
        0);
    CU_ASSERT_EQUAL(r.status, 0);
    char buf[8192];
    const char *a;
    /* tools/list: the Rust declarations as a model sees them */
    a = mcp_answer(r.out, 2, buf, sizeof buf);
    CU_ASSERT(a && strstr(a, "\"outputSchema\"") &&
              strstr(a, "\"pattern\":\"^[a-z]+$\"") &&
              strstr(a, "\"enum\":[\"left\",\"right\",\"center\"]") &&
              strstr(a, "\"title\":\"Pad a word\""));
    /* tags = [...] of #[tool] (ABI 1.5), in the tool's _meta */
    CU_ASSERT(a && strstr(a, "\"_meta\":{\"toolhost/tags\":[\"text\","
                             "\"read-only\"]}"));
    a = mcp_answer(r.out, 3, buf, sizeof buf);
    CU_ASSERT(a && strstr(a, "\"text\":\"over MCP\"") &&
              strstr(a, "\"isError\":false"));
    a = mcp_answer(r.out, 4, buf, sizeof buf);
    CU_ASSERT(a && strstr(a, "\"structuredContent\":{") &&
              strstr(a, "\"padding\":2"));
    a = mcp_answer(r.out, 5, buf, sizeof buf);
    CU_ASSERT(a && strstr(a, "must match the pattern"));
    a = mcp_answer(r.out, 6, buf, sizeof buf);
    CU_ASSERT(a && strstr(a, "\"isError\":true") &&
              strstr(a, "the tool panicked: on purpose"));
    a = mcp_answer(r.out, 7, buf, sizeof buf);
    CU_ASSERT(a && strstr(a, "mcp\\n") && strstr(a, "\"isError\":false"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "\"progressToken\":77"));
    a = mcp_answer(r.out, 8, buf, sizeof buf);
    CU_ASSERT(a && strstr(a, "still here"));
    if (r.status != 0 || !mcp_answer(r.out, 8, buf, sizeof buf))
        fprintf(stderr, "\n  toolhost mcp:\n%s\n%s\n", r.out, r.err);
    th_test_run_free(&r);
    free(cfg);
    th_test_rmtree(dir);
    free(dir);
}

/* ---- what the types forbid ------------------------------------------------ */

/* A crate using the in-tree toolhost crate once right (it builds) and once
 * per misuse (it must not build, with the compiler's reason): writing to a
 * completed AsyncCall, using the Call after suspend(), sending a Call to
 * another thread. */
static const char misuse_rs[] =
    "use toolhost::{AsyncCall, Call, Error, Pending};\n"
    "#[cfg(feature = \"right\")]\n"
    "pub fn f(call: Call) -> Result<Pending, Error> {\n"
    "    let (c, p) = call.suspend()?;\n"
    "    toolhost::spawn(move || { let _ = c.out(\"x\"); c.complete(Ok(())) })?;\n"
    "    Ok(p)\n"
    "}\n"
    "#[cfg(feature = \"after_complete\")]\n"
    "pub fn f(c: AsyncCall) { c.complete(Ok(())); let _ = c.out(\"late\"); }\n"
    "#[cfg(feature = \"after_suspend\")]\n"
    "pub fn f(call: Call) -> Result<Pending, Error> {\n"
    "    let (c, p) = call.suspend()?;\n"
    "    let _ = call.out(\"x\");\n"
    "    drop(c);\n"
    "    Ok(p)\n"
    "}\n"
    "#[cfg(feature = \"call_to_thread\")]\n"
    "pub fn f(call: Call<'static>) {\n"
    "    std::thread::spawn(move || { let _ = call.out(\"x\"); });\n"
    "}\n";

static void test_misuse_does_not_compile(void)
{
    NEED_RUST();
    th_test_timeout(600);
    char *dir = th_test_tmpdir();
    char toml[1024];
    snprintf(toml, sizeof toml,
             "[package]\nname = \"misuse\"\nversion = \"0.0.0\"\n"
             "edition = \"2021\"\n[lib]\npath = \"lib.rs\"\n"
             /* serde as the examples have it: their build is reused */
             "[dependencies]\ntoolhost = { path = \"%s/sdk/rust/toolhost\" }\n"
             "serde = { version = \"1\", features = [\"derive\"] }\n"
             "[features]\nright = []\nafter_complete = []\n"
             "after_suspend = []\ncall_to_thread = []\n"
             "[profile.release]\npanic = \"unwind\"\ndebug = false\n"
             "strip = \"debuginfo\"\n",
             TH_SOURCE_DIR);
    free(th_test_write_file(dir, "Cargo.toml", toml, (size_t)-1));
    free(th_test_write_file(dir, "lib.rs", misuse_rs, (size_t)-1));
    static const struct {
        const char *feature, *says;
    } cases[] = {
        {"right", NULL},
        {"after_complete", "borrow of moved value: `c`"},
        {"after_suspend", "borrow of moved value: `call`"},
        {"call_to_thread", "cannot be sent between threads safely"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char script[4096];
        snprintf(script, sizeof script,
                 "cd '%s' && CARGO_HOME='%s/cargo-home' RUSTC=/usr/bin/rustc "
                 "BINDGEN=/usr/bin/bindgen /usr/bin/cargo build --offline "
                 "--release --lib --target-dir '%s/rust' "
                 "--config 'source.crates-io.replace-with=\"debian\"' "
                 "--config 'source.debian.directory=\"/usr/share/cargo/"
                 "registry\"' --features %s 2>&1",
                 dir, dir, TH_SDK_CACHE, cases[i].feature);
        char *argv[] = {"/bin/sh", "-c", script, NULL};
        th_test_run r;
        CU_ASSERT_EQUAL_FATAL(th_test_run_argv(argv, NULL, 600, 0, &r), 0);
        bool ok = cases[i].says ? r.status != 0 && strstr(r.out, cases[i].says)
                                : r.status == 0;
        if (!ok)
            fprintf(stderr, "\n  feature %s (%d):\n%s\n", cases[i].feature,
                    r.status, r.out);
        CU_ASSERT(ok);
        th_test_run_free(&r);
    }
    th_test_rmtree(dir);
    free(dir);
}

/* ---- the template, against an installed toolhost ---------------------- */

static void test_template(void)
{
    NEED_RUST();
    /* make install, then a cargo build of the crates from scratch: slower
     * than the default watchdog allows on a busy machine */
    th_test_timeout(900);
    char *dir = th_test_tmpdir();
    char script[8192];
    snprintf(script, sizeof script,
             "set -e\n"
             "cd '%s'\n"
             "make --no-print-directory -s install SANITIZER='%s' "
             "PREFIX='%s/prefix' >/dev/null\n"
             "test -f '%s/prefix/share/toolhost/rust/toolhost-sys/build.rs'\n"
             "export PKG_CONFIG_PATH='%s/prefix/lib/pkgconfig'\n"
             "export CARGO_HOME='%s/cargo-home'\n"
             "cd '%s'\n"
             "'%s/prefix/bin/toolhost' new --lang rust greeter >/dev/null\n"
             "cd greeter\n"
             /* the crates from Debian's registry as make examples built
              * them (the same target folder): only the project's and the
              * installed toolhost crates are compiled */
             "make -s CARGO=/usr/bin/cargo RUSTC=/usr/bin/rustc "
             "BINDGEN=/usr/bin/bindgen TARGET_DIR='%s/rust' "
             ">../build.log 2>&1 || "
             "{ tail -40 ../build.log; exit 5; }\n"
             "test -L toolhost-sdk\n"
             "'%s/prefix/bin/toolhost' check --strict ./greeter.so\n"
             "'%s/prefix/bin/toolhost' call ./greeter.so greeter_hello "
             "name=rustacean times=2\n"
             "'%s/prefix/bin/toolhost' call ./greeter.so greeter_hello\n"
             "if '%s/prefix/bin/toolhost' call ./greeter.so greeter_hello "
             "times=0 2>../refused.txt; then exit 7; fi\n"
             "cat ../refused.txt\n"
             /* chmod go-w whatever the umask */
             "test -z \"$(find greeter.so -perm /022)\" && echo not-writable\n"
             "cd '%s'\n"
             "make --no-print-directory -s uninstall PREFIX='%s/prefix' "
             ">/dev/null\n"
             "test ! -e '%s/prefix/share/toolhost/rust'\n"
             "echo template-ok\n",
             TH_SOURCE_DIR, TH_SANITIZER, dir, dir, dir, dir, dir, dir,
             TH_SDK_CACHE, dir, dir, dir, dir, TH_SOURCE_DIR, dir, dir);
    char *argv[] = {"/bin/sh", "-c", script, NULL};
    th_test_run r;
    CU_ASSERT_EQUAL_FATAL(th_test_run_argv(argv, NULL, 900, 0, &r), 0);
    if (r.status != 0 || !strstr(r.out, "template-ok"))
        fprintf(stderr, "\n  the rust template (%d):\n%s\n%s\n", r.status,
                r.out, r.err);
    CU_ASSERT_EQUAL(r.status, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "0 errors, 0 warnings"));
    CU_ASSERT_PTR_NOT_NULL(
        strstr(r.out, "hello, rustacean\nhello, rustacean\nhello, world\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "parameter 'times' must be >= 1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "not-writable"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r.out, "template-ok"));
    th_test_run_free(&r);
    th_test_rmtree(dir);
    free(dir);
}

void th_suite_sdk_rust(void)
{
    CU_pSuite s = CU_add_suite("sdk_rust", NULL, NULL);
    CU_add_test(s, "check_strict", test_check_strict);
    CU_add_test(s, "serve", test_serve);
    CU_add_test(s, "mcp", test_mcp);
    CU_add_test(s, "misuse_does_not_compile", test_misuse_does_not_compile);
    CU_add_test(s, "template", test_template);
}
