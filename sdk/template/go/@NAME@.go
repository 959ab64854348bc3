// @NAME@ - the @NAME@ toolhost plugin, in Go.
package main

import "toolhost"

// hello runs on a host worker thread, concurrently with other calls; the
// host validated the arguments (defaults filled in) before.
func hello(c *toolhost.Call, a *toolhost.Args) error {
	name, times := a.String("name"), a.Int("times")
	for i := int64(0); i < times && !c.Cancelled(); i++ {
		if err := c.Printf("hello, %s\n", name); err != nil {
			return err
		}
	}
	return nil
}

func init() {
	toolhost.Register(toolhost.Plugin{
		Name:        "@NAME@",
		Version:     "0.1.0",
		Description: "The @NAME@ plugin.",
		Tools: []toolhost.Tool{{
			Name:        "@NAME@_hello",
			Description: "Greets someone.",
			Params: []toolhost.Param{
				{Name: "name", Type: toolhost.String, Default: `"world"`,
					Description: "Who to greet."},
				{Name: "times", Type: toolhost.Integer, Default: "1",
					Minimum: toolhost.Num(1), Maximum: toolhost.Num(100),
					Description: "How many greetings."},
			},
			Flags: toolhost.ReadOnly | toolhost.Idempotent,
			Run:   hello,
		}},
	})
}

// main is not run: the plugin is a shared object (-buildmode=c-shared).
func main() {}
