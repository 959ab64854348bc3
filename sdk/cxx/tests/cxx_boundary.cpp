// cxx_boundary.cpp - a test plugin for tests/integration/test_sdk_cxx.c:
// tools that misbehave at the C++ SDK's boundary on purpose (exceptions of
// every kind, a Pending never completed, a handle used after completion,
// arguments read as the wrong type), each turned into a tool error with
// its reason on stderr, never an exception into the host; and the config
// block and validate() hooks.
#include <stdexcept>
#include <string>

#include <toolhost/toolhost.hpp>

namespace th = toolhost;

namespace {

th::Tool tool(const char *name, th::Tool::Handler h, uint32_t flags = 0)
{
    return th::Tool(name, "A misbehaving tool (a test aid).")
        .param(th::Param::string("text", "Some text.").default_value("t"))
        .flags(flags)
        .run(std::move(h));
}

} // namespace

TOOLHOST_PLUGIN(
    th::Plugin("cxx_boundary", "1.0.0", "The C++ SDK's boundary, tested.")
        .config(th::Param::string("greeting", "What cxx_boundary_config says.")
                    .default_value("hi"))
        .tool(tool("cxx_boundary_config",
                   [](th::Call &call) {
                       call.out(call.config().arg<std::string_view>(
                           "greeting"));
                   }))
        .tool(tool("cxx_boundary_validate",
                   [](th::Call &call) { call.out("valid"); })
                  .validate([](const th::Args &a) {
                      if (a.arg<std::string_view>("text") == "bad")
                          throw th::Error("text must not be 'bad'");
                      if (a.arg<std::string_view>("text") == "worse")
                          throw std::runtime_error("boom");
                  }))
        .tool(tool("cxx_boundary_error",
                   [](th::Call &) { throw th::Error("no such thing: x"); }))
        .tool(tool("cxx_boundary_std",
                   [](th::Call &) { throw std::out_of_range("index 7"); }))
        .tool(tool("cxx_boundary_unknown", [](th::Call &) { throw 42; }))
        .tool(tool("cxx_boundary_backend",
                   [](th::Call &call) {
                       call.out("dropped");
                       call.fail_backend(TOOLHOST_RATE_LIMITED, "slow down",
                                         7000);
                   }))
        .tool(tool("cxx_boundary_backend_async",
                   [](th::Call &call) {
                       call.spawn([](th::Pending &p) {
                           p.fail_backend(TOOLHOST_UNAVAILABLE, "down");
                       });
                   },
                   th::Async))
        .tool(tool("cxx_boundary_fail",
                   [](th::Call &call) {
                       call.out("partial");
                       call.fail("bad input");
                   }))
        .tool(tool("cxx_boundary_forget",
                   [](th::Call &call) { call.spawn([](th::Pending &) {}); },
                   th::Async))
        .tool(tool("cxx_boundary_spawn_throw",
                   [](th::Call &call) {
                       call.spawn([](th::Pending &p) {
                           p.progress(0.5, "half");
                           throw th::Error("late failure");
                       });
                   },
                   th::Async))
        .tool(tool("cxx_boundary_drop",
                   [](th::Call &call) { th::Pending p = call.suspend(); }))
        .tool(tool("cxx_boundary_after",
                   [](th::Call &call) {
                       call.spawn([](th::Pending &p) {
                           p.out("done");
                           p.complete();
                           p.out("too late"); // std::logic_error: logged
                       });
                   },
                   th::Async))
        .tool(tool("cxx_boundary_suspended_write",
                   [](th::Call &call) {
                       th::Pending p = call.suspend();
                       call.out("x"); // logic_error: the call is p's
                   }))
        .tool(tool("cxx_boundary_argtype",
                   [](th::Call &call) { call.arg<int64_t>("text"); }))
        .tool(tool("cxx_boundary_missing",
                   [](th::Call &call) {
                       call.arg<std::string_view>("absent");
                   }))
        .tool(tool("cxx_boundary_stream",
                   [](th::Call &call) {
                       call.out() << call.arg<std::string_view>("text") << ' '
                                  << 42 << ' ' << -7 << ' ' << 2.5 << ' '
                                  << true;
                   })))
