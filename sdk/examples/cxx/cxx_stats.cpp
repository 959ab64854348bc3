// cxx_stats.cpp - an example toolhost plugin in C++17: a small class that
// wraps the SDK (toolhost::Tool, one subclass per tool), bounds on a
// parameter, and structured output with an output schema.
//
//   cxx_stats_summary values=[1,2,3.5]  ->  {"count":3,"sum":6.5,"mean":...}
//
// Rules for C++ (AUTHORING.md, "Other languages"): the entry point is
// extern "C"; no exception may leave execute() or init() (they are called
// from C), so each trampoline catches everything; the descriptor tables are
// static and never change after the entry point returns.
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <toolhost/sdk.h>

namespace toolhost {

// A call, as a tool sees it: arguments in, output out.
class Call {
  public:
    Call(toolhost_call *call, const uint8_t *args, size_t len)
        : call_(call), ok_(th_sdk_args_init(&args_, args, len) == 0) {}
    ~Call() { th_sdk_args_destroy(&args_); }
    Call(const Call &) = delete;
    Call &operator=(const Call &) = delete;

    bool args_ok() const { return ok_; }
    th_sdk_args *args() { return &args_; }
    toolhost_call *raw() { return call_; }
    int fail(const std::string &why) { return th_sdk_fail(call_, "%s", why.c_str()); }

  private:
    toolhost_call *call_;
    th_sdk_args args_;
    bool ok_;
};

// One tool: a subclass implements run(); Tool builds the ABI descriptor.
class Tool {
  public:
    virtual ~Tool() = default;
    virtual int run(Call &call) = 0;

    // The trampoline the host calls (C linkage through the pointer).
    static int execute(void *, const toolhost_tool *desc, toolhost_call *call,
                       const uint8_t *args, size_t len) noexcept
    {
        Tool *self = static_cast<Tool *>(const_cast<void *>(desc->user_data));
        try {
            Call c(call, args, len);
            if (!c.args_ok())
                return c.fail("arguments are not a map");
            return self->run(c);
        } catch (const std::bad_alloc &) {
            return th_sdk_fail(call, "out of memory");
        } catch (const std::exception &e) {
            return th_sdk_fail(call, "internal error: %s", e.what());
        } catch (...) {
            return th_sdk_fail(call, "internal error");
        }
    }
};

} // namespace toolhost

namespace {

class Summary : public toolhost::Tool {
  public:
    int run(toolhost::Call &call) override
    {
        const double *v = nullptr;
        size_t n = 0;
        std::vector<double> values;
        // th_sdk_arg_ints reads integers only; read the array by hand.
        const msgpack_object *arr = nullptr;
        if (th_sdk_arg_object(call.args(), "values", &arr) != 0 ||
            arr->type != MSGPACK_OBJECT_ARRAY)
            return call.fail("values: an array of numbers is required");
        for (uint32_t i = 0; i < arr->via.array.size; i++) {
            const msgpack_object &o = arr->via.array.ptr[i];
            if (o.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                values.push_back(static_cast<double>(o.via.u64));
            else if (o.type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
                values.push_back(static_cast<double>(o.via.i64));
            else
                values.push_back(o.via.f64);
        }
        v = values.data();
        n = values.size();
        double sum = 0;
        for (size_t i = 0; i < n; i++)
            sum += v[i];
        th_sdk_json j;
        th_sdk_json_init(&j);
        th_sdk_json_object(&j);
        th_sdk_json_key(&j, "count");
        th_sdk_json_uint(&j, n);
        th_sdk_json_key(&j, "sum");
        th_sdk_json_double(&j, sum);
        th_sdk_json_key(&j, "mean");
        th_sdk_json_double(&j, n ? sum / static_cast<double>(n) : 0.0);
        th_sdk_json_end(&j);
        int rc = th_sdk_json_write(&j, call.raw());
        th_sdk_json_destroy(&j);
        return rc == 0 ? TOOLHOST_OK : call.fail("cannot write the result");
    }
};

Summary summary;

// C++17 has no designated initializers: the tables are filled once, in the
// entry point's static initialization (thread-safe in C++11 and later).
struct Tables {
    toolhost_param params[1];
    toolhost_tool tools[1];
    toolhost_plugin plugin;

    Tables() : params(), tools(), plugin()
    {
        toolhost_param &p = params[0];
        p.struct_size = sizeof p;
        p.name = "values";
        p.type = TOOLHOST_TYPE_ARRAY;
        p.required = 1;
        p.description = "The numbers to summarize.";
        p.item_type = TOOLHOST_TYPE_NUMBER;
        p.min_items = 1;
        p.max_items = 10000;

        toolhost_tool &t = tools[0];
        t.struct_size = sizeof t;
        t.name = "cxx_stats_summary";
        t.title = "Summary statistics";
        t.description = "Counts, sums and averages a list of numbers.";
        t.params = params;
        t.n_params = 1;
        t.stdout_type = TOOLHOST_SEM_STRUCTURED;
        t.stderr_type = TOOLHOST_SEM_ERROR;
        t.flags = TOOLHOST_TOOL_READ_ONLY | TOOLHOST_TOOL_IDEMPOTENT;
        t.execute = toolhost::Tool::execute;
        t.user_data = static_cast<toolhost::Tool *>(&summary);
        t.output_schema =
            "{\"type\":\"object\",\"required\":[\"count\",\"sum\",\"mean\"],"
            "\"properties\":{\"count\":{\"type\":\"integer\",\"minimum\":1},"
            "\"sum\":{\"type\":\"number\"},\"mean\":{\"type\":\"number\"}},"
            "\"additionalProperties\":false}";

        plugin.struct_size = sizeof plugin;
        plugin.abi_major = TOOLHOST_ABI_MAJOR;
        plugin.abi_minor = TOOLHOST_ABI_MINOR;
        plugin.name = "cxx_stats";
        plugin.version = "1.0.0";
        plugin.description = "Summary statistics, an example in C++.";
        plugin.tools = tools;
        plugin.n_tools = 1;
    }
};

} // namespace

extern "C" TOOLHOST_EXPORT const toolhost_plugin *toolhost_plugin_v1(void)
{
    static const Tables tables;
    return &tables.plugin;
}
