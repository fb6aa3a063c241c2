package metrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// units are the units the specification allows in a MetricDefinition.
var units = []string{
	"Seconds", "Microseconds", "Milliseconds", "Bytes", "Kilobytes", "Megabytes", "Gigabytes", "Terabytes",
	"Bits", "Kilobits", "Megabits", "Gigabits", "Terabits", "Percent", "Count",
	"Bytes/Second", "Kilobytes/Second", "Megabytes/Second", "Gigabytes/Second", "Terabytes/Second",
	"Bits/Second", "Kilobits/Second", "Megabits/Second", "Gigabits/Second", "Terabits/Second", "Count/Second", "None",
}

// Validate checks one line against the CloudWatch embedded metric format
// specification: a JSON object (nothing before or after it) whose "_aws"
// metadata object holds a Timestamp (a number, milliseconds since the epoch)
// and CloudWatchMetrics, an array of MetricDirective objects; each directive
// has a Namespace (1-255 characters), Dimensions (an array of DimensionSets,
// arrays of at most 30 strings, each naming a top-level member whose value
// is a string) and Metrics (at most 100 MetricDefinitions: a Name, 1-255
// characters, naming a top-level member whose value is a number or an array
// of at most 100 numbers, an optional Unit among the allowed ones and an
// optional StorageResolution of 1 or 60). The objects the specification
// defines have no other members.
func Validate(line []byte) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var root map[string]json.RawMessage
	if err := dec.Decode(&root); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if dec.More() {
		return errors.New("data after the JSON object")
	}
	var meta map[string]json.RawMessage
	if err := strict(root["_aws"], &meta, "_aws"); err != nil {
		return err
	}
	if err := only(meta, "_aws", "Timestamp", "CloudWatchMetrics"); err != nil {
		return err
	}
	var ts json.Number
	if err := number(meta["Timestamp"], &ts, "_aws.Timestamp"); err != nil {
		return err
	}
	if ms, err := ts.Int64(); err != nil || ms <= 0 {
		return fmt.Errorf("_aws.Timestamp %s: want milliseconds since the epoch", ts)
	}
	var directives []map[string]json.RawMessage
	if err := strict(meta["CloudWatchMetrics"], &directives, "_aws.CloudWatchMetrics"); err != nil {
		return err
	}
	if len(directives) == 0 {
		return errors.New("_aws.CloudWatchMetrics: no MetricDirective")
	}
	var errs []error
	for i, d := range directives {
		errs = append(errs, directiveErr(root, d, fmt.Sprintf("_aws.CloudWatchMetrics[%d]", i)))
	}
	return errors.Join(errs...)
}

// directiveErr returns what is wrong with the MetricDirective d at at (nil
// when nothing is): its members, Namespace, DimensionSets and definitions.
func directiveErr(root, d map[string]json.RawMessage, at string) error {
	if err := only(d, at, "Namespace", "Dimensions", "Metrics"); err != nil {
		return err
	}
	var errs []error
	var ns string
	if err := strict(d["Namespace"], &ns, at+".Namespace"); err != nil {
		errs = append(errs, err)
	} else if len(ns) == 0 || len(ns) > 255 {
		errs = append(errs, fmt.Errorf("%s.Namespace %q: want 1-255 characters", at, ns))
	}
	var sets [][]string
	if err := strict(d["Dimensions"], &sets, at+".Dimensions"); err != nil {
		errs = append(errs, err)
	}
	for j, set := range sets {
		if len(set) > 30 {
			errs = append(errs, fmt.Errorf("%s.Dimensions[%d]: %d dimensions, at most 30", at, j, len(set)))
		}
		for _, name := range set {
			var v string
			if err := strict(root[name], &v, "dimension "+name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	var defs []map[string]json.RawMessage
	if err := strict(d["Metrics"], &defs, at+".Metrics"); err != nil {
		errs = append(errs, err)
	}
	if len(defs) > 100 {
		errs = append(errs, fmt.Errorf("%s.Metrics: %d definitions, at most 100", at, len(defs)))
	}
	for j, def := range defs {
		errs = append(errs, definitionErr(root, def, fmt.Sprintf("%s.Metrics[%d]", at, j)))
	}
	return errors.Join(errs...)
}

func definitionErr(root, def map[string]json.RawMessage, at string) error {
	if err := only(def, at, "Name", "Unit", "StorageResolution"); err != nil {
		return err
	}
	var name string
	if err := strict(def["Name"], &name, at+".Name"); err != nil {
		return err
	}
	if len(name) == 0 || len(name) > 255 {
		return fmt.Errorf("%s.Name %q: want 1-255 characters", at, name)
	}
	if raw, ok := def["Unit"]; ok {
		var u string
		if err := strict(raw, &u, at+".Unit"); err != nil {
			return err
		}
		if !slices.Contains(units, u) {
			return fmt.Errorf("%s.Unit %q: not a CloudWatch unit", at, u)
		}
	}
	if raw, ok := def["StorageResolution"]; ok {
		var r json.Number
		if err := number(raw, &r, at+".StorageResolution"); err != nil {
			return err
		}
		if r != "1" && r != "60" {
			return fmt.Errorf("%s.StorageResolution %s: want 1 or 60", at, r)
		}
	}
	var n json.Number
	if number(root[name], &n, name) == nil {
		return nil
	}
	var ns []json.RawMessage
	if err := strict(root[name], &ns, "metric "+name); err != nil {
		return fmt.Errorf("metric %s: want a top-level number or array of numbers: %w", name, err)
	}
	if len(ns) > 100 {
		return fmt.Errorf("metric %s: %d values, at most 100", name, len(ns))
	}
	for _, raw := range ns {
		if err := number(raw, &n, "metric "+name); err != nil {
			return err
		}
	}
	return nil
}

// number decodes raw, which must be a JSON number (not a string holding
// one), into n.
func number(raw json.RawMessage, n *json.Number, what string) error {
	if t := bytes.TrimSpace(raw); len(t) > 0 && t[0] != '-' && (t[0] < '0' || t[0] > '9') {
		return fmt.Errorf("%s: %s is not a number", what, t)
	}
	return strict(raw, n, what)
}

// strict decodes raw into v, which must be present and of v's type.
func strict(raw json.RawMessage, v any, what string) error {
	if len(raw) == 0 {
		return fmt.Errorf("%s: missing", what)
	}
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return fmt.Errorf("%s: null", what)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// only fails when the object has a member other than allowed.
func only(obj map[string]json.RawMessage, what string, allowed ...string) error {
	for k := range obj {
		if !slices.Contains(allowed, k) {
			return fmt.Errorf("%s: member %q is not in the specification", what, k)
		}
	}
	return nil
}
