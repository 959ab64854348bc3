// crash - a test fixture of the Go SDK (not an example): tools that fail
// the three ways a Go plugin can crash (and one its backend fails), for tests/integration/test_sdk_go.c
// (crash reporting with the Go runtime in the process).
package main

/*
#include <pthread.h>
#include <stddef.h>

// A fault in C code that Go called: fatal to the Go runtime.
static void crash_in_c(void) { volatile int *p = NULL; *p = 1; }

// A fault on a thread Go knows nothing of: the Go runtime's handler
// forwards it to the handler it found (the host's, or the default).
static void *fault(void *ud) { (void)ud; volatile int *p = NULL; *p = 1; return NULL; }
static void crash_on_c_thread(void)
{
	pthread_t t;
	if (pthread_create(&t, NULL, fault, NULL) == 0)
		pthread_join(t, NULL);
}
*/
import "C"

import (
	"time"

	"toolhost"
)

func init() {
	toolhost.Register(toolhost.Plugin{
		Name:        "gocrash",
		Version:     "0.1.0",
		Description: "Test fixture: Go plugin tools that crash.",
		Tools: []toolhost.Tool{{
			Name:        "gocrash_go",
			Description: "Dereferences a nil pointer in Go (a panic: the call's error).",
			Run: func(c *toolhost.Call, a *toolhost.Args) error {
				var p *int
				*p = 1
				return nil
			},
		}, {
			Name:        "gocrash_cgo",
			Description: "Faults in C code called from Go (the Go runtime aborts).",
			Run:         func(c *toolhost.Call, a *toolhost.Args) error { C.crash_in_c(); return nil },
		}, {
			Name:        "gocrash_thread",
			Description: "Faults on a C thread of its own (forwarded to the host's handler).",
			Flags:       toolhost.ReadOnly, // run by check --strict
			Run:         func(c *toolhost.Call, a *toolhost.Args) error { C.crash_on_c_thread(); return nil },
		}, {
			Name:        "gocrash_backend",
			Description: "Fails as its backend's fault, not a crash (ABI 1.5): rate_limited, retry after 7 s.",
			Run: func(c *toolhost.Call, a *toolhost.Args) error {
				return &toolhost.BackendError{Status: toolhost.RateLimited,
					Message: "slow down", RetryAfter: 7 * time.Second}
			},
		}},
	})
}

func main() {}
