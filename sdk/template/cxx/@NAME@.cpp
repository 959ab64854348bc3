// @NAME@.cpp - the @NAME@ toolhost plugin, with the C++ SDK
// (<toolhost/toolhost.hpp>).
#include <toolhost/toolhost.hpp>

namespace th = toolhost;

namespace {

// Runs on any host worker thread, concurrently with itself.  The
// arguments are validated against the params below, defaults filled in;
// a th::Error thrown here fails the call with its message.
void hello(th::Call &call)
{
    const std::string_view name = call.arg<std::string_view>("name");
    const int64_t times = call.arg<int64_t>("times");
    for (int64_t i = 0; i < times && !call.cancelled(); i++)
        call.out() << "hello, " << name << '\n';
}

} // namespace

TOOLHOST_PLUGIN(
    th::Plugin("@NAME@", "0.1.0", "The @NAME@ plugin.")
        .tool(th::Tool("@NAME@_hello", "Greets someone.")
                  .param(th::Param::string("name", "Who to greet.")
                             .default_value("world"))
                  .param(th::Param::integer("times", "How many greetings.")
                             .range(1, 100)
                             .default_value(1))
                  .flags(th::ReadOnly | th::Idempotent)
                  .run(hello)))
