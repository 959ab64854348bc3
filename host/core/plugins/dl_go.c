/* dl_go.c - the one Go runtime a process may hold: telling a Go object
 * from its file, and the claim on the runtime (see dl_go.h for the why).
 *
 * The claim is process-wide and never given back once the object was
 * opened: the runtime stays (RTLD_NODELETE) after its plugin is closed,
 * so a later Go object would still be a second runtime. */
#include "dl_go.h"

#include <elf.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    bool taken;
    dev_t dev;
    ino_t ino;
    const void *dl;   /* the handle once opened */
    char path[1024];  /* as configured */
    char name[128];   /* the plugin's config name, "" when unknown */
} g_go;

static bool pread_all(int fd, void *buf, size_t n, uint64_t at)
{
    return pread(fd, buf, n, (off_t)at) == (ssize_t)n;
}

/* A note "Go" of type 4 in one PT_NOTE segment. */
static bool go_note(int fd, const Elf64_Phdr *ph, uint64_t size)
{
    if (ph->p_offset > size || ph->p_filesz > size - ph->p_offset ||
        ph->p_filesz > 65536)
        return false;
    unsigned char *b = malloc(ph->p_filesz ? ph->p_filesz : 1);
    bool found = false;
    if (b && pread_all(fd, b, ph->p_filesz, ph->p_offset)) {
        size_t at = 0, n = ph->p_filesz;
        while (!found && n - at >= sizeof(Elf64_Nhdr)) {
            Elf64_Nhdr nh;
            memcpy(&nh, b + at, sizeof nh);
            at += sizeof nh;
            size_t nsz = (nh.n_namesz + 3u) & ~3u;
            size_t dsz = (nh.n_descsz + 3u) & ~3u;
            if (nsz > n - at || dsz > n - at - nsz)
                break;
            /* "Go" NUL-terminated: the Go linker pads the name to 4 */
            found = nh.n_type == 4 &&
                    (nh.n_namesz == 3 || nh.n_namesz == 4) &&
                    memcmp(b + at, "Go", 3) == 0;
            at += nsz + dsz;
        }
    }
    free(b);
    return found;
}

/* A section named .go.buildinfo. */
static bool go_section(int fd, const Elf64_Ehdr *eh, uint64_t size)
{
    if (!eh->e_shoff || eh->e_shentsize != sizeof(Elf64_Shdr) ||
        eh->e_shstrndx >= eh->e_shnum || eh->e_shnum > 4096 ||
        eh->e_shoff > size ||
        (size - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum)
        return false;
    Elf64_Shdr *sh = malloc(eh->e_shnum * sizeof *sh);
    bool found = false;
    if (sh && pread_all(fd, sh, eh->e_shnum * sizeof *sh, eh->e_shoff)) {
        const Elf64_Shdr *st = &sh[eh->e_shstrndx];
        static const char want[] = ".go.buildinfo";
        char got[sizeof want];
        for (unsigned i = 0; !found && i < eh->e_shnum; i++)
            found = sh[i].sh_name < st->sh_size &&
                    st->sh_size - sh[i].sh_name >= sizeof want &&
                    st->sh_offset <= size - sh[i].sh_name &&
                    pread_all(fd, got, sizeof got,
                              st->sh_offset + sh[i].sh_name) &&
                    memcmp(got, want, sizeof want) == 0;
    }
    free(sh);
    return found;
}

bool th_dl_go_fd(int fd)
{
    struct stat st;
    Elf64_Ehdr eh;
    if (fstat(fd, &st) != 0 || !pread_all(fd, &eh, sizeof eh, 0) ||
        memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_ident[EI_CLASS] != ELFCLASS64)
        return false;
    uint64_t size = (uint64_t)st.st_size;
    if (eh.e_phentsize == sizeof(Elf64_Phdr) && eh.e_phnum <= 256) {
        for (unsigned i = 0; i < eh.e_phnum; i++) {
            Elf64_Phdr ph;
            if (!pread_all(fd, &ph, sizeof ph,
                           eh.e_phoff + (uint64_t)i * sizeof ph))
                break;
            if (ph.p_type == PT_NOTE && go_note(fd, &ph, size))
                return true;
        }
    }
    return go_section(fd, &eh, size);
}

int th_dl_go_claim(int fd, const char *path, const char *name,
                   uint64_t generation, bool *fresh, th_error *err)
{
    *fresh = false;
    struct stat st;
    if (fstat(fd, &st) != 0)
        return th_error_set(err, TH_ELOAD, "%s: cannot be loaded: fstat "
                            "failed", path);
    pthread_mutex_lock(&g_mu);
    int rc = 0;
    if (!g_go.taken) {
        g_go.taken = true;
        g_go.dev = st.st_dev;
        g_go.ino = st.st_ino;
        g_go.dl = NULL;
        snprintf(g_go.path, sizeof g_go.path, "%s", path);
        snprintf(g_go.name, sizeof g_go.name, "%s", name ? name : "");
        *fresh = true;
    } else if (g_go.dev == st.st_dev && g_go.ino == st.st_ino) {
        rc = 0; /* the same object: dlopen() gives it back */
    } else if (name && generation > 1 && strcmp(name, g_go.name) == 0) {
        rc = th_error_set(
            err, TH_ELOAD,
            "%s: refused: a reload of the in-process Go plugin '%s' would "
            "load a second Go runtime into this process (a process holds "
            "one, and a Go shared object is never unloaded); its running "
            "build goes on serving: restart the host to run the new "
            "build, or give the plugin 'isolation: process' (each worker "
            "is a new process, so a reload works there)",
            path, name);
    } else {
        rc = th_error_set(
            err, TH_ELOAD,
            "%s: refused: it holds a Go runtime and this process already "
            "runs the one of %s%s%s%s (a process holds one Go runtime, "
            "never unloaded): put the Go tools in one plugin, or give "
            "this plugin 'isolation: process' (a process of its own)",
            path, g_go.path, g_go.name[0] ? " (plugin '" : "", g_go.name,
            g_go.name[0] ? "')" : "");
    }
    pthread_mutex_unlock(&g_mu);
    return rc;
}

void th_dl_go_unclaim(void)
{
    pthread_mutex_lock(&g_mu);
    if (!g_go.dl)
        memset(&g_go, 0, sizeof g_go);
    pthread_mutex_unlock(&g_mu);
}

void th_dl_go_opened(void *dl)
{
    pthread_mutex_lock(&g_mu);
    g_go.dl = dl;
    pthread_mutex_unlock(&g_mu);
}

bool th_dl_go_is(const void *dl)
{
    pthread_mutex_lock(&g_mu);
    bool is = dl && g_go.dl == dl;
    pthread_mutex_unlock(&g_mu);
    return is;
}
