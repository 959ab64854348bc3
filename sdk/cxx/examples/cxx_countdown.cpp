// cxx_countdown.cpp - an async tool with the C++ SDK: the handler copies
// its arguments and hands the call to a thread (Call::spawn); the thread
// reports progress, sleeps between steps, stops when the call is
// cancelled, and completes the call from there.
//
//   cxx_countdown steps=3 delay_ms=10 text=liftoff
//     -> progress "3 to go", "2 to go", "1 to go", then stdout "liftoff"
#include <string>

#include <toolhost/toolhost.hpp>

namespace th = toolhost;

namespace {

void countdown(th::Call &call)
{
    // Copies: the arguments are gone once this handler returns.
    const int64_t steps = call.arg<int64_t>("steps");
    const int64_t delay_ms = call.arg<int64_t>("delay_ms");
    std::string text(call.arg<std::string_view>("text"));
    call.spawn([steps, delay_ms, text](th::Pending &p) {
        for (int64_t i = 0; i < steps; i++) {
            p.progress(static_cast<double>(i) / static_cast<double>(steps),
                       std::to_string(steps - i) + " to go");
            if (!p.sleep_ms(delay_ms)) { // woken early: cancelled
                p.log(th::Level::Info, "cancelled with " +
                                           std::to_string(steps - i) +
                                           " to go");
                return p.fail("cancelled");
            }
        }
        p.progress(1.0, "done");
        p.out(text);
        p.complete();
    });
}

} // namespace

TOOLHOST_PLUGIN(
    th::Plugin("cxx_countdown", "1.0.0",
               "Counts down on its own thread; the C++ SDK's async example.")
        .tool(th::Tool("cxx_countdown",
                       "Counts `steps` down, reporting progress, then writes "
                       "`text`.")
                  .title("Countdown")
                  .long_description(
                      "Reports one progress update per step (the first one "
                      "acknowledges the call), waits `delay_ms` between "
                      "steps and stops at once when the call is cancelled.")
                  .param(th::Param::integer("steps", "How many steps.")
                             .range(1, 1000000)
                             .default_value(3))
                  .param(th::Param::integer("delay_ms",
                                            "Milliseconds per step.")
                             .range(0, 60000)
                             .default_value(10))
                  .param(th::Param::string("text", "What to write at the end.")
                             .length(0, 1024)
                             .default_value("liftoff"))
                  .flags(th::Async | th::ReadOnly)
                  .run(countdown)))
