// tools - two toolhost tools in Go, one plugin (a process holds one Go
// runtime, so a host loads one Go plugin: put a plugin's tools together).
//
//	gotools_countdown  async: acknowledges with its first progress update,
//	                   goes on in a goroutine, reports each step, stops
//	                   when cancelled
//	gotools_stats      constrained parameters (array size, bounds, enum,
//	                   pattern) and structured output (an output schema)
package main

import (
	"fmt"
	"math"
	"time"

	"toolhost"
)

func countdown(c *toolhost.Call, a *toolhost.Args) error {
	steps, delay := a.Int("steps"), time.Duration(a.Int("delay_ms"))*time.Millisecond
	return c.Go(func(c *toolhost.Call) error {
		done := c.Context().Done() // closed when the call is cancelled
		for i := int64(1); i <= steps; i++ {
			if err := c.Progress(float64(i-1)/float64(steps), fmt.Sprintf("step %d of %d", i, steps)); err != nil {
				return err
			}
			select {
			case <-time.After(delay):
			case <-done:
				c.Log(toolhost.LogInfo, fmt.Sprintf("gotools_countdown: cancelled at step %d", i))
				return toolhost.ErrCancelled
			}
		}
		return c.Printf("done after %d steps\n", steps)
	})
}

type stats struct {
	Label string  `json:"label"`
	Count int     `json:"count"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	Mean  float64 `json:"mean"`
	Sum   float64 `json:"sum"`
}

func summarize(c *toolhost.Call, a *toolhost.Args) error {
	var in struct {
		Values    []float64 `msgpack:"values"`
		Precision int       `msgpack:"precision"`
		Label     string    `msgpack:"label"`
	}
	if err := a.Decode(&in); err != nil {
		return err
	}
	s := stats{Label: in.Label, Count: len(in.Values), Min: math.Inf(1), Max: math.Inf(-1)}
	for _, v := range in.Values {
		s.Min, s.Max, s.Sum = math.Min(s.Min, v), math.Max(s.Max, v), s.Sum+v
	}
	scale := math.Pow(10, float64(in.Precision))
	round := func(v float64) float64 { return math.Round(v*scale) / scale }
	s.Mean = round(s.Sum / float64(s.Count))
	s.Min, s.Max, s.Sum = round(s.Min), round(s.Max), round(s.Sum)
	return c.JSON(s)
}

func noNaN(a *toolhost.Args) error {
	v, _ := a.Get("values")
	for i, x := range v.([]interface{}) {
		if f, ok := x.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return fmt.Errorf("values[%d] is not a finite number: give finite numbers only", i)
		}
	}
	return nil
}

const statsSchema = `{"type": "object",
 "properties": {"label": {"type": "string"}, "count": {"type": "integer", "minimum": 1},
  "min": {"type": "number"}, "max": {"type": "number"}, "mean": {"type": "number"},
  "sum": {"type": "number"}},
 "required": ["label", "count", "min", "max", "mean", "sum"],
 "additionalProperties": false}`

func init() {
	toolhost.Register(toolhost.Plugin{
		Name:        "gotools",
		Version:     "0.1.0",
		Description: "Examples of the toolhost Go SDK: an async tool and a structured one.",
		Tools: []toolhost.Tool{{
			Name:        "gotools_countdown",
			Title:       "Count down",
			Description: "Counts `steps` steps of `delay_ms` each, reporting progress; cancellable.",
			LongDescription: "Runs in the background: the call is acknowledged at the first step, " +
				"each step is a progress update, the result says how many steps ran.",
			Params: []toolhost.Param{
				{Name: "steps", Type: toolhost.Integer, Default: "5", Minimum: toolhost.Num(1),
					Maximum: toolhost.Num(1000), Description: "How many steps (1 to 1000)."},
				{Name: "delay_ms", Type: toolhost.Integer, Default: "50", Minimum: toolhost.Num(0),
					Maximum: toolhost.Num(60000), Description: "Milliseconds per step."},
			},
			Flags: toolhost.Async | toolhost.ReadOnly,
			Run:   countdown,
		}, {
			Name:        "gotools_stats",
			Title:       "Summary statistics",
			Description: "Count, min, max, mean and sum of a list of numbers, as JSON.",
			LongDescription: "## Example\n{\"values\": [1, 2, 3.5], \"precision\": 1} gives " +
				"{\"label\":\"values\",\"count\":3,\"min\":1,\"max\":3.5,\"mean\":2.2,\"sum\":6.5}",
			Params: []toolhost.Param{
				{Name: "values", Type: toolhost.Array, Items: toolhost.Number, Required: true,
					MinItems: 1, MaxItems: 10000, Description: "The numbers (1 to 10000)."},
				{Name: "precision", Type: toolhost.Integer, Default: "2", Minimum: toolhost.Num(0),
					Maximum: toolhost.Num(6), Description: "Decimals kept in the results (0 to 6)."},
				{Name: "label", Type: toolhost.String, Default: `"values"`, MaxLength: 32,
					Pattern: "^[a-z][a-z0-9_]*$", Description: "A name for the series (lowercase, digits, _)."},
			},
			OutputSchema: statsSchema,
			Tags:         []string{"math", "read-only"},
			Flags:        toolhost.ReadOnly | toolhost.Idempotent,
			Run:          summarize,
			Validate:     noNaN,
		}},
	})
}

func main() {}
