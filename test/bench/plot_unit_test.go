package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDrawPlots: the growth curves are drawn from the recorded medians, one
// SVG a picture, the series named; nothing is drawn without values.
func TestDrawPlots(t *testing.T) {
	old := *flagScaleNodes
	*flagScaleNodes = "500,2000,5000"
	defer func() { *flagScaleNodes = old }()
	metricsMu.Lock()
	saved := metrics
	metrics = map[string]*metric{}
	metricsMu.Unlock()
	defer func() { metricsMu.Lock(); metrics = saved; metricsMu.Unlock() }()

	dir := t.TempDir()
	if files, err := drawPlots(dir); err != nil || len(files) != 0 {
		t.Fatalf("no values: drew %v, %v; want nothing", files, err)
	}
	for i, n := range []int{500, 2000, 5000} {
		record(sizeMetric("sweep", n, "s"), float64(i+1))
		record(sizeMetric("sweep", n, "peak_rss_mb"), 40+float64(i))
	}
	files, err := drawPlots(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("drew %v, want scale-time.svg and scale-rss.svg (no request counts recorded)", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "<svg") || !strings.Contains(string(b), "sweep") {
			t.Errorf("%s: not an SVG naming the sweep", filepath.Base(f))
		}
		if strings.Contains(string(b), "RWO failover") {
			t.Errorf("%s: a series with no values is drawn", filepath.Base(f))
		}
	}
}
