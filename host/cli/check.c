/* check.c - `toolhost check PLUGIN.so` (lint a plugin without a config)
 * and `toolhost config check FILE` (validate a config, loading its
 * plugins).
 *
 * `check` runs the plugin's code (its constructors, the entry point,
 * init(), fini()) in a child process, never in the checking one: the file
 * is opened and its path checked here (no plugin code runs for that), then
 * a forked child limits itself (no new privileges, no core dumps, CPU
 * seconds, address space, open files; when run as root it becomes
 * `nobody`), loads the plugin from the checked fd and prints its findings
 * into a pipe that the parent copies to stdout.  A second pipe tells the
 * parent which stage the child is in, so a child killed by a signal, or by
 * the parent when it runs out of time, is reported as "init crashed with
 * SIGSEGV", "constructor crashed with SIGABRT", "init did not return
 * within 10 s".
 *
 * Nothing the plugin starts outlives the check: the child is forked into
 * a cgroup of its own where the process may make one (th_iso_cage_open:
 * root or a delegated subtree, a writable cgroup2), which is killed whole
 * and removed when the child has ended; `check` is also the subreaper of
 * the child's tree (a double-forked daemon comes back to it) and kills and
 * reaps what is left.  Without a cgroup the subreaper alone does it.  The
 * log says which applied (info: --log-level info).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <getopt.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "th/code.h"
#include "th/iso.h"
#include "th/json.h"
#include "th/log.h"
#include "th/perm.h"

static const char check_usage[] =
    "usage: toolhost check [--config JSON] [--allow-insecure] [--timeout S]\n"
    "                      [--memory MB] [--strict] [--log-level LEVEL]\n"
    "                      PLUGIN.so\n"
    "\n"
    "Lints a plugin without a host config: the file is a shared object, it\n"
    "exports the entry symbol (and nothing else: other exported symbols are\n"
    "warned about; build with -fvisibility=hidden), the ABI version and\n"
    "struct sizes, tool names, descriptions, parameter tables and semantic\n"
    "types are valid, and init() succeeds with an empty config (or with\n"
    "--config when the plugin has required config keys); the tools a\n"
    "plugin builds in init() (init_tools, ABI 1.1) are checked and listed\n"
    "then. Prints each problem; exits 1 on any error, 0 otherwise.\n"
    "\n"
    "The plugin's code runs in a child process with no new privileges, no\n"
    "core dumps and limits on CPU time, memory and open files (as user\n"
    "'nobody' when check runs as root); a crash or a hang is reported as an\n"
    "error. Every process the plugin starts is killed when the check ends\n"
    "(a cgroup of its own where check may make one, else check as their\n"
    "subreaper; --log-level info says which).\n"
    "\n"
    "Options:\n"
    "      --config JSON     the plugin's config block, as a JSON object\n"
    "      --allow-insecure  skip the writable-by-others check\n"
    "      --timeout S       wall-clock seconds the plugin may take to load,\n"
    "                        init and fini (default 10; then it is killed)\n"
    "      --memory MB       address space of the child (default 2048; 0: no\n"
    "                        limit)\n"
    "      --strict          warnings count as errors, and each read-only tool\n"
    "                        that needs no argument runs once (after init):\n"
    "                        a failure with nothing on stderr is a warning\n"
    "      --log-level LEVEL error, warn (default), info or debug: the log of\n"
    "                        check and of the plugin, on stderr\n"
    "  -h, --help            this help\n";

/* Symbols every shared object exports that the plugin author did not
 * choose. */
static bool symbol_expected(const char *name)
{
    static const char *const ok[] = {"toolhost_plugin_v1", "_init", "_fini",
                                     "_edata", "_end", "__bss_start", NULL};
    for (int i = 0; ok[i]; i++)
        if (strcmp(name, ok[i]) == 0)
            return true;
    return false;
}

/* Warns about every defined, exported symbol but the entry point (reads
 * the ELF .dynsym of a 64-bit object, from the open file `fd`).  Returns
 * the number of warnings. */
static int check_exports(int fd, const char *path)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(Elf64_Ehdr))
        return 0;
    size_t size = (size_t)st.st_size;
    const uint8_t *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        return 0;
    int warnings = 0;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)m;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
        eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > size ||
        (size - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum)
        goto out;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(m + eh->e_shoff);
    for (unsigned i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum)
            continue;
        const Elf64_Shdr *strs = &sh[sh[i].sh_link];
        if (sh[i].sh_offset > size || sh[i].sh_size > size - sh[i].sh_offset ||
            strs->sh_offset > size || strs->sh_size > size - strs->sh_offset)
            break;
        const Elf64_Sym *sym = (const Elf64_Sym *)(m + sh[i].sh_offset);
        size_t n = sh[i].sh_size / sizeof(Elf64_Sym);
        const char *names = (const char *)(m + strs->sh_offset);
        for (size_t k = 1; k < n; k++) {
            unsigned bind = ELF64_ST_BIND(sym[k].st_info);
            unsigned type = ELF64_ST_TYPE(sym[k].st_info);
            if (sym[k].st_shndx == SHN_UNDEF || sym[k].st_name >= strs->sh_size)
                continue;
            if (bind != STB_GLOBAL && bind != STB_WEAK)
                continue;
            if (type != STT_FUNC && type != STT_OBJECT && type != STT_NOTYPE)
                continue;
            if (ELF64_ST_VISIBILITY(sym[k].st_other) != STV_DEFAULT)
                continue;
            const char *name = names + sym[k].st_name;
            if (memchr(name, '\0', strs->sh_size - sym[k].st_name) == NULL ||
                symbol_expected(name))
                continue;
            printf("%s: warning: exports '%s' besides the entry symbol "
                   "(build with -fvisibility=hidden)\n",
                   path, name);
            warnings++;
        }
        break;
    }
out:
    munmap((void *)m, size);
    return warnings;
}

#define CHECK_DESC_MAX 300

/* Code points of a UTF-8 string. */
static size_t chars_of(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xc0) != 0x80)
            n++;
    return n;
}

/* Warnings the loader does not refuse for: a description a model reads
 * as one line, a name that says whose tool it is.  Returns the count. */
static int lint_tool(const char *path, const th_plugin *p, const th_tool *t,
                     bool config_named)
{
    int w = 0;
    const char *d = t->description ? t->description : "";
    const char *nl = strchr(d, '\n');
    if (nl && nl[strspn(nl, " \t\r\n")]) {
        printf("%s: warning: tool '%s' has a description of more than one "
               "line (keep one line; usage and examples go in "
               "long_description)\n",
               path, t->name);
        w++;
    }
    size_t n = chars_of(d);
    if (n > CHECK_DESC_MAX) {
        printf("%s: warning: tool '%s' has a description of %zu characters "
               "(over %d: keep one line a model can act on; the rest goes in "
               "long_description)\n",
               path, t->name, n, CHECK_DESC_MAX);
        w++;
    }
    /* AUTHORING.md: tool names are unique in the whole host, so they start
     * with the plugin's name ("fs_read" in plugin "fs").  Not for tools
     * from init_tools(): the config that declares them names them. */
    const char *pn = p->desc && p->desc->name ? p->desc->name : p->name;
    size_t pl = strlen(pn);
    if (!config_named && strcmp(t->name, pn) != 0 &&
        !(strncmp(t->name, pn, pl) == 0 &&
          (t->name[pl] == '_' || t->name[pl] == '-'))) {
        printf("%s: warning: tool '%s' does not start with the plugin's "
               "name ('%s_...'): tool names are shared by every plugin of "
               "a host\n",
               path, t->name, pn);
        w++;
    }
    return w;
}

static void print_problem(void *ud, const char *msg)
{
    int *errors = ud;
    (*errors)++;
    printf("%s\n", msg);
}

#define CHECK_TIMEOUT_S 10
#define CHECK_MEMORY_MB 2048
#define CHECK_MAX_FILES 256

/* The stages the child reports (one byte each on the stage pipe). */
enum {
    ST_CTOR = 'c',  /* dlopen(): relocation and the constructors */
    ST_ENTRY = 'e', /* the entry point, the descriptor checks */
    ST_INIT = 'i',  /* init() */
    ST_FINI = 'f',  /* fini(), dlclose() and the destructors */
    ST_DONE = 'd',  /* the report is written; exiting */
    ST_CAGED = 'g', /* (before the others) the child is in its cgroup */
};

static const char *stage_name(int st)
{
    switch (st) {
    case ST_CTOR: return "constructor";
    case ST_ENTRY: return "entry point";
    case ST_INIT: return "init";
    case ST_FINI: return "fini";
    case ST_DONE: return "exit handler";
    }
    return "loader"; /* before the first stage: setting up */
}

static const char *signal_name(int sig)
{
    switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGKILL: return "SIGKILL";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    case SIGTRAP: return "SIGTRAP";
    case SIGPIPE: return "SIGPIPE";
    }
    return NULL;
}

static int stage_fd = -1;

static void stage(int st)
{
    char c = (char)st;
    if (stage_fd >= 0)
        while (write(stage_fd, &c, 1) < 0 && errno == EINTR)
            ;
}

/* The limits the child puts on itself before any plugin code runs. */
static void sandbox(const char *path, unsigned timeout_s, unsigned memory_mb)
{
    struct rlimit rl;
    rl.rlim_cur = rl.rlim_max = 0;
    (void)setrlimit(RLIMIT_CORE, &rl);
    rl.rlim_cur = rl.rlim_max = (rlim_t)timeout_s + 1;
    (void)setrlimit(RLIMIT_CPU, &rl);
    rl.rlim_cur = rl.rlim_max = CHECK_MAX_FILES;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    (void)memory_mb; /* the sanitizers reserve terabytes of address space */
#else
    if (memory_mb) {
        rl.rlim_cur = rl.rlim_max = (rlim_t)memory_mb << 20;
        (void)setrlimit(RLIMIT_AS, &rl);
    }
#endif
    if (geteuid() == 0) {
        /* Run the plugin as nobody: an untrusted .so checked as root must
         * not run as root.  The file is already open. */
        struct passwd *pw = getpwnam("nobody");
        if (!pw || setgroups(0, NULL) != 0 || setgid(pw->pw_gid) != 0 ||
            setuid(pw->pw_uid) != 0)
            fprintf(stderr, "toolhost: check %s: warning: cannot become user "
                    "'nobody' (%s); the plugin runs as root\n", path,
                    pw ? strerror(errno) : "no such user");
    }
    /* A crash must end the child by its signal, for the parent to name
     * it (a sanitizer build has handlers of its own). */
    static const int deadly[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof deadly / sizeof deadly[0]; i++)
        signal(deadly[i], SIG_DFL);
    (void)prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    (void)prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    /* The caller's environment may hold secrets (TOOLHOST_MCP_TOKEN):
     * the plugin sees PATH and LANG alone, as an isolated worker does. */
    char keep_path[4096] = "/usr/local/bin:/usr/bin:/bin", keep_lang[256] = "";
    const char *v = getenv("PATH");
    if (v && strlen(v) < sizeof keep_path)
        snprintf(keep_path, sizeof keep_path, "%s", v);
    v = getenv("LANG");
    if (v && strlen(v) < sizeof keep_lang)
        snprintf(keep_lang, sizeof keep_lang, "%s", v);
    clearenv();
    setenv("PATH", keep_path, 1);
    if (keep_lang[0])
        setenv("LANG", keep_lang, 1);
    /* The isolated workers' allow-list with the network off: a plugin's
     * constructor or init() opens no internet socket while checked. */
    if (th_iso_filter_load(false) != 0)
        fprintf(stderr, "toolhost: check %s: warning: cannot load the "
                "seccomp filter; the plugin runs unfiltered\n", path);
}

/* --strict: a call that captures stdout and stderr, nothing more. */
typedef struct strict_call {
    th_call_base base;
    th_buf out, err;
} strict_call;

static int strict_write(toolhost_call *c, int stream, const void *d, size_t n)
{
    strict_call *sc = (strict_call *)c;
    return th_buf_append(stream == TOOLHOST_STDOUT ? &sc->out : &sc->err, d,
                         n)
               ? TOOLHOST_ENOMEM
               : 0;
}

static const th_call_vtbl strict_vt = {.write = strict_write};

/* Runs each read-only, synchronous tool without required parameters once
 * with {} (defaults filled): a failure must say why on stderr.  Returns
 * the number of warnings. */
static int strict_run(const char *path, th_plugin *p)
{
    int w = 0;
    static const uint8_t empty[] = {0x80};
    for (size_t i = 0; i < p->n_tools; i++) {
        const th_tool *t = &p->tools[i];
        bool needs = false;
        for (size_t k = 0; k < t->n_params; k++)
            needs |= t->params[k].required;
        if (needs || !(t->flags & TOOLHOST_TOOL_READ_ONLY) ||
            (t->flags & TOOLHOST_TOOL_ASYNC))
            continue;
        th_buf filled = TH_BUF_INIT;
        const uint8_t *a;
        size_t alen;
        th_error e;
        if (th_validate_call(t, empty, 1, &filled, &a, &alen, &e) != 0) {
            th_buf_destroy(&filled);
            continue;
        }
        strict_call sc;
        memset(&sc, 0, sizeof sc);
        sc.base.pub.struct_size = sizeof sc.base.pub;
        sc.base.pub.host = &p->api;
        sc.base.pub.call_id = i + 1;
        sc.base.vt = &strict_vt;
        int st = t->desc->execute(p->state, t->desc, &sc.base.pub, a, alen);
        if (st == TOOLHOST_FAILED && sc.err.len == 0) {
            printf("%s: warning: tool '%s' failed with nothing on stderr "
                   "(write the reason to stderr: a model reads it)\n",
                   path, t->name);
            w++;
        } else if (st == TOOLHOST_OK &&
                   th_validate_output(t, sc.out.data, sc.out.len, &e) != 0) {
            printf("%s: warning: %s\n", path, e.msg);
            w++;
        }
        th_buf_destroy(&sc.out);
        th_buf_destroy(&sc.err);
        th_buf_destroy(&filled);
    }
    return w;
}

/* The checks that run plugin code; in the child.  Returns the exit
 * status. */
static int run_checks(const char *path, int fd, const char *config_json,
                      th_load_opts *lo, bool strict)
{
    int errors = 0;
    lo->on_problem = print_problem;
    lo->problem_ud = &errors;
    lo->has_fd = true;
    lo->fd = fd;
    th_error err;
    th_error_clear(&err);
    th_plugin *p = NULL;
    /* dlopen() first on its own, so a crash in a constructor is told
     * apart from one in the entry point; the loader's dlopen() of the
     * same name then takes this object. */
    char self[64];
    snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
    stage(ST_CTOR);
    void *pre = dlopen(self, RTLD_NOW | RTLD_LOCAL);
    stage(ST_ENTRY);
    if (th_plugin_open(path, lo, &p, &err) != 0) {
        if (pre)
            dlclose(pre);
        /* Problems that let the checks go on were printed already; the
         * ones that stop everything come back here. */
        if (errors == 0)
            printf("%s\n", err.msg);
        printf("%s: not loadable: %d problem%s\n", path, errors ? errors : 1,
               errors > 1 ? "s" : "");
        return CLI_FAILED;
    }
    int warnings = check_exports(fd, path);
    for (size_t i = 0; i < p->n_tools; i++) {
        const th_tool *t = &p->tools[i];
        warnings += lint_tool(path, p, t, false);
        if (!t->long_description)
            printf("%s: note: tool '%s' has no long description (usage, "
                   "warnings, examples help a model use it)\n",
                   path, t->name);
    }

    /* init() with the given config, or an empty one when the plugin needs
     * no config key; th_plugin_init validates it as the host does. */
    const char *missing = NULL;
    for (size_t i = 0; i < p->n_config_params; i++)
        if (p->config_params[i].required && !config_json)
            missing = p->config_params[i].name;
    if (missing) {
        printf("%s: note: init() not tried: the config key '%s' is required "
               "(give --config '{...}')\n",
               path, missing);
    } else {
        th_buf cfg = TH_BUF_INIT;
        json_t *cj = json_loads(config_json ? config_json : "{}", 0, NULL);
        if (!cj || !json_is_object(cj) || th_json_to_msgpack(cj, &cfg) != 0) {
            printf("%s: error: --config must be a JSON object\n", path);
            errors++;
        } else {
            stage(ST_INIT);
            size_t n_static = p->n_tools;
            if (th_plugin_init(p, cfg.data, cfg.len, &err) != 0) {
                printf("%s\n", err.msg);
                errors++;
            } else {
                /* ABI 1.1 init_tools(): tools built from the config. */
                if (p->n_tools > n_static)
                    printf("%s: init_tools(): %zu tool%s:", path,
                           p->n_tools - n_static,
                           p->n_tools - n_static == 1 ? "" : "s");
                for (size_t i = n_static; i < p->n_tools; i++)
                    printf(" %s", p->tools[i].name);
                if (p->n_tools > n_static)
                    printf("\n");
                for (size_t i = n_static; i < p->n_tools; i++)
                    warnings += lint_tool(path, p, &p->tools[i], true);
                if (strict)
                    warnings += strict_run(path, p);
            }
        }
        json_decref(cj);
        th_buf_destroy(&cfg);
    }
    printf("%s: plugin %s %s, %zu tool%s, %d error%s, %d warning%s\n", path,
           p->name, p->version && *p->version ? p->version : "(no version)",
           p->n_tools, p->n_tools == 1 ? "" : "s", errors,
           errors == 1 ? "" : "s", warnings, warnings == 1 ? "" : "s");
    fflush(stdout);
    stage(ST_FINI);
    th_plugin_unref(p);
    if (pre)
        dlclose(pre);
    return errors || (strict && warnings) ? CLI_FAILED : CLI_OK;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Copies the child's report to stdout and follows its stages until both
 * pipes end or time runs out.  Returns false on timeout. */
static bool follow_child(pid_t pid, int out, int st, int64_t deadline,
                         int *last, bool *caged)
{
    /* The child's end is seen by its pidfd, not by the pipes' end alone: a
     * process the plugin started may hold them open (then what is already
     * in the pipes is read, and no more). */
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    struct pollfd pf[3] = {{out, POLLIN, 0}, {st, POLLIN, 0}, {pfd, POLLIN, 0}};
    char buf[4096];
    bool exited = false;
    while (pf[0].fd >= 0 || pf[1].fd >= 0) {
        int64_t left = deadline - mono_ms();
        if (left <= 0 && !exited) {
            if (pfd >= 0)
                close(pfd);
            return false;
        }
        int n = poll(pf, 3, exited ? 0 : (int)(left > 1000 ? 1000 : left));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || (n == 0 && exited))
            break;
        if (pf[2].fd >= 0 && (pf[2].revents & POLLIN)) {
            exited = true; /* drain what is there, then stop */
            pf[2].fd = -1;
        }
        for (int i = 0; i < 2; i++) {
            if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t r = read(pf[i].fd, buf, sizeof buf);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) {
                pf[i].fd = -1;
                continue;
            }
            if (i == 0)
                fwrite(buf, 1, (size_t)r, stdout);
            else {
                /* only as the first byte, written before any plugin
                 * code runs (the plugin may write to this pipe) */
                if (*last == 0 && buf[0] == ST_CAGED)
                    *caged = true;
                *last = (unsigned char)buf[r - 1];
            }
        }
    }
    if (pfd >= 0)
        close(pfd);
    return true;
}

/* Kills and reaps every process the checked plugin left behind: `check`
 * is their subreaper (PR_SET_CHILD_SUBREAPER before the fork), so a
 * double-forked daemon comes back to it as its child.  Rounds until no
 * child is left (a child may fork while the list is read). */
static void kill_leftovers(void)
{
    for (int round = 0; round < 100; round++) {
        int found = 0;
        DIR *tasks = opendir("/proc/self/task");
        struct dirent *t;
        while (tasks && (t = readdir(tasks)) != NULL) {
            if (t->d_name[0] == '.')
                continue;
            char path[300];
            snprintf(path, sizeof path, "/proc/self/task/%s/children",
                     t->d_name);
            FILE *f = fopen(path, "r");
            long c;
            while (f && fscanf(f, "%ld", &c) == 1) {
                kill((pid_t)c, SIGKILL);
                found++;
            }
            if (f)
                fclose(f);
        }
        if (tasks)
            closedir(tasks);
        while (waitpid(-1, NULL, found ? 0 : WNOHANG) > 0)
            ;
        if (!found)
            return;
    }
}

/* Ends what the plugin left: its cgroup killed whole and removed (where
 * the child entered one), then the subreaper's round (reaps what the
 * cgroup's kill left as zombies, and kills whatever had no cgroup).  Logs
 * which applied. */
static void contain_end(const char *path, th_iso_cage *cage, bool caged,
                        const char *why)
{
    if (cage && caged) {
        char dir[4200];
        snprintf(dir, sizeof dir, "%s", th_iso_cage_dir(cage));
        int rc = th_iso_cage_kill_wait(cage, 5000);
        kill_leftovers();
        th_log_info("check %s: contained by a cgroup of its own, %s, %s; "
                    "and by check as the subreaper of its tree",
                    path, dir,
                    rc == 0 ? "killed whole and removed"
                            : "not emptied in time (the subreaper killed "
                              "what was left)");
    } else {
        kill_leftovers();
        th_log_info("check %s: contained by check as the subreaper of its "
                    "tree (every process it started was killed), no "
                    "cgroup: %s",
                    path, cage ? "the child could not enter it" : why);
    }
    th_iso_cage_close(cage);
}

/* Waits for the child at most until `deadline`; kills it then. */
static int reap(pid_t pid, int64_t deadline, bool *killed)
{
    int status = 0;
    for (;;) {
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            return status;
        if (w < 0 && errno != EINTR)
            return 0;
        if (mono_ms() >= deadline) {
            kill(pid, SIGKILL);
            *killed = true;
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
                ;
            return status;
        }
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
}

static bool parse_uint(const char *s, unsigned max, unsigned *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v > max)
        return false;
    *out = (unsigned)v;
    return true;
}

int cli_check(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"allow-insecure", no_argument, NULL, 'i'},
        {"timeout", required_argument, NULL, 't'},
        {"memory", required_argument, NULL, 'm'},
        {"strict", no_argument, NULL, 's'},
        {"log-level", required_argument, NULL, 'L'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *config_json = NULL;
    unsigned timeout_s = CHECK_TIMEOUT_S, memory_mb = CHECK_MEMORY_MB;
    bool strict = false;
    int level = TOOLHOST_LOG_WARN; /* the report is the output */
    th_load_opts lo;
    memset(&lo, 0, sizeof lo);
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            config_json = optarg;
            break;
        case 'i':
            lo.allow_insecure = true;
            break;
        case 's':
            strict = true;
            break;
        case 'L':
            if ((level = cli_log_level_arg(optarg)) < 0)
                return CLI_USAGE;
            break;
        case 't':
            if (!parse_uint(optarg, 3600, &timeout_s) || timeout_s == 0) {
                cli_error("check: --timeout wants seconds, 1 to 3600");
                return CLI_USAGE;
            }
            break;
        case 'm':
            if (!parse_uint(optarg, 1u << 20, &memory_mb)) {
                cli_error("check: --memory wants megabytes (0: no limit)");
                return CLI_USAGE;
            }
            break;
        case 'h':
            fputs(check_usage, stdout);
            return CLI_OK;
        default:
            fputs(check_usage, stderr);
            return CLI_USAGE;
        }
    }
    if (optind + 1 != argc) {
        cli_error("check: give one plugin file");
        fputs(check_usage, stderr);
        return CLI_USAGE;
    }
    const char *path = argv[optind];
    th_log_set_level(level);

    /* Open and check the file here: no plugin code runs for that. */
    th_error err;
    th_error_clear(&err);
    int fd = -1;
    if (th_plugin_file_open(path, NULL, !lo.allow_insecure, &fd, &err) != 0) {
        printf("%s\n", err.msg);
        printf("%s: not loadable: 1 problem\n", path);
        return CLI_FAILED;
    }
    int outp[2], stp[2];
    if (pipe2(outp, O_CLOEXEC) != 0 || pipe2(stp, O_CLOEXEC) != 0) {
        cli_error("check: pipe: %s", strerror(errno));
        close(fd);
        return CLI_FAILED;
    }
    /* A cgroup of its own for the child, where this process may make one;
     * check is the subreaper of the child's tree either way. */
    char why[256] = "", leaf[64];
    snprintf(leaf, sizeof leaf, "check-%d", (int)getpid());
    th_iso_cage *cage =
        th_iso_cage_open(leaf, (uint64_t)memory_mb << 20, why, sizeof why);
    fflush(stdout);
    fflush(stderr);
    (void)prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    pid_t pid = fork();
    if (pid < 0) {
        cli_error("check: fork: %s", strerror(errno));
        th_iso_cage_close(cage);
        close(fd);
        close(outp[0]), close(outp[1]), close(stp[0]), close(stp[1]);
        return CLI_FAILED;
    }
    if (pid == 0) {
        /* first: nothing of the child runs outside its cgroup */
        int cage_err = cage ? th_iso_cage_enter(cage) : -1;
        close(outp[0]);
        close(stp[0]);
        if (dup2(outp[1], STDOUT_FILENO) < 0)
            _exit(CLI_FAILED);
        close(outp[1]);
        setvbuf(stdout, NULL, _IOLBF, 0); /* nothing lost to a crash */
        stage_fd = stp[1];
        if (cage_err == 0)
            stage(ST_CAGED);
        else if (cage_err > 0)
            fprintf(stderr, "toolhost: check %s: warning: cannot enter the "
                    "cgroup %s: %s\n", path, th_iso_cage_dir(cage),
                    strerror(cage_err));
        th_iso_cage_forget(cage); /* the parent's to kill and remove */
        /* the plugin's own cages (ABI 1.3): none, check's cage and
         * subreaper hold whatever it starts */
        th_iso_cage_api_off("under toolhost check, whose cgroup and "
                            "subreaper hold what the plugin starts");
        sandbox(path, timeout_s, memory_mb);
        int rc = run_checks(path, fd, config_json, &lo, strict);
        fflush(stdout);
        stage(ST_DONE);
        _exit(rc);
    }
    th_iso_cage_placed(cage);
    close(outp[1]);
    close(stp[1]);
    int64_t deadline = mono_ms() + (int64_t)timeout_s * 1000;
    int last = 0;
    bool caged = false;
    bool in_time =
        follow_child(pid, outp[0], stp[0], deadline, &last, &caged);
    close(outp[0]);
    close(stp[0]);
    close(fd);
    bool killed = false;
    int status = reap(pid, in_time ? deadline + 1000 : 0, &killed);
    contain_end(path, cage, caged, why);
    fflush(stdout);
    if (killed) {
        printf("%s: %s did not return within %u s (the check killed it)\n",
               path, stage_name(last), timeout_s);
    } else if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        const char *name = signal_name(sig);
        if (sig == SIGXCPU)
            printf("%s: %s used more than %u s of CPU (killed with SIGXCPU)\n",
                   path, stage_name(last), timeout_s + 1);
        else if (name)
            printf("%s: %s crashed with %s\n", path, stage_name(last), name);
        else
            printf("%s: %s crashed with signal %d\n", path, stage_name(last),
                   sig);
    } else if (WIFEXITED(status) && last != ST_DONE) {
        printf("%s: %s ended the process (exit status %d)\n", path,
               stage_name(last), WEXITSTATUS(status));
    } else if (WIFEXITED(status)) {
        return WEXITSTATUS(status) == CLI_OK ? CLI_OK : CLI_FAILED;
    }
    printf("%s: failed: 1 problem\n", path);
    return CLI_FAILED;
}

static const char config_usage[] =
    "usage: toolhost config check [--json] FILE\n"
    "\n"
    "Validates a config file: YAML syntax, every key and value, the plugins\n"
    "(each is loaded, checked and initialised, then closed) and that every\n"
    "tool a toolset names exists. Errors read FILE:LINE:COL: message; every\n"
    "mistake is listed (up to 20), not the first alone: first those in the\n"
    "keys, then each plugin that does not load, then (once every plugin\n"
    "loads) each tool name no plugin provides. Warns about a permission\n"
    "rule that matches no tool of its toolset.\n"
    "--json prints one JSON object instead: {\"ok\", \"errors\": [{\"file\",\n"
    "\"line\", \"col\", \"message\"}], \"warnings\": [...], \"plugins\", \"tools\"}\n"
    "(line and col 0 when a finding has no place in the file).\n"
    "Exit status: 0 valid, 2 invalid.\n";

static int count_tool(const th_tool *t, void *ud)
{
    (void)t;
    (*(size_t *)ud)++;
    return 0;
}

/* {"file", "line", "col", "message"} from "FILE:LINE:COL: message" (or a
 * message without a place: line and col 0, file the config). */
static json_t *finding(const char *cfg_path, const char *msg)
{
    const char *file_end = NULL, *p = msg;
    long line = 0, col = 0;
    /* the place is the first ":N:N: " (a path may hold colons) */
    for (const char *q = strchr(p, ':'); q; q = strchr(q + 1, ':')) {
        char *e1, *e2;
        long l = strtol(q + 1, &e1, 10);
        if (e1 == q + 1 || *e1 != ':')
            continue;
        long c = strtol(e1 + 1, &e2, 10);
        if (e2 == e1 + 1 || e2[0] != ':' || e2[1] != ' ')
            continue;
        file_end = q;
        line = l;
        col = c;
        p = e2 + 2;
        break;
    }
    /* the file is the word before the place; words before it (a log
     * line's "optional plugin x skipped: ") stay in the message */
    const char *file = msg;
    if (file_end)
        for (const char *q = msg; q < file_end; q++)
            if (*q == ' ')
                file = q + 1;
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = 0;
    char text[2048];
    snprintf(text, sizeof text, "%.*s%s", (int)(file_end ? file - msg : 0),
             msg, p);
    if (file_end)
        bad |= json_object_set_new(o, "file",
                                   json_stringn(file, (size_t)(file_end - file)));
    else
        bad |= json_object_set_new(o, "file", json_string(cfg_path));
    bad |= json_object_set_new(o, "line", json_integer(line));
    bad |= json_object_set_new(o, "col", json_integer(col));
    bad |= json_object_set_new(o, "message", json_string(text));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The warnings and errors the host logged while loading (text lines in
 * `fd`), as findings in `warnings`. */
static void logged_findings(int fd, const char *cfg_path, json_t *warnings)
{
    if (lseek(fd, 0, SEEK_SET) != 0)
        return;
    FILE *f = fdopen(dup(fd), "r");
    if (!f)
        return;
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        /* "TIME LEVEL  message" */
        char *sp = strchr(line, ' ');
        if (!sp)
            continue;
        char *msg = sp + 1;
        if (strncmp(msg, "warn", 4) != 0 && strncmp(msg, "error", 5) != 0)
            continue;
        msg += strcspn(msg, " ");
        msg += strspn(msg, " ");
        json_t *o = finding(cfg_path, msg);
        if (o)
            json_array_append_new(warnings, o);
    }
    fclose(f);
}

/* The errors th_config_load_report() found, in order. */
typedef struct cfg_errors {
    char *msg[TH_CONFIG_MAX_ERRORS];
    size_t n;
} cfg_errors;

static void keep_error(void *ud, const th_error *e)
{
    cfg_errors *l = ud;
    if (l->n < TH_CONFIG_MAX_ERRORS && (l->msg[l->n] = strdup(e->msg)))
        l->n++;
}

/* The line and column of "FILE:LINE:COL: ..." (0 when none). */
static long place_of(const char *m, long *col)
{
    *col = 0;
    for (const char *q = strchr(m, ':'); q; q = strchr(q + 1, ':')) {
        char *e1, *e2;
        long l = strtol(q + 1, &e1, 10);
        if (e1 == q + 1 || *e1 != ':')
            continue;
        long c = strtol(e1 + 1, &e2, 10);
        if (e2 == e1 + 1 || *e2 != ':')
            continue;
        *col = c;
        return l;
    }
    return 0;
}

/* In the order of the file: the walk reports a map's unknown keys before
 * its values. */
static int by_place(const void *a, const void *b)
{
    long ca, cb, la = place_of(*(char *const *)a, &ca),
                 lb = place_of(*(char *const *)b, &cb);
    return la != lb ? (la < lb ? -1 : 1) : ca < cb ? -1 : ca > cb;
}

static void cfg_errors_free(cfg_errors *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->msg[i]);
    l->n = 0;
}

/* Reads the config with every mistake in `l` (th_config_load_report);
 * *err is the first, or the one failure that ended the reading. */
static int load_all(const char *path, th_config **cfg, cfg_errors *l,
                    th_error *err)
{
    memset(l, 0, sizeof *l);
    th_error_clear(err);
    if (cli_is_plugin_path(path))
        return 0; /* a .so alone: cli_host_open() writes its config */
    int rc = th_config_load_report(path, cfg, err, keep_error, l);
    if (rc != 0 && l->n == 0 && (l->msg[0] = strdup(err->msg)))
        l->n = 1;
    qsort(l->msg, l->n, sizeof l->msg[0], by_place);
    return rc;
}

/* Opens a host from `cfg` (taken) going on past each plugin that does not
 * load and each tool name no plugin provides, every one into `l` in the
 * order of the file; 0 when the host opened (then closed again). */
static int open_all(th_config *cfg, cfg_errors *l, th_error *err)
{
    memset(l, 0, sizeof *l);
    th_host_opts o = {.on_error = keep_error, .error_ud = l};
    th_host *h = NULL;
    int rc = th_host_open_ex(cfg, &o, &h, err);
    if (rc == 0) {
        th_host_close(h);
        return 0;
    }
    if (l->n == 0 && (l->msg[0] = strdup(err->msg)))
        l->n = 1;
    qsort(l->msg, l->n, sizeof l->msg[0], by_place);
    return rc;
}

static void print_errors(const char *path, cfg_errors *all)
{
    for (size_t i = 0; i < all->n; i++)
        fprintf(stderr, "%s\n", all->msg[i]);
    if (all->n > 1)
        fprintf(stderr, "%s: %zu errors%s\n", path, all->n,
                all->n >= TH_CONFIG_MAX_ERRORS ? " (the first 20; there may "
                                                 "be more)"
                                               : "");
}

static bool in_toolset(const th_toolset_cfg *ts, const char *tool)
{
    for (size_t i = 0; i < ts->n_tools; i++)
        if (strcmp(ts->tools[i], "*") == 0 || strcmp(ts->tools[i], tool) == 0)
            return true;
    return false;
}

typedef struct rule_probe {
    const th_toolset_cfg *ts;
    const th_perm_rule *rule;
    bool hit;
} rule_probe;

/* Whether the rule may match the tool: its glob and its static flags
 * (needs_permission depends on the arguments: any tool may say it). */
static int probe_rule(const th_tool *t, void *ud)
{
    rule_probe *p = ud;
    uint32_t want = p->rule->flags & ~(uint32_t)TH_PERM_FLAG_NEEDS;
    if (!in_toolset(p->ts, t->name) ||
        (p->rule->match && fnmatch(p->rule->match, t->name, 0) != 0) ||
        (t->flags & want) != want)
        return 0;
    p->hit = true;
    return 1;
}

/* One "FILE:LINE:COL: ..." warning per permission rule that matches no
 * tool of its toolset (a misspelt glob allows or denies nothing). */
static void rule_warnings(th_host *h, void (*warn)(void *ud, const char *m),
                          void *ud)
{
    const th_config *cfg = th_host_config(h);
    for (size_t i = 0; i < cfg->n_toolsets; i++) {
        const th_toolset_cfg *ts = &cfg->toolsets[i];
        for (size_t j = 0; j < ts->n_rules; j++) {
            rule_probe p = {.ts = ts, .rule = &ts->rules[j]};
            th_registry_foreach(th_host_registry(h), probe_rule, &p);
            if (p.hit)
                continue;
            char flags[160] = "", m[512];
            if (p.rule->flags)
                th_perm_flags_str(p.rule->flags, flags, sizeof flags);
            snprintf(m, sizeof m,
                     "%s:%d:%d: the permission rule (%s%s%s%s%s%s) of "
                     "toolset '%s' matches no tool of that toolset",
                     cfg->path, p.rule->line, p.rule->col,
                     p.rule->match ? "match '" : "",
                     p.rule->match ? p.rule->match : "",
                     p.rule->match ? "'" : "",
                     p.rule->match && flags[0] ? ", " : "",
                     flags[0] ? "flags " : "", flags, ts->name);
            warn(ud, m);
        }
    }
}

static void warn_stderr(void *ud, const char *m)
{
    (void)ud;
    fprintf(stderr, "warning: %s\n", m);
}

static void warn_json(void *ud, const char *m)
{
    const char *path = ((void **)ud)[0];
    json_t *warnings = ((void **)ud)[1];
    json_t *o = finding(path, m);
    if (o)
        json_array_append_new(warnings, o);
}

/* `toolhost config check --json FILE`: the findings as one JSON object on
 * stdout.  Exit status as without --json. */
static int config_check_json(const char *path)
{
    json_t *out = json_object(), *errors = json_array(),
           *warnings = json_array();
    int logfd = memfd_create("toolhost-config-check", MFD_CLOEXEC);
    if (!out || !errors || !warnings) {
        json_decref(out);
        json_decref(errors);
        json_decref(warnings);
        if (logfd >= 0)
            close(logfd);
        cli_error("out of memory");
        return CLI_FAILED;
    }
    /* the host's warnings (an optional plugin skipped ...) into a file */
    int level = th_log_get_level();
    if (logfd >= 0) {
        th_log_set_fd(logfd);
        th_log_set_level(TOOLHOST_LOG_WARN);
    }
    th_error err;
    th_error_clear(&err);
    th_config *cfg = NULL;
    th_host *h = NULL;
    size_t n_plugins = 0, n_tools = 0;
    cfg_errors all;
    void *wud[2] = {(void *)path, warnings};
    if (load_all(path, &cfg, &all, &err) == 0) {
        n_plugins = cfg->n_plugins;
        th_host_opts ho = {.on_error = keep_error, .error_ud = &all};
        if (th_host_open_ex(cfg, &ho, &h, &err) != 0)
            qsort(all.msg, all.n, sizeof all.msg[0], by_place);
        else if (th_code_attach(h, &err) == 0) {
            n_tools = th_registry_count(th_host_registry(h));
            rule_warnings(h, warn_json, wud);
        }
    }
    if (h)
        th_host_close(h);
    if (logfd >= 0) {
        (void)th_log_own_stderr(); /* back to stderr */
        th_log_set_level(level);
        logged_findings(logfd, path, warnings);
        close(logfd);
    }
    bool ok = err.code == 0;
    for (size_t i = 0; i < all.n; i++) {
        json_t *o = finding(path, all.msg[i]);
        if (o)
            json_array_append_new(errors, o);
    }
    if (!ok && all.n == 0) { /* the host's: a plugin that did not load */
        json_t *o = finding(path, err.msg);
        if (o)
            json_array_append_new(errors, o);
    }
    cfg_errors_free(&all);
    json_object_set_new(out, "ok", json_boolean(ok));
    json_object_set_new(out, "errors", errors);
    json_object_set_new(out, "warnings", warnings);
    json_object_set_new(out, "plugins", json_integer((json_int_t)n_plugins));
    json_object_set_new(out, "tools", json_integer((json_int_t)n_tools));
    char *text = json_dumps(out, JSON_COMPACT);
    json_decref(out);
    if (!text) {
        cli_error("out of memory");
        return CLI_FAILED;
    }
    puts(text);
    free(text);
    return ok ? CLI_OK : CLI_USAGE;
}

int cli_config(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(config_usage, stdout);
        return CLI_OK;
    }
    if (argc == 4 && strcmp(argv[1], "check") == 0 &&
        (strcmp(argv[2], "--json") == 0 || strcmp(argv[3], "--json") == 0))
        return config_check_json(strcmp(argv[2], "--json") == 0 ? argv[3]
                                                                : argv[2]);
    if (argc != 3 || strcmp(argv[1], "check") != 0) {
        fputs(config_usage, stderr);
        return CLI_USAGE;
    }
    /* Every mistake in the file first (th_config_load_report), then the
     * host opened from it as any command does. */
    cfg_errors all;
    th_error err;
    th_config *pre = NULL;
    if (load_all(argv[2], &pre, &all, &err) != 0 ||
        (pre && open_all(pre, &all, &err) != 0)) {
        print_errors(argv[2], &all);
        cfg_errors_free(&all);
        return CLI_USAGE;
    }
    cli_host ch;
    int rc = cli_host_open(argv[2], NULL, NULL, &ch);
    if (rc != CLI_OK)
        return rc;
    rule_warnings(ch.host, warn_stderr, NULL);
    const th_config *cfg = th_host_config(ch.host);
    /* The tools `toolhost list` shows: the task tools only when they are
     * always listed (host.expose_task_tools). */
    size_t n_tools = 0;
    th_session_tools(ch.session, count_tool, &n_tools);
    printf("%s: ok: %zu plugin%s, %zu tool%s, %zu toolset%s\n", argv[2],
           cfg->n_plugins, cfg->n_plugins == 1 ? "" : "s", n_tools,
           n_tools == 1 ? "" : "s", cfg->n_toolsets,
           cfg->n_toolsets == 1 ? "" : "s");
    cli_host_close(&ch);
    return CLI_OK;
}
