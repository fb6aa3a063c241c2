package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// timeline prints lines stamped with the time since its start:
// "+  3.2s  hook event sent". It is safe for concurrent use.
type timeline struct {
	mu sync.Mutex
	w  io.Writer
	t0 time.Time
}

func newTimeline(w io.Writer) *timeline { return &timeline{w: w, t0: time.Now()} }

// printf prints a line stamped now.
func (t *timeline) printf(format string, args ...any) { t.at(time.Now(), format, args...) }

// at prints a line stamped with when (an observed time, e.g. moto's record).
func (t *timeline) at(when time.Time, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.w, "+%5.1fs  %s\n", when.Sub(t.t0).Seconds(), fmt.Sprintf(format, args...))
}

// since is the time elapsed since the timeline started.
func (t *timeline) since() time.Duration { return time.Since(t.t0) }

// prefixWriter turns each line written into a timeline line (for the
// harness's progress output).
type prefixWriter struct{ tl *timeline }

func (p prefixWriter) Write(b []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		p.tl.printf("%s", line)
	}
	return len(b), nil
}
