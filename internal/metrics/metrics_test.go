package metrics

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestEntryIsEMF(t *testing.T) {
	e := New(Namespace)
	e.Directive([]Dimension{{"Event", "terminate"}, {"Result", "drained"}}).
		Put("Invocations", Count, 1).Put("DrainSeconds", Seconds, 1.5).Put("PodsEvicted", Count, 3)
	e.Directive([]Dimension{{"LifecycleResult", "CONTINUE"}}, []Dimension{{"CompletionReason", "drained"}}).
		Put("HooksCompleted", Count, 1)
	e.Directive([]Dimension{{"Event", "terminate"}}) // no metric: left out
	e.Property("instance", "i-0123456789abcdef0")
	var buf bytes.Buffer
	now := time.UnixMilli(1_700_000_000_123)
	if err := e.Write(&buf, now); err != nil {
		t.Fatal(err)
	}
	line := buf.Bytes()
	if bytes.Count(line, []byte("\n")) != 1 || !bytes.HasSuffix(line, []byte("\n")) {
		t.Fatalf("want one line, got %q", line)
	}
	if err := Validate(bytes.TrimSpace(line)); err != nil {
		t.Fatalf("not EMF: %v\n%s", err, line)
	}
	var doc struct {
		AWS struct {
			Timestamp         int64
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		} `json:"_aws"`
		Event, Result, LifecycleResult, CompletionReason string
		DrainSeconds, HooksCompleted                     float64
	}
	if err := json.Unmarshal(line, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.AWS.Timestamp != 1_700_000_000_123 || len(doc.AWS.CloudWatchMetrics) != 2 || doc.AWS.CloudWatchMetrics[0].Namespace != "NodeDrainer" {
		t.Errorf("metadata %+v", doc.AWS)
	}
	if got := doc.AWS.CloudWatchMetrics[1].Dimensions; len(got) != 2 || got[0][0] != "LifecycleResult" || got[1][0] != "CompletionReason" {
		t.Errorf("hook directive's dimension sets %v", got)
	}
	if doc.Event != "terminate" || doc.Result != "drained" || doc.CompletionReason != "drained" || doc.DrainSeconds != 1.5 || doc.HooksCompleted != 1 {
		t.Errorf("values %+v", doc)
	}
}

// The validator refuses what the specification refuses: each case breaks
// one rule of a valid document.
func TestValidateRefuses(t *testing.T) {
	valid := `{"_aws":{"Timestamp":1700000000000,"CloudWatchMetrics":[{"Namespace":"NodeDrainer","Dimensions":[["Event"]],"Metrics":[{"Name":"Invocations","Unit":"Count"}]}]},"Event":"terminate","Invocations":1}`
	if err := Validate([]byte(valid)); err != nil {
		t.Fatalf("valid document refused: %v", err)
	}
	many := make([]string, 31)
	for i := range many {
		many[i] = `"D"`
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"not JSON", `Invocations=1`, "not a JSON object"},
		{"text after the object", valid + ` trailing`, "after the JSON object"},
		{"no _aws", `{"Event":"terminate","Invocations":1}`, "_aws: missing"},
		{"no timestamp", strings.Replace(valid, `"Timestamp":1700000000000,`, ``, 1), "_aws.Timestamp: missing"},
		{"timestamp a string", strings.Replace(valid, `1700000000000`, `"1700000000000"`, 1), "not a number"},
		{"timestamp in seconds as a fraction", strings.Replace(valid, `1700000000000`, `1700000000.5`, 1), "milliseconds"},
		{"unknown member in _aws", strings.Replace(valid, `"_aws":{`, `"_aws":{"Extra":1,`, 1), `"Extra"`},
		{"no directive", strings.Replace(valid, `[{"Namespace":"NodeDrainer","Dimensions":[["Event"]],"Metrics":[{"Name":"Invocations","Unit":"Count"}]}]`, `[]`, 1), "no MetricDirective"},
		{"empty namespace", strings.Replace(valid, `"Namespace":"NodeDrainer"`, `"Namespace":""`, 1), "Namespace"},
		{"no namespace", strings.Replace(valid, `"Namespace":"NodeDrainer",`, ``, 1), "Namespace: missing"},
		{"dimensions not an array of sets", strings.Replace(valid, `[["Event"]]`, `["Event"]`, 1), "Dimensions"},
		{"dimension not a top-level member", strings.Replace(valid, `"Event":"terminate",`, ``, 1), "dimension Event: missing"},
		{"dimension value a number", strings.Replace(valid, `"Event":"terminate"`, `"Event":7`, 1), "dimension Event"},
		{"more than 30 dimensions", strings.Replace(valid, `[["Event"]]`, `[[`+strings.Join(many, ",")+`]]`, 1), "at most 30"},
		{"metric not a top-level member", strings.Replace(valid, `,"Invocations":1}`, `}`, 1), "metric Invocations"},
		{"metric value a string", strings.Replace(valid, `"Invocations":1}`, `"Invocations":"1"}`, 1), "metric Invocations"},
		{"metric values with a string", strings.Replace(valid, `"Invocations":1}`, `"Invocations":[1,"2"]}`, 1), "not a number"},
		{"unknown unit", strings.Replace(valid, `"Unit":"Count"`, `"Unit":"Pods"`, 1), "not a CloudWatch unit"},
		{"bad storage resolution", strings.Replace(valid, `"Unit":"Count"`, `"Unit":"Count","StorageResolution":5`, 1), "1 or 60"},
		{"unknown member in a definition", strings.Replace(valid, `"Unit":"Count"`, `"Unit":"Count","Kind":"x"`, 1), `"Kind"`},
		{"unknown member in a directive", strings.Replace(valid, `"Namespace":"NodeDrainer",`, `"Namespace":"NodeDrainer","Region":"x",`, 1), `"Region"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate(%s) = %v, want an error mentioning %q", tc.doc, err, tc.want)
			}
		})
	}
}

// The catalog check passes the handler's shape of line and names what
// leaves the catalog: an unknown metric, a wrong unit, a dimension set the
// catalog does not give the metric.
func TestCheckCatalog(t *testing.T) {
	line := func(build func(e *Entry)) []byte {
		e := New(Namespace)
		build(e)
		b, err := e.JSON(time.UnixMilli(1))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	fn := Dimension{DimFunctionName, "node-drainer"}
	byEvent := []Dimension{fn, {DimEvent, "terminate"}, {DimResult, "drained"}}
	for _, tc := range []struct {
		name  string
		build func(e *Entry)
		want  string // "" when the line keeps to the catalog
	}{
		{"the handler's line", func(e *Entry) {
			e.Directive(byEvent).Put(Invocations, Count, 1).Put(DrainSeconds, Seconds, 2).Put(KubeAPIRetriesFor+"throttled", Count, 1)
			e.Directive([]Dimension{fn, {DimLifecycleResult, "CONTINUE"}}, []Dimension{fn, {DimCompletionReason, "drained"}}).Put(HooksCompleted, Count, 1)
		}, ""},
		{"unknown metric", func(e *Entry) { e.Directive(byEvent).Put("DrainMinutes", Count, 1) }, "DrainMinutes is not in the catalog"},
		{"bare prefix", func(e *Entry) { e.Directive(byEvent).Put(KubeAPIRetriesFor, Count, 1) }, "is not in the catalog"},
		{"wrong unit", func(e *Entry) { e.Directive(byEvent).Put(DrainSeconds, Count, 1) }, "unit"},
		{"wrong dimensions", func(e *Entry) { e.Directive([]Dimension{fn, {DimEvent, "terminate"}}).Put(Invocations, Count, 1) }, "dimension set"},
		{"one set of two", func(e *Entry) {
			e.Directive([]Dimension{fn, {DimLifecycleResult, "CONTINUE"}}).Put(HooksCompleted, Count, 1)
		}, "dimension sets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckCatalog(line(tc.build))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CheckCatalog: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("CheckCatalog: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
