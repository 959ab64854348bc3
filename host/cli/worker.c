/* worker.c - `toolhost worker`, the internal command the host starts for
 * each worker process of a plugin with `isolation: process`
 * (docs/isolation.md).  Not listed in the help: it needs the fds the host
 * sets up and says so when run by hand. */
#include "cli.h"
#include "th/iso.h"

int cli_worker(int argc, char **argv)
{
    return th_iso_worker_main(argc, argv);
}
