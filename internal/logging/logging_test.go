package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

func TestParseLevel(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want slog.Level
		ok   bool
	}{
		{"", slog.LevelInfo, true},
		{"DEBUG", slog.LevelDebug, true},
		{"info", slog.LevelInfo, true},
		{" WARN ", slog.LevelWarn, true},
		{"ERROR", slog.LevelError, true},
		{"TRACE", slog.LevelInfo, false}, // Lambda's, not the function's
		{"WARNING", slog.LevelInfo, false},
	} {
		got, err := ParseLevel(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v, ok %t", tc.in, got, err, tc.want, tc.ok)
		}
	}
	for _, l := range Levels {
		if _, err := ParseLevel(l); err != nil {
			t.Errorf("Levels has %s, which ParseLevel refuses: %v", l, err)
		}
	}
}

// Lines in Lambda's keys, the request id from the context, nothing below
// the level.
func TestNew(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, "JSON", slog.LevelWarn)
	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-1"})
	log.InfoContext(ctx, "dropped")
	log.With("node", "n1").WarnContext(ctx, "kept")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one line, got %q", buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]any{"level": "WARN", "message": "kept", "requestId": "req-1", "node": "n1"} {
		if rec[k] != v {
			t.Errorf("%s = %v, want %v (%s)", k, rec[k], v, lines[0])
		}
	}
	if _, ok := rec["timestamp"]; !ok {
		t.Errorf("no timestamp: %s", lines[0])
	}
	buf.Reset()
	New(&buf, "Text", slog.LevelInfo).Info("plain")
	if !strings.Contains(buf.String(), "msg=plain") && !strings.Contains(buf.String(), "message=plain") {
		t.Errorf("text format: %q", buf.String())
	}
}

// The filter as stated: the guide's own example, a missing level, an
// invalid one.
func TestLambdaKeeps(t *testing.T) {
	for _, tc := range []struct {
		line, configured string
		want             bool
	}{
		{`{"level": "debug", "msg": "my debug log"}`, "DEBUG", true},
		{`{"level": "debug", "msg": "my debug log"}`, "INFO", false},
		{`{"level":"ERROR"}`, "ERROR", true},
		{`{"level":"WARN"}`, "ERROR", false},
		{`{"msg":"no level"}`, "INFO", true},
		{`{"msg":"no level"}`, "WARN", false},
		{`{"level":"LOUD"}`, "WARN", false},
		{`{"level":"LOUD"}`, "TRACE", true},
		{`not JSON`, "ERROR", false},
	} {
		if got := LambdaKeeps([]byte(tc.line), tc.configured); got != tc.want {
			t.Errorf("LambdaKeeps(%s, %s) = %t, want %t", tc.line, tc.configured, got, tc.want)
		}
	}
}
