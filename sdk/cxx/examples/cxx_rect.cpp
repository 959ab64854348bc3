// cxx_rect.cpp - constrained parameters and structured output with the
// C++ SDK: bounds, an enum, a pattern and a length on the parameters
// (the host refuses a violation before the handler runs, with a message
// naming the parameter), and a JSON result the host checks against the
// declared output schema.
//
//   cxx_rect_measure width=2 height=3.5 unit=cm label=door
//     -> {"area":7,"perimeter":11,"unit":"cm","label":"door"}
#include <toolhost/toolhost.hpp>

namespace th = toolhost;

namespace {

void measure(th::Call &call)
{
    const double w = call.arg<double>("width");
    const double h = call.arg<double>("height");
    th::Json j;
    j.object()
        .kv("area", w * h)
        .kv("perimeter", 2 * (w + h))
        .kv("unit", call.arg<std::string_view>("unit"));
    if (auto label = call.opt<std::string_view>("label"))
        j.kv("label", *label);
    j.end();
    call.json(j);
}

const char *const output_schema =
    R"({"type":"object","required":["area","perimeter","unit"],)"
    R"("properties":{"area":{"type":"number","minimum":0},)"
    R"("perimeter":{"type":"number","minimum":0},)"
    R"("unit":{"type":"string","enum":["mm","cm","m","in"]},)"
    R"("label":{"type":"string"}},"additionalProperties":false})";

} // namespace

TOOLHOST_PLUGIN(
    th::Plugin("cxx_rect", "1.0.0",
               "Measures rectangles; the C++ SDK's constraints example.")
        .tool(th::Tool("cxx_rect_measure",
                       "Area and perimeter of a width x height rectangle.")
                  .title("Measure a rectangle")
                  .long_description(
                      "Answers one JSON object: area, perimeter, the unit "
                      "and the label when one was given.")
                  .param(th::Param::number("width", "Width, > 0.")
                             .required()
                             .above(0)
                             .max(1e6))
                  .param(th::Param::number("height", "Height, > 0.")
                             .required()
                             .above(0)
                             .max(1e6))
                  .param(th::Param::string("unit", "Unit of both sides.")
                             .one_of({"mm", "cm", "m", "in"})
                             .default_value("m"))
                  .param(th::Param::string("label", "A name for the result.")
                             .pattern("^[A-Za-z][A-Za-z0-9_-]*$")
                             .length(1, 32))
                  .output_schema(output_schema)
                  .tag("geometry")
                  .tag("read-only")
                  .flags(th::ReadOnly | th::Idempotent)
                  .run(measure)))
