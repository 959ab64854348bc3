/* petstore.h - the pet store of tests/openapi/petstore.yaml, served with
 * libmicrohttpd on 127.0.0.1: pets kept in memory, a bearer token (or HTTP
 * basic, or an API key) required, and the odd endpoints the openapi
 * suite needs (a redirect, a slow, a huge and a flaky answer, an order
 * that lies about its schema).  Used by the integration suites openapi
 * and gateway_example, and by build/tests/petstore, the program a reader
 * of docs/gateway.md starts for its worked example.  For tests only. */
#ifndef TH_TEST_PETSTORE_H
#define TH_TEST_PETSTORE_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>

/* The bearer token the store accepts ("Authorization: Bearer ..."); it
 * also takes basic ann / "open sesame" and the API key k-123 (header
 * X-Api-Key or query api_key). */
#define PETSRV_TOKEN "s3cret-token"

typedef struct petsrv {
    struct MHD_Daemon *d;
    int port;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool released;   /* the slow endpoint may answer */
    json_t *pets;    /* array of {id, name, tag} */
    int next_id;
    int flaky_get, flaky_post, canary, unauthorized;
    int slow_waiting; /* requests inside the slow endpoint now */
    int connections;  /* TCP connections accepted */
    char last_id[256], last_tag[256], last_reqid[256];
    char last_cookie[256]; /* the Cookie header of the last GET /v1/pets */
    char last_form[512];     /* the body of the last form POST /v1/pets/ID */
    char last_form_type[128]; /* and its Content-Type */
    /* the last request to /v1/att/echo... (suite att35): its method,
     * Content-Type ("-" when none was sent) and body (malloc), and how
     * many came */
    char att_method[16];
    char att_type[160];
    char *att_body;
    size_t att_body_len;
    int att_hits;
} petsrv;

/* Serves on 127.0.0.1:port (0: a free port, then in p->port) from a
 * thread of its own; 0, or -1 when the port cannot be had. */
int petsrv_start(petsrv *p, int port);

/* Releases the slow endpoint, stops the server, frees the pets. */
void petsrv_stop(petsrv *p);

#endif
