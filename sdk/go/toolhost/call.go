// call.go - one call of a tool: output, progress, cancellation, async
// completion from a goroutine; and the functions the C shim calls (the
// host's init, fini, execute and validate_args of every tool).

package toolhost

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// ErrCancelled is what writes return once the call is cancelled or past
// its deadline: stop soon (what the tool writes or returns is dropped).
var ErrCancelled = errors.New("toolhost: the call was cancelled or timed out")

// errPending is what Call.Go returns for Run to return: the call goes on.
// BackendStatus says whose fault a failure is when a tool's backend
// (a server, a service, a remote API) failed (ABI 1.5).
type BackendStatus int

const (
	// Unavailable: the backend is down, restarting or refusing work
	// (code "unavailable").
	Unavailable BackendStatus = C.TOOLHOST_UNAVAILABLE
	// BackendTimeout: it did not answer within the tool's own timeout
	// (code "backend_timeout").
	BackendTimeout BackendStatus = C.TOOLHOST_TIMEOUT
	// RateLimited: it said slow down, e.g. HTTP 429 (code "rate_limited").
	RateLimited BackendStatus = C.TOOLHOST_RATE_LIMITED
)

// BackendError, returned from Run (or from the function of Call.Go),
// fails the call as its backend's fault (ABI 1.5): the caller sees the
// code of Status, Message, and RetryAfter (0: no hint; cut at a day) as
// the hint of when to try again.  A host older than 1.5 gets a plain
// failure with the message.
type BackendError struct {
	Status     BackendStatus
	Message    string
	RetryAfter time.Duration
}

func (e *BackendError) Error() string { return e.Message }

var errPending = errors.New("toolhost: the call goes on in a goroutine (return the error of Call.Go from Run)")

// Call is one call of a tool.  It is owned by the goroutine that runs Run,
// or, after Go, by the goroutine Go started: use it from that goroutine
// only, and not after Run (or the function given to Go) returned.
type Call struct {
	c      *C.toolhost_call
	args   *Args
	err    callStderr
	ctx    context.Context // made by Context
	cancel context.CancelFunc
	id     uintptr // the key of cancels while ctx lives
}

// The contexts of the calls that asked for one, by id: the host's
// on_cancel callback finds its call here (it gets the id, never a Go
// pointer).
var (
	cancels  sync.Map // uintptr -> context.CancelFunc
	cancelID uintptr
)

//export thgoCancelled
func thgoCancelled(id C.uintptr_t) {
	if f, ok := cancels.Load(uintptr(id)); ok {
		f.(context.CancelFunc)()
	}
}

// Context is a context.Context that is cancelled when the call is
// cancelled or passes its deadline (the host's on_cancel callback: no
// polling), for code that selects on ctx.Done() or passes ctx on.  Ask
// for it in Run or in the goroutine of Go; it is cancelled too once the
// call ended.  With a host older than ABI 1.1 it is cancelled only when
// the call ends.
func (c *Call) Context() context.Context {
	if c.ctx != nil {
		return c.ctx
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.id = atomic.AddUintptr(&cancelID, 1)
	cancels.Store(c.id, c.cancel)
	C.thgo_on_cancel(c.c, C.uintptr_t(c.id))
	return c.ctx
}

// end: the call has ended (no host callback after this).
func (c *Call) end() {
	c.c = nil
	if c.ctx != nil {
		cancels.Delete(c.id)
		c.cancel()
	}
}

type callStderr struct{ c *Call }

func (e callStderr) Write(p []byte) (int, error) { return e.c.write(C.TOOLHOST_STDERR, p) }

func (c *Call) write(stream C.int, p []byte) (int, error) {
	if c.c == nil {
		return 0, errors.New("toolhost: the call has ended")
	}
	if len(p) == 0 {
		return 0, nil
	}
	switch C.thgo_write(c.c, stream, unsafe.Pointer(&p[0]), C.size_t(len(p))) {
	case 0:
		return len(p), nil
	case C.TOOLHOST_ECANCELLED:
		return 0, ErrCancelled
	default:
		return 0, errors.New("toolhost: the host refused the write")
	}
}

// ID is the call's id, unique within the host process.
func (c *Call) ID() uint64 { return uint64(c.c.call_id) }

// Write appends p to the call's stdout (Call is an io.Writer: fmt.Fprintf
// works).  The host copies the bytes.
func (c *Call) Write(p []byte) (int, error) { return c.write(C.TOOLHOST_STDOUT, p) }

// Print appends s to stdout.
func (c *Call) Print(s string) error {
	_, err := io.WriteString(c, s)
	return err
}

// Printf formats to stdout.
func (c *Call) Printf(format string, v ...interface{}) error {
	_, err := fmt.Fprintf(c, format, v...)
	return err
}

// Stderr is the call's stderr: what a model reads when the call fails.
func (c *Call) Stderr() io.Writer { return c.err }

// JSON writes v as one JSON value to stdout: the structured output of a
// tool with an OutputSchema.
func (c *Call) JSON(v interface{}) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("toolhost: encoding the output: %w", err)
	}
	_, err = c.Write(b)
	return err
}

// SetMeta sets the call's meta map (replacing an earlier one), encoded
// with msgpack.
func (c *Call) SetMeta(meta map[string]interface{}) error {
	b, err := msgpack.Marshal(meta)
	if err != nil {
		return fmt.Errorf("toolhost: encoding meta: %w", err)
	}
	if C.thgo_set_meta(c.c, unsafe.Pointer(&b[0]), C.size_t(len(b))) != 0 {
		return errors.New("toolhost: the host refused the meta map")
	}
	return nil
}

// Progress reports progress: fraction in [0, 1], or negative when
// unknown.  For an async tool the first update acknowledges the call.
func (c *Call) Progress(fraction float64, message string) error {
	var cm *C.char
	if message != "" {
		cm = C.CString(message)
		defer C.free(unsafe.Pointer(cm))
	}
	switch C.thgo_progress(c.c, C.double(fraction), cm) {
	case 0:
		return nil
	case C.TOOLHOST_ECANCELLED:
		return ErrCancelled
	default:
		return errors.New("toolhost: the host refused the progress update")
	}
}

// Cancelled reports whether the call was cancelled or passed its
// deadline: then stop soon and return.
func (c *Call) Cancelled() bool { return C.thgo_is_cancelled(c.c) != 0 }

// TimeLeft is the time before the call's deadline, or -1 without one.
func (c *Call) TimeLeft() time.Duration {
	ms := int64(C.thgo_time_left_ms(c.c))
	if ms < 0 {
		return -1
	}
	return time.Duration(ms) * time.Millisecond
}

// Sleep waits d, or less when the call is cancelled meanwhile (it looks
// every 10 ms; select on Context().Done() to be told at once).  It returns
// false when the call is cancelled.
func (c *Call) Sleep(d time.Duration) bool {
	end := time.Now().Add(d)
	for !c.Cancelled() {
		left := time.Until(end)
		if left <= 0 {
			return true
		}
		if left > 10*time.Millisecond {
			left = 10 * time.Millisecond
		}
		time.Sleep(left)
	}
	return false
}

// Log writes one line to the host's log, tagged with the plugin and the
// call id.
func (c *Call) Log(level int, msg string) {
	cs := C.CString(msg)
	C.thgo_log_call(c.c, C.int(level), cs)
	C.free(unsafe.Pointer(cs))
}

// Go goes on with the call in a new goroutine: Run must return what Go
// returns.  fn owns the call until it returns (its error fails the call as
// Run's would); its return completes the call.  The worker thread of the
// host is free as soon as Run returns.  The arguments stay readable in fn
// (they are copied first).  The goroutine keeps to one OS thread
// (runtime.LockOSThread): the host's calls of an async call come from one
// thread.  If the host cannot suspend the call, Go returns an error and
// fn does not run.
func (c *Call) Go(fn func(c *Call) error) error {
	if c.args != nil {
		c.args.detach()
	}
	if C.thgo_suspend(c.c) != 0 {
		return errors.New("toolhost: the call cannot be suspended (Go called twice?)")
	}
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		st := c.run(func() error { return fn(c) })
		call := c.c
		if c.ctx != nil {
			cancels.Delete(c.id) // on_cancel never runs after the end
		}
		C.thgo_complete(call, st)
		c.end()
	}()
	return errPending
}

// run runs f: nil is TOOLHOST_OK; an error, or a panic, is written to
// stderr and is TOOLHOST_FAILED; errPending is TOOLHOST_PENDING.
func (c *Call) run(f func() error) (st C.int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(c.err, "panic: %v\n", r)
			st = C.TOOLHOST_FAILED
		}
	}()
	err := f()
	switch {
	case err == nil:
		return C.TOOLHOST_OK
	case err == errPending:
		return C.TOOLHOST_PENDING
	case err == ErrCancelled:
		return C.TOOLHOST_FAILED
	}
	msg := err.Error()
	if len(msg) == 0 || msg[len(msg)-1] != '\n' {
		msg += "\n"
	}
	io.WriteString(c.err, msg)
	var be *BackendError
	if errors.As(err, &be) {
		ms := be.RetryAfter.Milliseconds()
		if ms < 0 {
			ms = 0
		}
		return C.thgo_backend(c.c, C.int(be.Status), C.uint64_t(ms))
	}
	return C.TOOLHOST_FAILED
}

// putMsg copies msg, NUL-terminated, into the host's buffer.
func putMsg(buf *C.char, size C.size_t, msg string) {
	if buf == nil || size == 0 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(size))
	n := copy(b[:len(b)-1], msg)
	b[n] = 0
}

func toolAt(index C.uintptr_t) *Tool {
	i := int(index) - 1
	if reg == nil || i < 0 || i >= len(reg.Tools) {
		return nil
	}
	return &reg.Tools[i]
}

//export thgoExecute
func thgoExecute(tool C.uintptr_t, call *C.toolhost_call, args unsafe.Pointer, n C.size_t) C.int {
	c := &Call{c: call}
	c.err.c = c
	t := toolAt(tool)
	if t == nil || t.Run == nil {
		io.WriteString(c.err, "toolhost: this Go tool has no Run function\n")
		return C.TOOLHOST_FAILED
	}
	c.args = newArgs(call, args, n)
	st := c.run(func() error { return t.Run(c, c.args) })
	if st != C.TOOLHOST_PENDING {
		c.end() // the call ends as execute() returns
	}
	return st
}

//export thgoValidate
func thgoValidate(tool C.uintptr_t, args unsafe.Pointer, n C.size_t, buf *C.char, size C.size_t) (rc C.int) {
	t := toolAt(tool)
	if t == nil || t.Validate == nil {
		return 0
	}
	defer func() {
		if r := recover(); r != nil {
			putMsg(buf, size, fmt.Sprintf("panic in Validate: %v", r))
			rc = 1
		}
	}()
	if err := t.Validate(newArgs(nil, args, n)); err != nil {
		putMsg(buf, size, err.Error())
		return 1
	}
	return 0
}

//export thgoInit
func thgoInit(host unsafe.Pointer, config unsafe.Pointer, n C.size_t, buf *C.char, size C.size_t) (rc C.int) {
	hostAPI = (*C.toolhost_host_api)(host)
	regMu.Lock()
	p, bad := reg, regErr
	regMu.Unlock()
	if bad != "" {
		putMsg(buf, size, bad)
		return 1
	}
	if p.Init == nil {
		return 0
	}
	defer func() {
		if r := recover(); r != nil {
			putMsg(buf, size, fmt.Sprintf("panic in Init: %v", r))
			rc = 1
		}
	}()
	if err := p.Init(newArgs(nil, config, n)); err != nil {
		putMsg(buf, size, err.Error())
		return 1
	}
	return 0
}

//export thgoFini
func thgoFini() {
	if reg != nil && reg.Fini != nil {
		defer func() {
			if r := recover(); r != nil {
				Log(LogError, fmt.Sprintf("panic in Fini: %v", r))
			}
		}()
		reg.Fini()
	}
}
