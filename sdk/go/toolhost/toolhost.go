// Package toolhost writes toolhost plugins in Go: a plugin is a program
// built with -buildmode=c-shared whose init() registers one Plugin (name,
// version, description, tools with their parameters, constraints, output
// schema and flags).  The package supplies the entry point the host looks
// up (toolhost_plugin_v1), decodes each call's msgpack arguments
// (github.com/vmihailenco/msgpack/v5) and gives the tool a *Call to write
// stdout and stderr, report progress, check for cancellation and complete
// an async call from a goroutine.
//
// Build a plugin with the SDK's version script so that the entry point is
// the only exported symbol (sdk/go/README.md):
//
//	go build -buildmode=c-shared \
//	  -ldflags=-extldflags=-Wl,--version-script=DIR/toolhost.map -o x.so .
//
// One Go runtime per process: the host loads at most one Go plugin per
// process and never unloads it (see sdk/go/README.md for what reload means).
package toolhost

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"regexp"
	"sync"
	"unsafe"
)

// Type is a parameter's JSON Schema type.
type Type uint32

const (
	String  Type = C.TOOLHOST_TYPE_STRING
	Integer Type = C.TOOLHOST_TYPE_INTEGER
	Number  Type = C.TOOLHOST_TYPE_NUMBER
	Boolean Type = C.TOOLHOST_TYPE_BOOLEAN
	Array   Type = C.TOOLHOST_TYPE_ARRAY
	Object  Type = C.TOOLHOST_TYPE_OBJECT
)

// Semantic says what an output stream holds; the host sizes and trims
// each stream by it.
type Semantic uint32

const (
	SemText          Semantic = C.TOOLHOST_SEM_TEXT
	SemStatus        Semantic = C.TOOLHOST_SEM_STATUS
	SemError         Semantic = C.TOOLHOST_SEM_ERROR
	SemFileContent   Semantic = C.TOOLHOST_SEM_FILE_CONTENT
	SemFileView      Semantic = C.TOOLHOST_SEM_FILE_VIEW
	SemCommandOutput Semantic = C.TOOLHOST_SEM_COMMAND_OUTPUT
	SemSearchResults Semantic = C.TOOLHOST_SEM_SEARCH_RESULTS
	SemKnowledge     Semantic = C.TOOLHOST_SEM_KNOWLEDGE
	SemStructured    Semantic = C.TOOLHOST_SEM_STRUCTURED
	SemLog           Semantic = C.TOOLHOST_SEM_LOG
	SemDiff          Semantic = C.TOOLHOST_SEM_DIFF
	SemBinary        Semantic = C.TOOLHOST_SEM_BINARY
)

// Flags of a tool (ToolFlag bits, or-ed).
type ToolFlag uint32

const (
	Async       ToolFlag = C.TOOLHOST_TOOL_ASYNC
	ReadOnly    ToolFlag = C.TOOLHOST_TOOL_READ_ONLY
	Destructive ToolFlag = C.TOOLHOST_TOOL_DESTRUCTIVE
	Idempotent  ToolFlag = C.TOOLHOST_TOOL_IDEMPOTENT
	OpenWorld   ToolFlag = C.TOOLHOST_TOOL_OPEN_WORLD
	Serial      ToolFlag = C.TOOLHOST_TOOL_SERIAL
	Short       ToolFlag = C.TOOLHOST_TOOL_SHORT
)

// Flags of a plugin.
type PluginFlag uint64

const (
	PluginSerial          PluginFlag = C.TOOLHOST_PLUGIN_SERIAL
	PluginExclusiveReload PluginFlag = C.TOOLHOST_PLUGIN_EXCLUSIVE_RELOAD
)

// Log levels of Log and Call.Log.
const (
	LogError = C.TOOLHOST_LOG_ERROR
	LogWarn  = C.TOOLHOST_LOG_WARN
	LogInfo  = C.TOOLHOST_LOG_INFO
	LogDebug = C.TOOLHOST_LOG_DEBUG
)

// Param declares one parameter of a tool (or one key of the plugin's
// config block).  The host validates every call against it before Run:
// a tool never sees a missing required parameter, a wrong type, a value
// out of bounds, a string that does not match Pattern or Enum.
type Param struct {
	Name        string // ^[a-zA-Z_][a-zA-Z0-9_]{0,63}$
	Type        Type
	Required    bool
	Description string   // one line a model can act on
	Enum        []string // String only: the allowed values
	Default     string   // JSON text ("3", "true", `"utf-8"`); not with Required
	Items       Type     // Array only: the type of the elements (0: any)

	Minimum, Maximum *float64 // Integer, Number: bounds (see Num)
	ExclusiveMinimum bool     // Minimum itself is out
	ExclusiveMaximum bool     // Maximum itself is out
	MinLength        uint32   // String: code points
	MaxLength        uint32   // String: code points, 0 = none
	MinItems         uint32   // Array
	MaxItems         uint32   // Array, 0 = none
	Pattern          string   // String: a PCRE2 pattern, not anchored
	Schema           string   // Object, Array: a JSON Schema the value must match
}

// Num gives a bound for Param.Minimum and Param.Maximum.
func Num(v float64) *float64 { return &v }

// Tool declares one tool.
type Tool struct {
	Name            string // ^[a-zA-Z0-9_-]{1,64}$, starts with the plugin's name
	Title           string // a short human name, optional
	Description     string // one line; required
	LongDescription string // usage, warnings, examples; optional
	Params          []Param
	Stdout, Stderr  Semantic // 0: SemText and SemError
	Flags           ToolFlag
	// OutputSchema: a JSON Schema (text) that stdout matches when the
	// call succeeds; Stdout must then be SemStructured (the default
	// when OutputSchema is set).  The host checks it at the call's end.
	OutputSchema string
	// Tags (ABI 1.5): names operators' toolsets select the tool by (and
	// disable it by), each ^[a-z0-9][a-z0-9_-]{0,31}$, at most 16; the
	// host refuses the plugin at load when one is not.
	Tags []string
	// Run runs one call (on a host worker thread, concurrently with
	// other calls unless Serial).  A nil error is success; an error is
	// written to stderr and the call fails.  Return c.Go(...) to go on
	// in a goroutine (an async tool).
	Run func(c *Call, a *Args) error
	// Validate, optional: checks what the parameter table cannot
	// express; an error is shown to the caller (a model) as is.
	Validate func(a *Args) error
}

// Plugin declares the plugin: register exactly one, from an init().
type Plugin struct {
	Name        string // ^[a-zA-Z0-9_-]{1,64}$
	Version     string
	Description string
	Flags       PluginFlag
	Config      []Param // the keys of the plugin's config block
	Tools       []Tool
	// Init, optional: runs once when the host loads the plugin, with
	// the validated config block (defaults filled in; valid while Init
	// runs: keep what the getters return, not the Args).  An error
	// stops the load with its message.
	Init func(config *Args) error
	// Fini, optional: runs once after the last call ended.  Goroutines
	// that run plugin code must have finished before it returns.
	Fini func()
}

var (
	regMu    sync.Mutex
	reg      *Plugin
	regErr   string
	descOnce sync.Once
	desc     *C.toolhost_plugin
	hostAPI  *C.toolhost_host_api
)

var nameRe = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Register declares the plugin.  Call it once, from an init() function of
// the plugin's main package (the host asks for the descriptor after the
// Go runtime ran every init()).  A second call, or a plugin without a
// valid name, makes the plugin fail to load with a message that says so.
func Register(p Plugin) {
	regMu.Lock()
	defer regMu.Unlock()
	switch {
	case reg != nil:
		regErr = fmt.Sprintf("toolhost.Register called twice (%q, then %q): a Go plugin registers one Plugin", reg.Name, p.Name)
	case !nameRe.MatchString(p.Name):
		regErr = fmt.Sprintf("toolhost.Register: plugin name %q is not valid (letters, digits, _ and -, 1 to 64)", p.Name)
	default:
		cp := p
		cp.Tools = append([]Tool(nil), p.Tools...)
		reg = &cp
	}
}

// Log writes one line to the host's log under the plugin's name (after
// the host loaded the plugin; before that, to stderr).
func Log(level int, msg string) {
	if hostAPI == nil {
		fmt.Fprintf(os.Stderr, "toolhost plugin: %s\n", msg)
		return
	}
	cs := C.CString(msg)
	C.thgo_log(hostAPI, C.int(level), cs)
	C.free(unsafe.Pointer(cs))
}
