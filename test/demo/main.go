// Command demo plays node-drainer's two stories on the real local harness
// (etcd, kube-apiserver, controller-manager, scheduler, kwok, moto) with the
// real bootstrap under the Lambda runtime emulator:
//
//  1. ASG scale-in: the terminate lifecycle hook drains a node (PDB
//     respected, RWO volume detached and attached elsewhere) and the
//     lifecycle action is completed.
//  2. Abrupt stop: an instance stops under a StatefulSet pod with an RWO
//     volume; the state-change event releases the node and the pod runs on
//     another node with its volume.
//
// Everything printed is observed (watches on the apiserver, moto's record,
// the function's response). It exits non-zero when a story fails and prints
// the function's logs then. Run it with `make demo`.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/node-drainer/node-drainer/test/harness"
)

// story is one scenario; it returns its failures joined.
type story struct {
	name string
	play func(context.Context, *demo) error
}

type result struct {
	name     string
	err      error
	duration time.Duration
	note     string
}

func main() { os.Exit(run()) }

func run() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); stop() }() // a second Ctrl-C kills at once

	tl := newTimeline(os.Stdout)
	fmt.Println("== harness: etcd, kube-apiserver, controller-manager, scheduler, kwok, moto, token webhook")
	env, err := harness.Start(ctx, harness.Options{Log: prefixWriter{tl}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting the harness: %v\n", err)
		return 1
	}
	defer func() {
		env.Stop()
		fmt.Println("harness stopped")
	}()
	dir, err := os.MkdirTemp("", "node-drainer-demo-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bootstrap, err := harness.BuildBootstrap(ctx, dir)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	if fi, err := os.Stat(bootstrap); err == nil {
		tl.printf("bootstrap built: %.1f MB (go build -tags lambda.norpc ./functions/node-drainer)", float64(fi.Size())/1e6)
	}

	stories := []story{
		{"1. ASG scale-in (terminate hook)", scaleIn},
		{"2. abrupt stop (RWO failover)", abruptStop},
	}
	var results []result
	for _, s := range stories {
		d := &demo{env: env, bootstrap: bootstrap, logs: &harness.LogBuffer{}}
		if ctx.Err() != nil {
			results = append(results, result{name: s.name, err: errors.New("interrupted before it started")})
			continue
		}
		fmt.Printf("\n== %s\n", s.name)
		d.tl = newTimeline(os.Stdout)
		err := s.play(ctx, d)
		if ctx.Err() != nil {
			err = fmt.Errorf("interrupted: %w", cmp.Or(err, ctx.Err()))
		}
		results = append(results, result{name: s.name, err: err, duration: d.tl.since(), note: d.note})
		if err != nil {
			fmt.Printf("\nFAIL %s:\n%s\n", s.name, indent(err.Error(), "  "))
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if st := d.picture(pctx); st != "" {
				fmt.Printf("the scene when it failed:\n%s\n", indent(st, "  "))
			}
			cancel()
			fmt.Printf("the function's logs:\n%s\n", indent(d.logs.String(), "  | "))
		}
	}

	fmt.Printf("\n== summary\n  %-34s  %-6s  %8s\n", "story", "result", "duration")
	failed := 0
	for _, r := range results {
		verdict := "PASS"
		if r.err != nil {
			verdict = "FAIL"
			failed++
		}
		fmt.Printf("  %-34s  %-6s  %7.1fs  %s\n", r.name, verdict, r.duration.Seconds(), r.note)
	}
	for _, r := range results {
		if r.err != nil {
			fmt.Printf("  FAILED %s: %s\n", r.name, strings.ReplaceAll(r.err.Error(), "\n", "; "))
		}
	}
	if failed > 0 {
		return 1
	}
	return 0
}

func indent(s, prefix string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return prefix + "(nothing)"
	}
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}
