package bench

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

var (
	flagPlots     = flag.String("plots", "", "a directory where BenchmarkScale's growth curves are drawn as SVG (scale-time.svg, scale-requests.svg, scale-rss.svg)")
	flagPlotsFrom = flag.String("plots-from", "", "no benchmark: draw the growth curves (into -plots) and print the table from a file of \"metric value\" lines, the values of a run that was stopped before it printed them")
)

// replot records the values of a file of "metric value" lines (# comments),
// prints the table and draws the curves into -plots.
func replot(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for i, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if len(f) != 2 || err != nil {
			fmt.Fprintf(os.Stderr, "%s:%d: want \"metric value\": %q\n", path, i+1, line)
			return 1
		}
		record(f[0], v)
	}
	printTable(os.Stdout)
	if *flagPlots != "" {
		files, err := drawPlots(*flagPlots)
		for _, f := range files {
			progress("growth curve drawn: %s", f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// growthPlot is one picture: a curve per series, each series a metric
// measured at every size (its median), against the scale nodes.
type growthPlot struct {
	file, title, y string
	series         []growthSeries
}

type growthSeries struct {
	label string
	what  func(n int) string // the metric at n nodes
}

func growthPlots() []growthPlot {
	return []growthPlot{
		{"scale-time.svg", "Time against cluster size", "seconds (median)", []growthSeries{
			{"sweep", func(n int) string { return sizeMetric("sweep", n, "s") }},
			{"quiet sweep", func(n int) string { return sizeMetric("sweep", n, "quiet_s") }},
			{"sweep in shards, longest shard", func(n int) string { return sizeMetric("sweep_sharded", n, "longest_shard_s") }},
			{"110-pod drain", func(n int) string { return sizeMetric("drain_110_pods", n, "s") }},
			{"110-pod drain, floor (no drainer)", func(n int) string { return sizeMetric("drain_110_pods", n, "floor_s") }},
			{"RWO failover", func(n int) string { return sizeMetric("rwo_failover", n, "s") }},
			{"launch (node registered → hook)", func(n int) string { return sizeMetric("launch", n, "s") }},
		}},
		{"scale-requests.svg", "Apiserver requests against cluster size", "requests (median)", []growthSeries{
			{"sweep", func(n int) string { return sizeMetric("sweep", n, "api_requests") }},
			{"quiet sweep", func(n int) string { return sizeMetric("sweep", n, "quiet_api_requests") }},
			{"sweep in shards, all shards", func(n int) string { return sizeMetric("sweep_sharded", n, "api_requests") }},
			{"110-pod drain", func(n int) string { return fmt.Sprintf("api_requests_110_pods_%d_nodes", n) }},
		}},
		{"scale-rss.svg", "The function's peak RSS against cluster size", "MiB (median)", []growthSeries{
			{"sweep", func(n int) string { return sizeMetric("sweep", n, "peak_rss_mb") }},
			{"sweep in shards (one process, every shard)", func(n int) string { return sizeMetric("sweep_sharded", n, "peak_rss_mb") }},
			{"110-pod drain", func(n int) string { return sizeMetric("drain_110_pods", n, "peak_rss_mb") }},
			{"launch", func(n int) string { return sizeMetric("launch", n, "peak_rss_mb") }},
			{"RWO failover", func(n int) string { return sizeMetric("rwo_failover", n, "peak_rss_mb") }},
		}},
	}
}

// drawPlots draws the growth curves of the sizes measured into dir; it
// returns the files written. A series with no value at any size is left
// out; a picture with no series is not drawn.
func drawPlots(dir string) ([]string, error) {
	nodes, pods := scaleSizes()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var written []string
	for _, gp := range growthPlots() {
		p := plot.New()
		p.Title.Text = gp.title
		p.X.Label.Text = "scale nodes (pods: " + podsNote(nodes, pods) + ")"
		p.Y.Label.Text = gp.y
		p.Y.Min = 0
		p.Legend.Top = true
		p.Legend.Left = true
		p.Add(plotter.NewGrid())
		var lines []any
		for _, s := range gp.series {
			var pts plotter.XYs
			for _, n := range nodes {
				if v, ok := median(s.what(n)); ok {
					pts = append(pts, plotter.XY{X: float64(n), Y: v})
				}
			}
			if len(pts) > 0 {
				lines = append(lines, s.label, pts)
			}
		}
		if len(lines) == 0 {
			continue
		}
		if err := plotutil.AddLinePoints(p, lines...); err != nil {
			return written, err
		}
		path := filepath.Join(dir, gp.file)
		if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
			return written, fmt.Errorf("drawing %s: %w", path, err)
		}
		written = append(written, path)
	}
	return written, nil
}

func podsNote(nodes, pods []int) string {
	s := ""
	for i := range nodes {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%d at %d", pods[i], nodes[i])
	}
	return s
}
