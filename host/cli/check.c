/* check.c - `toolhost check PLUGIN.so` (lint a plugin without a config)
 * and `toolhost config check FILE` (validate a config, loading its
 * plugins). */
#include <elf.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "th/json.h"

static const char check_usage[] =
    "usage: toolhost check [--config JSON] [--allow-insecure] PLUGIN.so\n"
    "\n"
    "Lints a plugin without a host config: the file is a shared object, it\n"
    "exports the entry symbol (and nothing else: other exported symbols are\n"
    "warned about; build with -fvisibility=hidden), the ABI version and\n"
    "struct sizes, tool names, descriptions, parameter tables and semantic\n"
    "types are valid, and init() succeeds with an empty config (or with\n"
    "--config when the plugin has required config keys). Prints each\n"
    "problem; exits 1 on any error, 0 otherwise.\n"
    "\n"
    "Options:\n"
    "      --config JSON     the plugin's config block, as a JSON object\n"
    "      --allow-insecure  skip the writable-by-others check\n"
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
 * the ELF .dynsym of a 64-bit object).  Returns the number of warnings. */
static int check_exports(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    struct stat st;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof(Elf64_Ehdr)) {
        close(fd);
        return 0;
    }
    size_t size = (size_t)st.st_size;
    const uint8_t *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
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

static void print_problem(void *ud, const char *msg)
{
    int *errors = ud;
    (*errors)++;
    printf("%s\n", msg);
}

int cli_check(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"allow-insecure", no_argument, NULL, 'i'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *config_json = NULL;
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
    int errors = 0;
    lo.on_problem = print_problem;
    lo.problem_ud = &errors;
    th_error err;
    th_error_clear(&err);
    th_plugin *p = NULL;
    if (th_plugin_open(path, &lo, &p, &err) != 0) {
        /* Problems that let the checks go on were printed already; the
         * ones that stop everything come back here. */
        if (errors == 0)
            printf("%s\n", err.msg);
        printf("%s: not loadable: %d problem%s\n", path, errors ? errors : 1,
               errors > 1 ? "s" : "");
        return CLI_FAILED;
    }
    int warnings = check_exports(p->load_path ? p->load_path : path);
    for (size_t i = 0; i < p->n_tools; i++) {
        const th_tool *t = &p->tools[i];
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
        } else if (th_plugin_init(p, cfg.data, cfg.len, &err) != 0) {
            printf("%s\n", err.msg);
            errors++;
        }
        json_decref(cj);
        th_buf_free(&cfg);
    }
    printf("%s: plugin %s %s, %zu tool%s, %d error%s, %d warning%s\n", path,
           p->name, p->version && *p->version ? p->version : "(no version)",
           p->n_tools, p->n_tools == 1 ? "" : "s", errors,
           errors == 1 ? "" : "s", warnings, warnings == 1 ? "" : "s");
    th_plugin_unref(p);
    return errors ? CLI_FAILED : CLI_OK;
}

static const char config_usage[] =
    "usage: toolhost config check FILE\n"
    "\n"
    "Validates a config file: YAML syntax, every key and value, the plugins\n"
    "(each is loaded, checked and initialised, then closed) and that every\n"
    "tool a toolset names exists. Errors read FILE:LINE:COL: message.\n"
    "Exit status: 0 valid, 2 invalid.\n";

int cli_config(int argc, char **argv)
{
    if (cli_wants_help(argc, argv)) {
        fputs(config_usage, stdout);
        return CLI_OK;
    }
    if (argc != 3 || strcmp(argv[1], "check") != 0) {
        fputs(config_usage, stderr);
        return CLI_USAGE;
    }
    cli_host ch;
    int rc = cli_host_open(argv[2], NULL, NULL, &ch);
    if (rc != CLI_OK)
        return rc;
    const th_config *cfg = th_host_config(ch.host);
    printf("%s: ok: %zu plugin%s, %zu tool%s, %zu toolset%s\n", argv[2],
           cfg->n_plugins, cfg->n_plugins == 1 ? "" : "s",
           th_registry_count(th_host_registry(ch.host)),
           th_registry_count(th_host_registry(ch.host)) == 1 ? "" : "s",
           cfg->n_toolsets, cfg->n_toolsets == 1 ? "" : "s");
    cli_host_close(&ch);
    return CLI_OK;
}
