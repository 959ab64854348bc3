// cxx_echo.cpp - `echo` with the C++ SDK: writes `text` to stdout
// unchanged (the contract of plugins/echo's `echo`, so bench/sdk.c can
// call both the same way).
#include <toolhost/toolhost.hpp>

namespace th = toolhost;

TOOLHOST_PLUGIN(
    th::Plugin("echo", "1.0.0", "Echoes text back; the C++ SDK's example.")
        .tool(th::Tool("echo", "Writes `text` to stdout unchanged.")
                  .param(th::Param::string("text", "The text to write to stdout.")
                             .required())
                  .flags(th::ReadOnly | th::Idempotent | th::Short)
                  .run([](th::Call &call) {
                      call.out(call.arg<std::string_view>("text"));
                  })))
