// echo - the smallest toolhost plugin in Go: the tool `echo` writes its
// text argument to stdout unchanged (the contract of plugins/echo).
package main

import "toolhost"

func echo(c *toolhost.Call, a *toolhost.Args) error {
	return c.Print(a.String("text"))
}

func init() {
	toolhost.Register(toolhost.Plugin{
		Name:        "echo",
		Version:     "0.1.0",
		Description: "Echo, written in Go with the toolhost Go SDK.",
		Tools: []toolhost.Tool{{
			Name:            "echo",
			Description:     "Writes the given text to stdout, unchanged.",
			LongDescription: "Returns `text` exactly as given; useful to test a connection.",
			Params: []toolhost.Param{{
				Name: "text", Type: toolhost.String, Required: true,
				Description: "The text to write back.",
			}},
			Flags: toolhost.ReadOnly | toolhost.Idempotent | toolhost.Short,
			Run:   echo,
		}},
	})
}

func main() {}
