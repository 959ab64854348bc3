/* petstore.c - build/tests/petstore: the test pet store
 * (tests/common/petstore.c) as a program, for the worked example of
 * docs/gateway.md.  Serves tests/openapi/petstore.yaml's API under
 * http://127.0.0.1:PORT/v1 until SIGINT or SIGTERM; pets live in memory.
 *
 *   build/tests/petstore [--port N]     (default 8080; 0: any free port)
 *
 * It prints one line when it listens, with the URL and the bearer token
 * it accepts. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/petstore.h"

int main(int argc, char **argv)
{
    long port = 8080;
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "--port") && i + 1 < argc) {
            port = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || port < 0 || port > 65535) {
                fprintf(stderr, "petstore: --port wants 0..65535, got '%s'\n",
                        argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: petstore [--port N]   (default 8080; "
                            "0: any free port)\n");
            return 2;
        }
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    /* blocked before the server's threads start, so they inherit it and
     * sigwait() below is the one place the signal is taken */
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    petsrv p;
    if (petsrv_start(&p, (int)port) != 0) {
        fprintf(stderr, "petstore: cannot listen on 127.0.0.1:%ld\n", port);
        petsrv_stop(&p);
        return 1;
    }
    printf("pet store on http://127.0.0.1:%d/v1 (bearer token %s)\n", p.port,
           PETSRV_TOKEN);
    fflush(stdout);
    int sig = 0;
    sigwait(&set, &sig);
    petsrv_stop(&p);
    return 0;
}
