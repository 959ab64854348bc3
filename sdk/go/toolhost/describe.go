// describe.go - the C descriptor the host reads, built once from the
// registered Plugin in C memory that is never freed (a Go plugin is
// never unloaded, so the descriptor lives as long as the process).

package toolhost

/*
#include "shim.h"
*/
import "C"

import "unsafe"

// cstr is a C copy of s, or NULL for "" (a NULL string is "not given").
func cstr(s string) *C.char {
	if s == "" {
		return nil
	}
	return C.CString(s)
}

func calloc(n int, size uintptr) unsafe.Pointer {
	if n == 0 {
		return nil
	}
	return C.calloc(C.size_t(n), C.size_t(size))
}

func cparams(ps []Param) (*C.toolhost_param, C.uint32_t) {
	if len(ps) == 0 {
		return nil, 0
	}
	arr := (*[1 << 16]C.toolhost_param)(calloc(len(ps), C.sizeof_toolhost_param))[:len(ps):len(ps)]
	for i, p := range ps {
		c := &arr[i]
		c.struct_size = C.sizeof_toolhost_param
		c.name = cstr(p.Name)
		c._type = C.uint32_t(p.Type)
		if p.Required {
			c.required = 1
		}
		c.description = cstr(p.Description)
		if len(p.Enum) > 0 {
			ev := (*[1 << 16]*C.char)(calloc(len(p.Enum)+1, unsafe.Sizeof((*C.char)(nil))))[: len(p.Enum)+1 : len(p.Enum)+1]
			for k, v := range p.Enum {
				ev[k] = C.CString(v)
			}
			c.enum_values = &ev[0]
		}
		c.default_json = cstr(p.Default)
		c.item_type = C.uint32_t(p.Items)
		if p.Minimum != nil {
			c.minimum = C.double(*p.Minimum)
			c.bounds |= C.TOOLHOST_BOUND_MINIMUM
			if p.ExclusiveMinimum {
				c.bounds |= C.TOOLHOST_BOUND_EXCLUSIVE_MINIMUM
			}
		}
		if p.Maximum != nil {
			c.maximum = C.double(*p.Maximum)
			c.bounds |= C.TOOLHOST_BOUND_MAXIMUM
			if p.ExclusiveMaximum {
				c.bounds |= C.TOOLHOST_BOUND_EXCLUSIVE_MAXIMUM
			}
		}
		c.min_length = C.uint32_t(p.MinLength)
		c.max_length = C.uint32_t(p.MaxLength)
		c.min_items = C.uint32_t(p.MinItems)
		c.max_items = C.uint32_t(p.MaxItems)
		c.pattern = cstr(p.Pattern)
		c.schema_json = cstr(p.Schema)
	}
	return &arr[0], C.uint32_t(len(ps))
}

// build makes the descriptor of the registered plugin.  With nothing (or
// something wrong) registered, it is a plugin whose init() fails saying
// what is wrong: the entry point itself must not fail.
func build() *C.toolhost_plugin {
	regMu.Lock()
	p := reg
	bad := regErr
	regMu.Unlock()
	d := (*C.toolhost_plugin)(calloc(1, C.sizeof_toolhost_plugin))
	d.struct_size = C.sizeof_toolhost_plugin
	d.abi_major = C.TOOLHOST_ABI_MAJOR
	d.abi_minor = C.TOOLHOST_ABI_MINOR
	d.init = (*[0]byte)(C.thgo_c_init)
	d.fini = (*[0]byte)(C.thgo_c_fini)
	if p == nil {
		d.name = C.CString("go-plugin")
		d.description = C.CString("A Go plugin that registered nothing.")
		if bad == "" {
			bad = "no toolhost.Register call: the plugin's main package must register its Plugin from an init() function"
		}
		regMu.Lock()
		regErr = bad
		regMu.Unlock()
		return d
	}
	d.name = C.CString(p.Name)
	d.version = cstr(p.Version)
	d.description = cstr(p.Description)
	d.flags = C.uint64_t(p.Flags)
	d.config_params, d.n_config_params = cparams(p.Config)
	if n := len(p.Tools); n > 0 {
		arr := (*[1 << 16]C.toolhost_tool)(calloc(n, C.sizeof_toolhost_tool))[:n:n]
		for i := range p.Tools {
			t := &p.Tools[i]
			c := &arr[i]
			c.struct_size = C.sizeof_toolhost_tool
			c.name = cstr(t.Name)
			c.title = cstr(t.Title)
			c.description = cstr(t.Description)
			c.long_description = cstr(t.LongDescription)
			c.params, c.n_params = cparams(t.Params)
			out, errs := t.Stdout, t.Stderr
			if out == 0 {
				out = SemText
				if t.OutputSchema != "" {
					out = SemStructured
				}
			}
			if errs == 0 {
				errs = SemError
			}
			c.stdout_type = C.uint32_t(out)
			c.stderr_type = C.uint32_t(errs)
			c.flags = C.uint32_t(t.Flags)
			c.output_schema = cstr(t.OutputSchema)
			// ABI 1.5: the tags, NULL-terminated (the host checks them)
			if len(t.Tags) > 0 {
				tv := (*[1 << 16]*C.char)(calloc(len(t.Tags)+1, unsafe.Sizeof((*C.char)(nil))))[: len(t.Tags)+1 : len(t.Tags)+1]
				for k, v := range t.Tags {
					tv[k] = C.CString(v)
				}
				c.tags = &tv[0]
			}
			c.execute = (*[0]byte)(C.thgo_c_execute)
			if t.Validate != nil {
				c.validate_args = (*[0]byte)(C.thgo_c_validate)
			}
			// The tool's index + 1, for thgoExecute.
			C.thgo_tool_set_index(c, C.uintptr_t(i+1))
		}
		d.tools = &arr[0]
		d.n_tools = C.uint32_t(n)
	}
	return d
}

//export thgoDescribe
func thgoDescribe() unsafe.Pointer {
	descOnce.Do(func() { desc = build() })
	return unsafe.Pointer(desc)
}
