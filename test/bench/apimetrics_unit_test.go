package bench

import (
	"strings"
	"testing"
)

// metricsText is a piece of an apiserver's /metrics: a counter, a
// histogram and a metric the readers do not ask for.
const metricsText = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",resource="pods",subresource="eviction",verb="POST",version="v1"} 110
apiserver_request_total{code="429",component="apiserver",resource="pods",subresource="eviction",verb="POST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",resource="nodes",subresource="",verb="GET",version="v1"} 7
# HELP apiserver_request_duration_seconds [STABLE] Response latency distribution.
# TYPE apiserver_request_duration_seconds histogram
apiserver_request_duration_seconds_bucket{resource="pods",subresource="eviction",verb="POST",le="0.1"} 100
apiserver_request_duration_seconds_bucket{resource="pods",subresource="eviction",verb="POST",le="+Inf"} 113
apiserver_request_duration_seconds_sum{resource="pods",subresource="eviction",verb="POST"} 22.6
apiserver_request_duration_seconds_count{resource="pods",subresource="eviction",verb="POST"} 113
# HELP etcd_objects Not asked for.
# TYPE etcd_objects gauge
etcd_objects{resource="pods"} 5000
`

func TestEachSampleSumsCountersAndReadsHistograms(t *testing.T) {
	got := map[string]float64{}
	names := []string{"apiserver_request_total", "apiserver_request_duration_seconds_sum", "apiserver_request_duration_seconds_count"}
	err := eachSample([]byte(metricsText), names, func(name string, labels map[string]string, v float64) {
		got[name+" "+labels["verb"]+" "+labels["resource"]+"/"+labels["subresource"]] += v
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"apiserver_request_total POST pods/eviction":                  113,
		"apiserver_request_total GET nodes/":                          7,
		"apiserver_request_duration_seconds_sum POST pods/eviction":   22.6,
		"apiserver_request_duration_seconds_count POST pods/eviction": 113,
	}
	if len(got) != len(want) {
		t.Errorf("got %d series %v, want %d %v", len(got), got, len(want), want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// Every eviction request counts under "POST pods/eviction", whatever its
// answer; the accepted ones (2xx: the pod evicted) count again apart, so a
// 429 retried is not read as a pod evicted twice.
func TestParseAPICountsTellsAcceptedEvictions(t *testing.T) {
	c, err := parseAPICounts([]byte(metricsText))
	if err != nil {
		t.Fatal(err)
	}
	if got := c[evictionRequests]; got != 113 {
		t.Errorf("eviction requests %v, want 113 (110 accepted, 3 refused)", got)
	}
	if got := c[evictionsAccepted]; got != 110 {
		t.Errorf("evictions accepted %v, want 110 (the 3 answered 429 are not)", got)
	}
	if got := c["GET nodes"]; got != 7 {
		t.Errorf("GET nodes %v, want 7", got)
	}
}

func TestEachSampleRefusesBrokenText(t *testing.T) {
	err := eachSample([]byte("apiserver_request_total{verb=\"GET\" 7\n"), []string{"apiserver_request_total"}, func(string, map[string]string, float64) {
		t.Error("a sample from broken text")
	})
	if err == nil || !strings.Contains(err.Error(), "metrics text") {
		t.Errorf("err = %v, want an error reading the metrics text", err)
	}
}
