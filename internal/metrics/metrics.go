// Package metrics writes CloudWatch embedded metric format (EMF) lines: one
// JSON object per line on the function's output, which CloudWatch Logs turns
// into metrics without any API call from the function. An Entry holds one
// invocation's metrics; Validate checks a line against the format's
// specification.
package metrics

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"time"
)

// Namespace is the CloudWatch namespace of node-drainer's metrics.
const Namespace = "NodeDrainer"

// Unit is a CloudWatch metric unit.
type Unit string

// The units node-drainer uses.
const (
	Count   Unit = "Count"
	Seconds Unit = "Seconds"
)

// Dimension is one dimension's name and value.
type Dimension struct{ Name, Value string }

// Entry is one EMF document: its directives, and the values of their
// dimensions and metrics (top-level members).
type Entry struct {
	namespace  string
	directives []*Directive
	values     map[string]any
}

// Directive is a set of metrics sharing dimension sets.
type Directive struct {
	e       *Entry
	sets    [][]string
	metrics []definition
}

type definition struct {
	Name string `json:"Name"`
	Unit Unit   `json:"Unit,omitempty"`
}

// New returns an empty Entry in namespace.
func New(namespace string) *Entry {
	return &Entry{namespace: namespace, values: map[string]any{}}
}

// Directive adds a directive whose metrics are published once per dimension
// set given; each dimension's value becomes a top-level member.
func (e *Entry) Directive(sets ...[]Dimension) *Directive {
	d := &Directive{e: e}
	for _, set := range sets {
		names := make([]string, 0, len(set))
		for _, dim := range set {
			names = append(names, dim.Name)
			e.values[dim.Name] = dim.Value
		}
		d.sets = append(d.sets, names)
	}
	e.directives = append(e.directives, d)
	return d
}

// Put sets a metric's value (a metric of the same name is replaced: names
// are top-level members, one value each).
func (d *Directive) Put(name string, unit Unit, v float64) *Directive {
	i := slices.IndexFunc(d.metrics, func(m definition) bool { return m.Name == name })
	if i < 0 {
		d.metrics = append(d.metrics, definition{Name: name, Unit: unit})
	}
	d.e.values[name] = v
	return d
}

// Property sets a top-level member that is neither a dimension nor a metric
// (searchable in CloudWatch Logs Insights, not a metric).
func (e *Entry) Property(name string, v any) { e.values[name] = v }

// JSON is the document at time now; directives without metrics are left out.
func (e *Entry) JSON(now time.Time) ([]byte, error) {
	type directive struct {
		Namespace  string       `json:"Namespace"`
		Dimensions [][]string   `json:"Dimensions"`
		Metrics    []definition `json:"Metrics"`
	}
	var ds []directive
	for _, d := range e.directives {
		if len(d.metrics) == 0 {
			continue
		}
		sets := d.sets
		if sets == nil {
			sets = [][]string{}
		}
		ds = append(ds, directive{Namespace: e.namespace, Dimensions: sets, Metrics: d.metrics})
	}
	doc := make(map[string]any, len(e.values)+1)
	for k, v := range e.values {
		doc[k] = v
	}
	doc["_aws"] = map[string]any{"Timestamp": now.UnixMilli(), "CloudWatchMetrics": ds}
	return json.Marshal(doc)
}

// Write writes the document as one line.
func (e *Entry) Write(w io.Writer, now time.Time) error {
	b, err := e.JSON(now)
	if err != nil {
		return fmt.Errorf("encoding metrics: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("writing metrics: %w", err)
	}
	return nil
}
