// args.go - a call's arguments: the msgpack map the host validated
// (defaults filled in), read through the host's decoded view when it
// gives one (ABI 1.2: no decoding at all for scalars), else decoded once
// with github.com/vmihailenco/msgpack/v5.

package toolhost

/*
#include "shim.h"
*/
import "C"

import (
	"bytes"
	"fmt"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// Args are the arguments of one call.  The getters return copies; an
// Args is valid while Run runs, and in the goroutine of Call.Go (which
// copies the bytes before Run returns).
type Args struct {
	data []byte                 // the map (host memory until detached)
	view *C.toolhost_args_view  // the host's decoded view, or nil
	m    map[string]interface{} // decoded on first need
	err  error
}

func newArgs(call *C.toolhost_call, p unsafe.Pointer, n C.size_t) *Args {
	a := &Args{data: unsafe.Slice((*byte)(p), int(n))}
	if call != nil {
		a.view = C.thgo_view(call, (*C.uint8_t)(p), n)
	}
	return a
}

// detach copies the bytes into Go memory: the host's are gone once
// execute() returned.
func (a *Args) detach() {
	a.data = append([]byte(nil), a.data...)
	a.view = nil
}

func (a *Args) arg(name string) *C.toolhost_arg {
	if a.view == nil {
		return nil
	}
	for i := C.uint32_t(0); i < a.view.n_args; i++ {
		e := C.thgo_view_arg(a.view, i)
		if int(e.name_len) == len(name) &&
			string(unsafe.Slice((*byte)(unsafe.Pointer(e.name)), int(e.name_len))) == name {
			return e
		}
	}
	return nil
}

func (a *Args) decode() map[string]interface{} {
	if a.m == nil && a.err == nil {
		d := msgpack.NewDecoder(bytes.NewReader(a.data))
		d.UseLooseInterfaceDecoding(true) // int64, uint64, float64
		a.m, a.err = d.DecodeMap()
		if a.err != nil {
			a.err = fmt.Errorf("arguments are not a msgpack map: %w", a.err)
		}
	}
	return a.m
}

// Err says why the arguments could not be decoded (nil when they could).
func (a *Args) Err() error { a.decode(); return a.err }

// Has reports whether the argument is present (given, or filled from its
// default).
func (a *Args) Has(name string) bool {
	if a.view != nil {
		return a.arg(name) != nil
	}
	_, ok := a.decode()[name]
	return ok
}

// Get is the argument decoded loosely: nil, bool, int64, uint64, float64,
// string, []byte, []interface{} or map[string]interface{}.
func (a *Args) Get(name string) (interface{}, bool) {
	v, ok := a.decode()[name]
	return v, ok
}

// String is a string argument ("" when absent or not a string).
func (a *Args) String(name string) string {
	if a.view != nil {
		if e := a.arg(name); e != nil && e._type == C.TOOLHOST_VALUE_STR {
			return C.GoStringN((*C.char)(unsafe.Pointer(e.bytes)), C.int(e.len))
		}
		return ""
	}
	s, _ := a.decode()[name].(string)
	return s
}

// Int is an integer argument (0 when absent or not an integer).
func (a *Args) Int(name string) int64 {
	if a.view != nil {
		if e := a.arg(name); e != nil {
			switch e._type {
			case C.TOOLHOST_VALUE_UINT:
				return int64(e.u)
			case C.TOOLHOST_VALUE_INT:
				return int64(e.i)
			}
		}
		return 0
	}
	switch v := a.decode()[name].(type) {
	case int64:
		return v
	case uint64:
		return int64(v)
	}
	return 0
}

// Float is a number argument (an integer is converted; 0 when absent).
func (a *Args) Float(name string) float64 {
	if a.view != nil {
		if e := a.arg(name); e != nil {
			switch e._type {
			case C.TOOLHOST_VALUE_FLOAT:
				return float64(e.f)
			case C.TOOLHOST_VALUE_UINT:
				return float64(e.u)
			case C.TOOLHOST_VALUE_INT:
				return float64(e.i)
			}
		}
		return 0
	}
	switch v := a.decode()[name].(type) {
	case float64:
		return v
	case int64:
		return float64(v)
	case uint64:
		return float64(v)
	}
	return 0
}

// Bool is a boolean argument (false when absent).
func (a *Args) Bool(name string) bool {
	if a.view != nil {
		e := a.arg(name)
		return e != nil && e._type == C.TOOLHOST_VALUE_BOOL && e.i != 0
	}
	b, _ := a.decode()[name].(bool)
	return b
}

// Decode decodes the whole map into v, a pointer to a struct whose
// fields carry `msgpack:"name"` tags (or to a map), with msgpack.
func (a *Args) Decode(v interface{}) error {
	if err := msgpack.Unmarshal(a.data, v); err != nil {
		return fmt.Errorf("arguments: %w", err)
	}
	return nil
}

// Raw is a copy of the arguments as msgpack.
func (a *Args) Raw() []byte { return append([]byte(nil), a.data...) }
