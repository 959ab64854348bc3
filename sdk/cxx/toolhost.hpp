// toolhost/toolhost.hpp - the C++17 SDK for toolhost plugins: one header
// over the C ABI (<toolhost/plugin.h>) and the C SDK (<toolhost/sdk.h>).
//
//   #include <toolhost/toolhost.hpp>
//   namespace th = toolhost;
//   TOOLHOST_PLUGIN(th::Plugin("cxx_echo", "1.0.0", "Echoes text back.")
//       .tool(th::Tool("echo", "Writes `text` to stdout unchanged.")
//           .param(th::Param::string("text", "The text to write.").required())
//           .flags(th::ReadOnly | th::Idempotent | th::Short)
//           .run([](th::Call &call) { call.out(call.arg<std::string_view>("text")); })))
//
// What it gives (sdk/cxx/README.md has the whole tour):
//   - a declaration style: Plugin, Tool and Param builders (constraints,
//     defaults, enums, patterns, output schema, flags, a validate() hook,
//     the plugin's config keys) turned into the ABI's tables once, in the
//     entry point TOOLHOST_PLUGIN() defines;
//   - Call: the arguments (arg<T>(), std::string_view into the host's
//     bytes, valid until the handler returns), output (out(), err(),
//     stream-style out() << ...), JSON, progress, cancel checks;
//   - Pending: an RAII handle of a suspended call, completed exactly once
//     (complete() / fail()); its destructor completes an abandoned call
//     with an error, so a forgotten completion never hangs a caller.
//     Call::spawn() suspends and runs a function on a thread the SDK
//     tracks and joins in the plugin's fini();
//   - the boundary: every exception a handler throws becomes a tool error
//     (th::Error: its message; std::bad_alloc: "out of memory"; anything
//     else: "internal error: ..."); none ever reaches the host's C code.
//
// Header-only, but it sits on the C SDK: link libtoolhost-sdk.a and
// msgpack (`pkg-config --cflags --libs toolhost-plugin`).  The export
// recipe (README, "Build"): -fvisibility=hidden and the version script
// `pkg-config --variable=version_script toolhost-plugin`, which exports
// toolhost_plugin_v1 alone: without it the std:: template instances this
// header and the plugin use (std::function, std::thread, ...) are exported
// as weak symbols and `toolhost check --strict` refuses the plugin.
//
// Threads (plugin.h's classes): handlers run as Call (any host worker,
// concurrently with themselves unless th::Serial); a Call is used by the
// thread running the handler only; a Pending by the one thread that owns
// it (it may be moved to another).  The builders run once, in the entry
// point (a function-local static: thread-safe).
#ifndef TOOLHOST_TOOLHOST_HPP
#define TOOLHOST_TOOLHOST_HPP

#if __cplusplus < 201703L
#error "toolhost.hpp needs C++17 (-std=c++17)"
#endif
#if !defined(__cpp_exceptions)
#error "toolhost.hpp needs exceptions (errors are thrown; -fno-exceptions is not supported)"
#endif

#include <toolhost/sdk.h>

#include <atomic>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace toolhost {

// ---- Names for the ABI's constants ------------------------------------------

enum class Type : uint32_t {
    String = TOOLHOST_TYPE_STRING,
    Integer = TOOLHOST_TYPE_INTEGER,
    Number = TOOLHOST_TYPE_NUMBER,
    Boolean = TOOLHOST_TYPE_BOOLEAN,
    Array = TOOLHOST_TYPE_ARRAY,
    Object = TOOLHOST_TYPE_OBJECT,
};

// What an output stream holds (toolhost_semantic).
enum class Sem : uint32_t {
    Text = TOOLHOST_SEM_TEXT,
    Status = TOOLHOST_SEM_STATUS,
    Error = TOOLHOST_SEM_ERROR,
    FileContent = TOOLHOST_SEM_FILE_CONTENT,
    FileView = TOOLHOST_SEM_FILE_VIEW,
    CommandOutput = TOOLHOST_SEM_COMMAND_OUTPUT,
    SearchResults = TOOLHOST_SEM_SEARCH_RESULTS,
    Knowledge = TOOLHOST_SEM_KNOWLEDGE,
    Structured = TOOLHOST_SEM_STRUCTURED,
    Log = TOOLHOST_SEM_LOG,
    Diff = TOOLHOST_SEM_DIFF,
    Binary = TOOLHOST_SEM_BINARY,
};

// Tool flags (toolhost_tool.flags): combine with |.
enum ToolFlag : uint32_t {
    Async = TOOLHOST_TOOL_ASYNC,
    ReadOnly = TOOLHOST_TOOL_READ_ONLY,
    Destructive = TOOLHOST_TOOL_DESTRUCTIVE,
    Idempotent = TOOLHOST_TOOL_IDEMPOTENT,
    OpenWorld = TOOLHOST_TOOL_OPEN_WORLD,
    Serial = TOOLHOST_TOOL_SERIAL,
    Short = TOOLHOST_TOOL_SHORT,
};

// Plugin flags (toolhost_plugin.flags).
enum PluginFlag : uint64_t {
    PluginSerial = TOOLHOST_PLUGIN_SERIAL,
    ExclusiveReload = TOOLHOST_PLUGIN_EXCLUSIVE_RELOAD,
};

// Log levels.
enum class Level : int {
    Error = TOOLHOST_LOG_ERROR,
    Warn = TOOLHOST_LOG_WARN,
    Info = TOOLHOST_LOG_INFO,
    Debug = TOOLHOST_LOG_DEBUG,
};

// ---- Errors -------------------------------------------------------------------

// Throw it from a handler to fail the call with exactly this message (on
// the call's stderr, where a model reads it).
class Error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// An argument that is absent (required by the handler, not declared
// required) or of another type than asked for.  A tool error like Error.
class ArgError : public Error {
  public:
    using Error::Error;
};

class Call;
class Pending;
class Plugin;

namespace detail {

// The text of the exception being handled, for the call's stderr, in
// caller storage (no allocation: it runs where memory may be short).
inline void describe_current(char *buf, size_t cap) noexcept
{
    try {
        throw;
    } catch (const Error &e) {
        std::snprintf(buf, cap, "%s", e.what());
    } catch (const std::bad_alloc &) {
        std::snprintf(buf, cap, "out of memory");
    } catch (const std::exception &e) {
        std::snprintf(buf, cap, "internal error: %s", e.what());
    } catch (...) {
        std::snprintf(buf, cap, "internal error: an unknown exception");
    }
}

// Per loaded generation (the state init() stores): the host api and the
// threads Call::spawn() started, joined in fini().
class OwnedArgs;
class Runtime {
  public:
    Runtime(const toolhost_host_api *h, const uint8_t *cfg, size_t len);
    ~Runtime();
    Runtime(const Runtime &) = delete;
    Runtime &operator=(const Runtime &) = delete;

    const toolhost_host_api *host;
    std::vector<uint8_t> config_bytes; // a copy: init()'s are borrowed
    std::unique_ptr<OwnedArgs> config;

    struct Worker {
        std::thread thread;
        std::atomic<bool> done{false};
    };

    // A slot for a new thread, after joining the ones that have finished
    // (so the list stays as long as the calls in flight).
    Worker &add()
    {
        std::lock_guard<std::mutex> g(mu_);
        for (auto it = workers_.begin(); it != workers_.end();) {
            if (it->done.load(std::memory_order_acquire) &&
                it->thread.joinable()) {
                it->thread.join();
                it = workers_.erase(it);
            } else {
                ++it;
            }
        }
        return workers_.emplace_back();
    }
    // The slot of a thread that could not start.
    void drop(Worker &w)
    {
        std::lock_guard<std::mutex> g(mu_);
        for (auto it = workers_.begin(); it != workers_.end(); ++it)
            if (&*it == &w) {
                workers_.erase(it);
                return;
            }
    }
    void join_all() noexcept
    {
        std::list<Worker> all;
        {
            std::lock_guard<std::mutex> g(mu_);
            all.splice(all.end(), workers_);
        }
        for (auto &w : all)
            if (w.thread.joinable())
                w.thread.join();
    }

  private:
    std::mutex mu_;
    std::list<Worker> workers_;
};

template <class T> struct is_vector : std::false_type {};
template <class T, class A>
struct is_vector<std::vector<T, A>> : std::true_type {};

inline std::string quote_json(std::string_view s)
{
    th_sdk_json j;
    th_sdk_json_init(&j);
    th_sdk_json_strn(&j, s.data(), s.size());
    const char *text = nullptr;
    size_t len = 0;
    int rc = th_sdk_json_finish(&j, &text, &len);
    std::string out = rc == 0 ? std::string(text, len) : std::string();
    th_sdk_json_destroy(&j);
    if (rc != 0)
        throw std::bad_alloc();
    return out;
}

class Built;
inline int execute(void *state, const toolhost_tool *tool, toolhost_call *call,
            const uint8_t *args, size_t len) noexcept;
inline int validate(void *state, const toolhost_tool *tool,
                    const uint8_t *args, size_t len, char *err,
                    size_t err_size) noexcept;

} // namespace detail

// ---- A JSON value for structured output -------------------------------------

// th_sdk_json in RAII clothes: escaping done right, separators placed, the
// first misuse sticky (finish() and Output::json() report it).
//
//   th::Json j;
//   j.object().kv("count", 3).key("names").array().value("a").end().end();
//   call.json(j);
class Json {
  public:
    Json() { th_sdk_json_init(&j_); }
    ~Json() { th_sdk_json_destroy(&j_); }
    Json(const Json &) = delete;
    Json &operator=(const Json &) = delete;

    Json &object() { return step(th_sdk_json_object(&j_)); }
    Json &array() { return step(th_sdk_json_array(&j_)); }
    Json &end() { return step(th_sdk_json_end(&j_)); }
    Json &key(const char *k) { return step(th_sdk_json_key(&j_, k)); }
    Json &key(const std::string &k) { return key(k.c_str()); }
    Json &value(std::string_view s)
    {
        return step(th_sdk_json_strn(&j_, s.data(), s.size()));
    }
    Json &value(const char *s) { return step(th_sdk_json_str(&j_, s)); }
    Json &value(const std::string &s) { return value(std::string_view(s)); }
    Json &value(std::nullptr_t) { return step(th_sdk_json_null(&j_)); }
    template <class T,
              std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
    Json &value(T v)
    {
        if constexpr (std::is_same_v<T, bool>)
            return step(th_sdk_json_bool(&j_, v));
        else if constexpr (std::is_floating_point_v<T>)
            return step(th_sdk_json_double(&j_, static_cast<double>(v)));
        else if constexpr (std::is_signed_v<T>)
            return step(th_sdk_json_int(&j_, static_cast<int64_t>(v)));
        else
            return step(th_sdk_json_uint(&j_, static_cast<uint64_t>(v)));
    }
    // key(k) then value(v).
    template <class T> Json &kv(const char *k, T &&v)
    {
        key(k);
        return value(std::forward<T>(v));
    }

    // The text (valid while this Json lives, until its next change), or
    // Error naming the first misuse.
    std::string_view finish()
    {
        const char *text = nullptr;
        size_t len = 0;
        int rc = th_sdk_json_finish(&j_, &text, &len);
        if (rc == TH_SDK_ENOMEM)
            throw std::bad_alloc();
        if (rc != 0)
            throw Error(std::string("the tool built invalid JSON: ") +
                        th_sdk_strerror(rc));
        return std::string_view(text, len);
    }

  private:
    Json &step(int) { return *this; } // errors are sticky: see finish()
    th_sdk_json j_;
};

// ---- Output: what Call and Pending share ---------------------------------------

class Output;

// out() / err() without arguments: a stream to write pieces to,
// `call.out() << "n = " << n << '\n';`.  Each piece is one host write()
// (the host copies it).  A piece after a cancel is dropped (the host says
// TOOLHOST_ECANCELLED); check cancelled() in long loops.
class Stream {
  public:
    Stream(Output &o, int stream) : o_(o), stream_(stream) {}
    Stream &operator<<(std::string_view s);
    Stream &operator<<(const char *s) { return *this << std::string_view(s); }
    Stream &operator<<(const std::string &s)
    {
        return *this << std::string_view(s);
    }
    Stream &operator<<(char c) { return *this << std::string_view(&c, 1); }
    Stream &operator<<(bool b) { return *this << (b ? "true" : "false"); }
    template <class T, std::enable_if_t<std::is_arithmetic_v<T> &&
                                            !std::is_same_v<T, bool> &&
                                            !std::is_same_v<T, char>,
                                        int> = 0>
    Stream &operator<<(T v)
    {
        char buf[64];
        std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, v);
        return *this << std::string_view(buf, static_cast<size_t>(r.ptr - buf));
    }
    // The first error a write returned (0: none).
    int error() const { return err_; }

  private:
    Output &o_;
    int stream_;
    int err_ = 0;
};

class Output {
  public:
    // Appends bytes to TOOLHOST_STDOUT or TOOLHOST_STDERR.  Returns 0 or
    // the host's code (TOOLHOST_ECANCELLED once cancelled: stop soon).
    int write(int stream, std::string_view s)
    {
        toolhost_call *c = need();
        if (s.empty())
            return 0;
        return c->host->write(c, stream, s.data(), s.size());
    }
    int out(std::string_view s) { return write(TOOLHOST_STDOUT, s); }
    int err(std::string_view s) { return write(TOOLHOST_STDERR, s); }
    Stream out() { return Stream(*this, TOOLHOST_STDOUT); }
    Stream err() { return Stream(*this, TOOLHOST_STDERR); }
    // A finished Json to stdout (for Sem::Structured with an output
    // schema: the host checks it when the call ends).
    int json(Json &j) { return out(j.finish()); }

    // Progress: fraction in [0, 1] or negative when unknown.  For an
    // th::Async tool the first update acknowledges the call.
    int progress(double fraction, std::string_view message = {})
    {
        toolhost_call *c = need();
        if (message.empty())
            return c->host->progress(c, fraction, nullptr, nullptr, 0);
        return th_sdk_progress(c, fraction, "%.*s",
                               static_cast<int>(message.size()),
                               message.data());
    }
    // Whether the call is cancelled or past its deadline: stop soon.
    bool cancelled() const { return th_sdk_cancelled(need()); }
    // Milliseconds before the deadline, -1 without one.
    int64_t time_left_ms() const
    {
        toolhost_call *c = need();
        return c->host->time_left_ms(c);
    }
    // Sleeps ms milliseconds; false (early) once the call is cancelled.
    bool sleep_ms(int64_t ms) const { return th_sdk_sleep_ms(need(), ms) == 0; }
    // A line in the host's log, tagged with the plugin and the call id.
    void log(Level level, std::string_view message) const
    {
        th_sdk_log_call(need(), static_cast<int>(level), "%.*s",
                        static_cast<int>(message.size()), message.data());
    }
    // The raw call, for what this header does not wrap (meta, caller,
    // cancel_fd): the same rules as plugin.h.
    toolhost_call *raw() const { return need(); }
    uint64_t id() const { return need()->call_id; }

  protected:
    explicit Output(toolhost_call *c) : call_(c) {}
    ~Output() = default;
    toolhost_call *need() const
    {
        if (!call_)
            throw std::logic_error("toolhost: this call is no longer yours "
                                   "(completed, or handed to a Pending)");
        return call_;
    }
    // The reason and a newline to stderr (never throws; call_ is set).
    void write_reason(std::string_view why) noexcept
    {
        if (why.empty())
            return;
        call_->host->write(call_, TOOLHOST_STDERR, why.data(), why.size());
        if (why.back() != '\n')
            call_->host->write(call_, TOOLHOST_STDERR, "\n", 1);
    }
    toolhost_call *call_;
};

inline Stream &Stream::operator<<(std::string_view s)
{
    int rc = o_.write(stream_, s);
    if (rc != 0 && err_ == 0)
        err_ = rc;
    return *this;
}

// ---- Pending: a suspended call -------------------------------------------------------

// Owns a call that execute() suspended (Call::suspend(), Call::spawn()):
// output, progress and cancel checks from the thread that owns it, then
// complete() or fail(), exactly once.  Move-only; after completion (or
// being moved from) it is empty and any use throws std::logic_error.  If
// it is destroyed still holding the call, it fails the call ("the tool
// ended without completing the call") rather than leave the caller
// waiting.
class Pending : public Output {
  public:
    Pending() : Output(nullptr) {}
    Pending(Pending &&o) noexcept : Output(std::exchange(o.call_, nullptr)) {}
    Pending &operator=(Pending &&o) noexcept
    {
        if (this != &o) {
            abandon();
            call_ = std::exchange(o.call_, nullptr);
        }
        return *this;
    }
    ~Pending() { abandon(); }

    // Finishes the call: its output stands, ok = true.
    void complete() { finish(TOOLHOST_OK); }
    // Finishes the call as a tool error with this reason on stderr.
    void fail(std::string_view why)
    {
        need();
        write_reason(why);
        finish(TOOLHOST_FAILED);
    }
    // ABI 1.5: finishes the call as its backend's fault: `status` is
    // TOOLHOST_UNAVAILABLE, TOOLHOST_TIMEOUT or TOOLHOST_RATE_LIMITED,
    // with a retry-after hint in ms (0: none); plain failed on a host
    // older than 1.5 (th_sdk_fail_backend).
    void fail_backend(int status, std::string_view why,
                      uint64_t retry_after_ms = 0)
    {
        toolhost_call *c = need();
        finish(th_sdk_fail_backend(c, status, retry_after_ms, "%.*s",
                                   static_cast<int>(why.size()), why.data()));
    }
    // Whether it still holds a call.
    explicit operator bool() const { return call_ != nullptr; }

  private:
    friend class Call;
    explicit Pending(toolhost_call *c) : Output(c) {}
    void finish(int status)
    {
        toolhost_call *c = need();
        call_ = nullptr;
        c->host->complete(c, status);
    }
    void abandon() noexcept
    {
        if (!call_)
            return;
        toolhost_call *c = call_;
        th_sdk_log_call(c, TOOLHOST_LOG_WARN,
                        "a Pending was destroyed before complete(): "
                        "the call fails");
        write_reason("the tool ended without completing the call");
        call_ = nullptr;
        c->host->complete(c, TOOLHOST_FAILED);
    }
};

// ---- Args: a msgpack map of arguments (or of config) ------------------------------

// The validated arguments of a call (Call derives from it), or the
// arguments validate() checks, or the plugin's config block
// (Call::config()).  Read-only once built; a string_view it hands out
// points into the map's bytes (the host's, for a call: valid until the
// handler returns).
class Args {
  public:
    Args(const Args &) = delete;
    Args &operator=(const Args &) = delete;

    // Whether `key` was given (or has a default).
    bool has(const char *key) const { return th_sdk_arg_has(&args_, key); }

    // The value of `key` as T, or ArgError when it is absent or of another
    // type.  T: std::string_view, std::string, bool, an integer type
    // (range-checked), double/float, std::vector of std::string_view,
    // std::string, int64_t or double.
    template <class T> T arg(const char *key) const
    {
        std::optional<T> v = opt<T>(key);
        if (!v)
            throw ArgError(std::string("missing argument '") + key + "'");
        return std::move(*v);
    }
    // The same, or `def` when absent.
    template <class T> T arg(const char *key, T def) const
    {
        std::optional<T> v = opt<T>(key);
        return v ? std::move(*v) : std::move(def);
    }
    std::string_view arg(const char *key, const char *def) const
    {
        return arg<std::string_view>(key, std::string_view(def));
    }
    // The same, nullopt when absent; ArgError when of another type.
    template <class T> std::optional<T> opt(const char *key) const;

    // The raw msgpack value of `key` (valid as long as the map), or
    // nullptr when absent: for objects and anything arg<T> does not read.
    const msgpack_object *raw_arg(const char *key) const
    {
        const msgpack_object *o = nullptr;
        return th_sdk_arg_object(&args_, key, &o) == 0 ? o : nullptr;
    }

  protected:
    // A map of msgpack bytes that outlive this object.
    Args(const uint8_t *data, size_t len) noexcept
    {
        rc_ = th_sdk_args_init(&args_, data, len);
    }
    // execute()'s arguments: the host's decoded view when it has one.
    Args(const toolhost_call *c, const uint8_t *data, size_t len) noexcept
    {
        rc_ = th_sdk_args_init_call(&args_, c, data, len);
    }
    ~Args() { th_sdk_args_destroy(&args_); }

    th_sdk_args args_;
    int rc_ = 0;
};

namespace detail {
// An Args the SDK builds (the protected constructors are for it).
class OwnedArgs : public Args {
  public:
    OwnedArgs(const uint8_t *data, size_t len) noexcept : Args(data, len) {}
    int status() const { return rc_; }
};
} // namespace detail

// ---- Call: one execute() ----------------------------------------------------------------

// What a handler gets: the arguments (Args: validated by the host against
// the declared params, defaults filled in) and the call's output.  Lives
// on execute()'s stack: string_views it hands out point into the host's
// argument bytes and are valid until the handler returns (copy them into
// std::string before handing work to another thread).
class Call : public Output, public Args {
  public:
    Call(const Call &) = delete;
    Call &operator=(const Call &) = delete;

    // The plugin's config block (Plugin::config() keys, validated by the
    // host, defaults filled in); empty when it declares none.  Read-only
    // and shared by every call: valid until the plugin's fini().
    const Args &config() const;

    // Marks the call failed with this reason on stderr; the handler then
    // returns (normally).  Throwing th::Error does the same.
    void fail(std::string_view why)
    {
        need();
        write_reason(why);
        failed_ = true;
        fail_status_ = TOOLHOST_FAILED;
    }

    // ABI 1.5: marks the call failed by its backend (what the tool
    // depends on is down, too slow, or limiting it): `status` is
    // TOOLHOST_UNAVAILABLE, TOOLHOST_TIMEOUT or TOOLHOST_RATE_LIMITED,
    // the reason goes to stderr, `retry_after_ms` (0: none) is the hint
    // of when to try again.  A host older than 1.5 gets a plain failure
    // (th_sdk_fail_backend).  The handler then returns (normally).
    void fail_backend(int status, std::string_view why,
                      uint64_t retry_after_ms = 0)
    {
        toolhost_call *c = need();
        fail_status_ = th_sdk_fail_backend(c, status, retry_after_ms, "%.*s",
                                           static_cast<int>(why.size()),
                                           why.data());
        failed_ = true;
    }

    // Detaches the call from the host's worker (plugin.h suspend()): the
    // returned Pending owns it, this Call may no longer write.  Hand the
    // Pending to one thread, which completes it.
    Pending suspend()
    {
        toolhost_call *c = need();
        int rc = c->host->suspend(c);
        if (rc != 0)
            throw std::logic_error(std::string("toolhost: suspend() refused: ") +
                                   th_sdk_strerror(rc));
        call_ = nullptr;
        suspended_ = true;
        return Pending(c);
    }

    // suspend(), then fn(Pending &) on a new thread that the SDK joins in
    // the plugin's fini(): the handler returns at once and the worker is
    // free.  fn owns the Pending: it completes it (or the Pending's
    // destructor does, with an error); an exception fn throws completes
    // it with that error.  Copy what fn needs from the arguments into the
    // lambda first: they are gone when the handler returns.
    template <class F> void spawn(F &&fn);

  private:
    friend int detail::execute(void *, const toolhost_tool *, toolhost_call *,
                               const uint8_t *, size_t) noexcept;
    Call(detail::Runtime *rt, toolhost_call *c, const uint8_t *args,
         size_t len) noexcept
        : Output(c), Args(c, args, len), rt_(rt)
    {
    }

    detail::Runtime *rt_;
    bool failed_ = false;
    int fail_status_ = TOOLHOST_FAILED; // fail_backend()'s status
    bool suspended_ = false;
};

namespace detail {
inline Runtime::Runtime(const toolhost_host_api *h, const uint8_t *cfg,
                        size_t len)
    : host(h), config_bytes(cfg, cfg + len)
{
    config = std::make_unique<OwnedArgs>(config_bytes.data(),
                                         config_bytes.size());
    if (config->status() != 0)
        throw Error("the config block is not a msgpack map");
}
inline Runtime::~Runtime() { join_all(); }
} // namespace detail

inline const Args &Call::config() const { return *rt_->config; }

template <class T> std::optional<T> Args::opt(const char *key) const
{
    auto bad = [key](int rc, const char *want) -> ArgError {
        return ArgError(std::string("argument '") + key + "' must be " + want +
                        " (" + th_sdk_strerror(rc) + ")");
    };
    if constexpr (std::is_same_v<T, std::string_view> ||
                  std::is_same_v<T, std::string>) {
        const char *s = nullptr;
        size_t n = 0;
        int rc = th_sdk_arg_string(&args_, key, &s, &n);
        if (rc == TH_SDK_EABSENT)
            return std::nullopt;
        if (rc != 0)
            throw bad(rc, "a string");
        return T(s, n);
    } else if constexpr (std::is_same_v<T, bool>) {
        bool b = false;
        int rc = th_sdk_arg_bool(&args_, key, &b);
        if (rc == TH_SDK_EABSENT)
            return std::nullopt;
        if (rc != 0)
            throw bad(rc, "a boolean");
        return b;
    } else if constexpr (std::is_floating_point_v<T>) {
        double d = 0;
        int rc = th_sdk_arg_number(&args_, key, &d);
        if (rc == TH_SDK_EABSENT)
            return std::nullopt;
        if (rc != 0)
            throw bad(rc, "a number");
        return static_cast<T>(d);
    } else if constexpr (std::is_integral_v<T>) {
        int64_t i = 0;
        int rc = th_sdk_arg_int(&args_, key, &i);
        if (rc == TH_SDK_EABSENT)
            return std::nullopt;
        if (rc == 0 && (std::is_signed_v<T>
                            ? (i < static_cast<int64_t>(
                                       std::numeric_limits<T>::min()) ||
                               i > static_cast<int64_t>(
                                       std::numeric_limits<T>::max()))
                            : (i < 0 || static_cast<uint64_t>(i) >
                                            static_cast<uint64_t>(
                                                std::numeric_limits<T>::max()))))
            rc = TH_SDK_ERANGE;
        if (rc != 0)
            throw bad(rc, "an integer that fits");
        return static_cast<T>(i);
    } else if constexpr (detail::is_vector<T>::value) {
        using E = typename T::value_type;
        const msgpack_object *o = nullptr;
        int rc = th_sdk_arg_object(&args_, key, &o);
        if (rc == TH_SDK_EABSENT)
            return std::nullopt;
        if (rc == 0 && o->type != MSGPACK_OBJECT_ARRAY)
            rc = TH_SDK_ETYPE;
        if (rc != 0)
            throw bad(rc, "an array");
        T v;
        v.reserve(o->via.array.size);
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            const msgpack_object &e = o->via.array.ptr[i];
            if constexpr (std::is_same_v<E, std::string_view> ||
                          std::is_same_v<E, std::string>) {
                if (e.type == MSGPACK_OBJECT_STR)
                    v.emplace_back(e.via.str.ptr, e.via.str.size);
                else if (e.type == MSGPACK_OBJECT_BIN)
                    v.emplace_back(e.via.bin.ptr, e.via.bin.size);
                else
                    throw bad(TH_SDK_ETYPE, "an array of strings");
            } else if constexpr (std::is_same_v<E, double>) {
                if (e.type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                    v.push_back(static_cast<double>(e.via.u64));
                else if (e.type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
                    v.push_back(static_cast<double>(e.via.i64));
                else if (e.type == MSGPACK_OBJECT_FLOAT32 ||
                         e.type == MSGPACK_OBJECT_FLOAT64)
                    v.push_back(e.via.f64);
                else
                    throw bad(TH_SDK_ETYPE, "an array of numbers");
            } else if constexpr (std::is_same_v<E, int64_t>) {
                if (e.type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
                    v.push_back(e.via.i64);
                else if (e.type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
                         e.via.u64 <= static_cast<uint64_t>(INT64_MAX))
                    v.push_back(static_cast<int64_t>(e.via.u64));
                else
                    throw bad(TH_SDK_ETYPE, "an array of integers");
            } else {
                static_assert(sizeof(E) == 0,
                              "arg<std::vector<E>>: E must be std::string_view, "
                              "std::string, int64_t or double");
            }
        }
        return v;
    } else {
        static_assert(sizeof(T) == 0, "arg<T>: unsupported T (see toolhost.hpp)");
    }
}

template <class F> void Call::spawn(F &&fn)
{
    detail::Runtime *rt = rt_;
    auto box = std::make_shared<Pending>();
    detail::Runtime::Worker &w = rt->add();
    try {
        // The callable is copied before the call is suspended: a failure
        // here leaves the call as it was (the handler's exception fails it).
        auto body = [box, rt, &w, f = std::forward<F>(fn)]() mutable {
            {
                Pending p(std::move(*box));
                box.reset();
                try {
                    f(p);
                } catch (...) {
                    char msg[512];
                    detail::describe_current(msg, sizeof msg);
                    if (p)
                        p.fail(msg);
                    else
                        th_sdk_log(rt->host, TOOLHOST_LOG_ERROR,
                                   "a spawned task threw after its call "
                                   "ended: %s",
                                   msg);
                }
            } // ~Pending fails a call f neither completed nor moved on
            w.done.store(true, std::memory_order_release);
        };
        *box = suspend();
        try {
            w.thread = std::thread(std::move(body));
        } catch (...) {
            // no thread: the call is still ours (box holds it)
            char msg[512];
            detail::describe_current(msg, sizeof msg);
            if (*box) {
                char why[600];
                std::snprintf(why, sizeof why, "cannot start a thread: %s",
                              msg);
                box->fail(why);
            }
            rt->drop(w);
        }
    } catch (...) {
        rt->drop(w);
        throw;
    }
}

// ---- Declarations ------------------------------------------------------------------------

// One parameter.  Start with a factory (Param::string(...), ...), chain
// the constraints; the host checks them before the handler runs and shows
// them to a model in the JSON Schema.
class Param {
  public:
    static Param string(std::string name, std::string description)
    {
        return Param(std::move(name), Type::String, std::move(description));
    }
    static Param integer(std::string name, std::string description)
    {
        return Param(std::move(name), Type::Integer, std::move(description));
    }
    static Param number(std::string name, std::string description)
    {
        return Param(std::move(name), Type::Number, std::move(description));
    }
    static Param boolean(std::string name, std::string description)
    {
        return Param(std::move(name), Type::Boolean, std::move(description));
    }
    // An array; `items` the type of its elements (none: any).
    static Param array(std::string name, std::string description,
                       std::optional<Type> items = std::nullopt)
    {
        Param p(std::move(name), Type::Array, std::move(description));
        if (items)
            p.item_type_ = static_cast<uint32_t>(*items);
        return p;
    }
    static Param object(std::string name, std::string description)
    {
        return Param(std::move(name), Type::Object, std::move(description));
    }

    Param &required()
    {
        required_ = true;
        return *this;
    }
    // The default as JSON text ("3", "true", "\"utf-8\"").
    Param &default_json(std::string json)
    {
        default_ = std::move(json);
        return *this;
    }
    // The default as a value (written as JSON for you).
    Param &default_value(std::string_view s)
    {
        return default_json(detail::quote_json(s));
    }
    Param &default_value(const char *s)
    {
        return default_value(std::string_view(s));
    }
    template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
    Param &default_value(T v)
    {
        if constexpr (std::is_same_v<T, bool>)
            return default_json(v ? "true" : "false");
        else {
            char buf[64];
            std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, v);
            return default_json(std::string(buf, r.ptr));
        }
    }
    // Strings: the allowed values.
    Param &one_of(std::vector<std::string> values)
    {
        enum_ = std::move(values);
        return *this;
    }
    // Integers, numbers: lo <= value <= hi; min/max alone; above/below
    // exclude the bound.
    Param &range(double lo, double hi) { return min(lo).max(hi); }
    Param &min(double lo) { return bound(lo, TOOLHOST_BOUND_MINIMUM); }
    Param &max(double hi) { return bound(hi, TOOLHOST_BOUND_MAXIMUM); }
    Param &above(double lo)
    {
        return bound(lo, TOOLHOST_BOUND_EXCLUSIVE_MINIMUM);
    }
    Param &below(double hi)
    {
        return bound(hi, TOOLHOST_BOUND_EXCLUSIVE_MAXIMUM);
    }
    // Strings: length in code points (hi 0: no maximum).
    Param &length(uint32_t lo, uint32_t hi)
    {
        min_length_ = lo;
        max_length_ = hi;
        return *this;
    }
    // Strings: a PCRE2 pattern (not anchored: add ^...$).
    Param &pattern(std::string re)
    {
        pattern_ = std::move(re);
        has_pattern_ = true;
        return *this;
    }
    // Arrays: item count (hi 0: no maximum).
    Param &items(uint32_t lo, uint32_t hi)
    {
        min_items_ = lo;
        max_items_ = hi;
        return *this;
    }
    // Objects and arrays: a JSON Schema (the host's keyword subset).
    Param &schema(std::string json)
    {
        schema_ = std::move(json);
        return *this;
    }

  private:
    friend class detail::Built;
    Param(std::string name, Type t, std::string description)
        : name_(std::move(name)), description_(std::move(description)),
          type_(static_cast<uint32_t>(t))
    {
    }
    Param &bound(double v, uint32_t bit)
    {
        bool lower = bit & (TOOLHOST_BOUND_MINIMUM |
                            TOOLHOST_BOUND_EXCLUSIVE_MINIMUM);
        (lower ? minimum_ : maximum_) = v;
        bounds_ &= lower ? ~(TOOLHOST_BOUND_MINIMUM |
                             TOOLHOST_BOUND_EXCLUSIVE_MINIMUM)
                         : ~(TOOLHOST_BOUND_MAXIMUM |
                             TOOLHOST_BOUND_EXCLUSIVE_MAXIMUM);
        bounds_ |= bit;
        return *this;
    }

    std::string name_, description_, default_, pattern_, schema_;
    std::vector<std::string> enum_;
    uint32_t type_;
    uint32_t item_type_ = 0;
    bool required_ = false;
    bool has_pattern_ = false;
    double minimum_ = 0, maximum_ = 0;
    uint32_t bounds_ = 0;
    uint32_t min_length_ = 0, max_length_ = 0;
    uint32_t min_items_ = 0, max_items_ = 0;
};

// One tool: name, one-line description, then params, output types,
// flags and the handler.
class Tool {
  public:
    using Handler = std::function<void(Call &)>;
    using Validator = std::function<void(const Args &)>;

    Tool(std::string name, std::string description)
        : name_(std::move(name)), description_(std::move(description))
    {
    }
    Tool &title(std::string t)
    {
        title_ = std::move(t);
        return *this;
    }
    // Usage, warnings, examples: paragraphs; "## " lines open sections.
    Tool &long_description(std::string text)
    {
        long_description_ = std::move(text);
        return *this;
    }
    Tool &param(Param p)
    {
        params_.push_back(std::move(p));
        return *this;
    }
    // Semantic types of stdout and stderr (default Text, Error).
    Tool &output(Sem out, Sem err = Sem::Error)
    {
        stdout_type_ = out;
        stderr_type_ = err;
        return *this;
    }
    // A JSON Schema stdout must match; sets stdout to Sem::Structured.
    Tool &output_schema(std::string json)
    {
        output_schema_ = std::move(json);
        stdout_type_ = Sem::Structured;
        return *this;
    }
    // ABI 1.5: a tag operators' toolsets select the tool by (and disable
    // it by), ^[a-z0-9][a-z0-9_-]{0,31}$; call once per tag, at most
    // TOOLHOST_MAX_TAGS.  .tag("files").tag("read-only")
    Tool &tag(std::string name)
    {
        tags_.push_back(std::move(name));
        return *this;
    }
    // TOOLHOST_TOOL_* bits: th::ReadOnly | th::Idempotent ...
    Tool &flags(uint32_t f)
    {
        flags_ = f;
        return *this;
    }
    // The handler: void(th::Call &).  It returns normally (the call
    // succeeded, or failed through call.fail()), throws (a tool error), or
    // suspends the call (call.spawn(), call.suspend()).
    Tool &run(Handler h)
    {
        handler_ = std::move(h);
        return *this;
    }
    // A check of what the parameter table cannot say (plugin.h
    // validate_args), run before the handler: throw th::Error("what to
    // change") to refuse the call with that message; return to accept.
    Tool &validate(Validator v)
    {
        validator_ = std::move(v);
        return *this;
    }

  private:
    friend class detail::Built;
    friend int detail::execute(void *, const toolhost_tool *, toolhost_call *,
                               const uint8_t *, size_t) noexcept;
    friend int detail::validate(void *, const toolhost_tool *, const uint8_t *,
                                size_t, char *, size_t) noexcept;
    std::string name_, description_, title_, long_description_,
        output_schema_;
    std::vector<Param> params_;
    std::vector<std::string> tags_;
    Sem stdout_type_ = Sem::Text, stderr_type_ = Sem::Error;
    uint32_t flags_ = 0;
    Handler handler_;
    Validator validator_;
};

// The plugin: name, version, description, its tools, plugin flags.
class Plugin {
  public:
    Plugin(std::string name, std::string version, std::string description)
        : name_(std::move(name)), version_(std::move(version)),
          description_(std::move(description))
    {
    }
    Plugin &tool(Tool t)
    {
        tools_.push_back(std::move(t));
        return *this;
    }
    // TOOLHOST_PLUGIN_* bits: th::PluginSerial, th::ExclusiveReload.
    Plugin &flags(uint64_t f)
    {
        flags_ = f;
        return *this;
    }
    // A key of the plugin's config block (the `config:` of its entry in
    // toolhost.yaml), declared like a parameter; the host validates the
    // block before init().  Handlers read it with call.config().
    Plugin &config(Param p)
    {
        config_.push_back(std::move(p));
        return *this;
    }

  private:
    friend class detail::Built;
    std::string name_, version_, description_;
    std::vector<Tool> tools_;
    std::vector<Param> config_;
    uint64_t flags_ = 0;
};

namespace detail {

inline int execute(void *state, const toolhost_tool *tool, toolhost_call *call,
                   const uint8_t *args, size_t len) noexcept
{
    const Tool *t = static_cast<const Tool *>(tool->user_data);
    Call c(static_cast<Runtime *>(state), call, args, len);
    if (c.rc_ != 0)
        return th_sdk_fail(call, "the arguments are not a msgpack map (%s)",
                           th_sdk_strerror(c.rc_));
    try {
        t->handler_(c);
    } catch (...) {
        char msg[512];
        describe_current(msg, sizeof msg);
        if (c.suspended_) {
            // The call belongs to a Pending now (completed by it, or by
            // its destructor during this unwinding): only the log.
            th_sdk_log(static_cast<Runtime *>(state)->host, TOOLHOST_LOG_ERROR,
                       "tool %s threw after suspending its call: %s",
                       tool->name, msg);
            return TOOLHOST_PENDING;
        }
        return th_sdk_fail(call, "%s", msg);
    }
    if (c.suspended_)
        return TOOLHOST_PENDING;
    return c.failed_ ? c.fail_status_ : TOOLHOST_OK;
}

inline int validate(void *, const toolhost_tool *tool, const uint8_t *args,
                    size_t len, char *err, size_t err_size) noexcept
{
    const Tool *t = static_cast<const Tool *>(tool->user_data);
    OwnedArgs a(args, len);
    if (a.status() != 0) {
        std::snprintf(err, err_size, "the arguments are not a msgpack map");
        return 1;
    }
    try {
        t->validator_(a);
        return 0;
    } catch (...) {
        describe_current(err, err_size);
        return 1;
    }
}

inline int init(const toolhost_host_api *host, const uint8_t *config,
                size_t config_len, void **state, char *err,
                size_t err_size) noexcept
{
    try {
        *state = new Runtime(host, config, config_len);
        return 0;
    } catch (...) {
        describe_current(err, err_size);
        return 1;
    }
}

inline void fini(void *state) noexcept
{
    delete static_cast<Runtime *>(state); // joins the spawned threads
}

inline const char *cstr_or_null(const std::string &s)
{
    return s.empty() ? nullptr : s.c_str();
}

// The ABI tables of a Plugin, built once and never changed: pointers into
// its own copy of the Plugin, which it never moves.
class Built {
  public:
    template <class Make> explicit Built(Make make) noexcept
    {
        try {
            p_.emplace(make());
            build();
        } catch (...) {
            char msg[512];
            describe_current(msg, sizeof msg);
            std::fprintf(stderr, "toolhost plugin: cannot build the "
                                 "descriptor: %s\n",
                         msg);
            ok_ = false;
        }
    }
    Built(const Built &) = delete;
    Built &operator=(const Built &) = delete;
    const toolhost_plugin *descriptor() const
    {
        return ok_ ? &plugin_ : nullptr;
    }

  private:
    // The ABI rows of `ps` into `out`, enum lists into `enums`.
    static void fill(const std::vector<Param> &ps,
                     std::vector<toolhost_param> &out,
                     std::vector<std::vector<const char *>> &enums)
    {
        out.resize(ps.size());
        enums.resize(ps.size());
        for (size_t k = 0; k < ps.size(); k++) {
            const Param &a = ps[k];
            toolhost_param &d = out[k];
            d = toolhost_param{};
            d.struct_size = sizeof d;
            d.name = a.name_.c_str();
            d.type = a.type_;
            d.required = a.required_;
            d.description = a.description_.c_str();
            if (!a.enum_.empty()) {
                for (const std::string &v : a.enum_)
                    enums[k].push_back(v.c_str());
                enums[k].push_back(nullptr);
                d.enum_values = enums[k].data();
            }
            d.default_json = cstr_or_null(a.default_);
            d.item_type = a.item_type_;
            d.minimum = a.minimum_;
            d.maximum = a.maximum_;
            d.bounds = a.bounds_;
            d.min_length = a.min_length_;
            d.max_length = a.max_length_;
            d.min_items = a.min_items_;
            d.max_items = a.max_items_;
            d.pattern = a.has_pattern_ ? a.pattern_.c_str() : nullptr;
            d.schema_json = cstr_or_null(a.schema_);
        }
    }

    void build()
    {
        Plugin &p = *p_;
        params_.resize(p.tools_.size());
        enums_.resize(p.tools_.size());
        tools_.resize(p.tools_.size());
        tags_.resize(p.tools_.size());
        for (size_t i = 0; i < p.tools_.size(); i++) {
            Tool &t = p.tools_[i];
            std::vector<toolhost_param> &ps = params_[i];
            fill(t.params_, ps, enums_[i]);
            toolhost_tool &d = tools_[i];
            d = toolhost_tool{};
            d.struct_size = sizeof d;
            d.name = t.name_.c_str();
            d.description = t.description_.c_str();
            d.long_description = cstr_or_null(t.long_description_);
            d.params = ps.empty() ? nullptr : ps.data();
            d.n_params = static_cast<uint32_t>(ps.size());
            d.stdout_type = static_cast<uint32_t>(t.stdout_type_);
            d.stderr_type = static_cast<uint32_t>(t.stderr_type_);
            d.flags = t.flags_;
            d.execute = t.handler_ ? &detail::execute : nullptr;
            d.validate_args = t.validator_ ? &detail::validate : nullptr;
            d.user_data = &t;
            d.title = cstr_or_null(t.title_);
            d.output_schema = cstr_or_null(t.output_schema_);
            // ABI 1.5: the tags, NULL-terminated (none: NULL)
            std::vector<const char *> &tg = tags_[i];
            tg.clear();
            for (const std::string &g : t.tags_)
                tg.push_back(g.c_str());
            tg.push_back(nullptr);
            d.tags = t.tags_.empty() ? nullptr : tg.data();
        }
        plugin_ = toolhost_plugin{};
        plugin_.struct_size = sizeof plugin_;
        plugin_.abi_major = TOOLHOST_ABI_MAJOR;
        plugin_.abi_minor = TOOLHOST_ABI_MINOR;
        plugin_.name = p.name_.c_str();
        plugin_.version = p.version_.c_str();
        plugin_.description = p.description_.c_str();
        plugin_.init = &detail::init;
        plugin_.fini = &detail::fini;
        plugin_.tools = tools_.empty() ? nullptr : tools_.data();
        plugin_.n_tools = static_cast<uint32_t>(tools_.size());
        plugin_.flags = p.flags_;
        fill(p.config_, config_, config_enums_);
        plugin_.config_params = config_.empty() ? nullptr : config_.data();
        plugin_.n_config_params = static_cast<uint32_t>(config_.size());
    }

    std::optional<Plugin> p_;
    std::vector<std::vector<toolhost_param>> params_;
    std::vector<std::vector<std::vector<const char *>>> enums_;
    std::vector<std::vector<const char *>> tags_;
    std::vector<toolhost_tool> tools_;
    std::vector<toolhost_param> config_;
    std::vector<std::vector<const char *>> config_enums_;
    toolhost_plugin plugin_{};
    bool ok_ = true;
};

} // namespace detail
} // namespace toolhost

// Defines the plugin's entry point, toolhost_plugin_v1(), from a Plugin
// expression.  Use once, at file scope.  The expression runs once, on the
// first call of the entry point (thread-safe); if it throws, the entry
// point returns NULL (the host refuses the plugin: "the entry point
// returned NULL") and the reason goes to stderr.
#define TOOLHOST_PLUGIN(...)                                                 \
    extern "C" TOOLHOST_EXPORT const toolhost_plugin *toolhost_plugin_v1(     \
        void) noexcept;                                                      \
    extern "C" TOOLHOST_EXPORT const toolhost_plugin *toolhost_plugin_v1(     \
        void) noexcept                                                       \
    {                                                                        \
        static const ::toolhost::detail::Built toolhost_built_(              \
            []() -> ::toolhost::Plugin { return __VA_ARGS__; });             \
        return toolhost_built_.descriptor();                                 \
    }

#endif // TOOLHOST_TOOLHOST_HPP
