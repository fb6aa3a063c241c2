// Package logging builds the function's logger: one JSON object per line in
// the keys of Lambda's JSON log format (timestamp, level, message), the
// invocation's request id, and the log level (LOG_LEVEL) applied here, by
// the function, rather than by Lambda's application log filter.
//
// Why here: Lambda's filter (LoggingConfig.ApplicationLogLevel) gives a JSON
// line without a valid "level" the level INFO, and drops it at WARN or
// ERROR. The function's metrics lines (internal/metrics, CloudWatch embedded
// metric format) are such lines. So the templates keep Lambda's filter at
// TRACE, which keeps every line, and this logger leaves out the log lines
// below LOG_LEVEL: at every level the metrics still reach CloudWatch.
package logging

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Levels are the values LOG_LEVEL accepts, most detailed first: the
// templates' LogLevel / log_level allowed values.
var Levels = []string{"DEBUG", "INFO", "WARN", "ERROR"}

// LambdaFilterLevel is the application log level the templates give
// Lambda's filter (LoggingConfig): the most detailed, so that it drops
// nothing the function writes.
const LambdaFilterLevel = "TRACE"

// ParseLevel reads a LOG_LEVEL value (case does not matter; empty is INFO).
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "DEBUG":
		return slog.LevelDebug, nil
	case "", "INFO":
		return slog.LevelInfo, nil
	case "WARN":
		return slog.LevelWarn, nil
	case "ERROR":
		return slog.LevelError, nil
	}
	return slog.LevelInfo, fmt.Errorf("log level %q: want one of %s", s, strings.Join(Levels, ", "))
}

// New returns a logger writing to w lines of at least level: JSON unless
// format (AWS_LAMBDA_LOG_FORMAT) is given and is not JSON, then text.
func New(w io.Writer, format string, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: lambdacontext.ReplaceAttr}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if format != "" && !strings.EqualFold(format, "JSON") {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(requestID{h})
}

// requestID adds the invocation's request id (from the handler's context)
// to each record, as lambdacontext's own handler does.
type requestID struct{ slog.Handler }

func (h requestID) Handle(ctx context.Context, r slog.Record) error {
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		r.AddAttrs(slog.String("requestId", lc.AwsRequestID))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestID) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestID{h.Handler.WithAttrs(attrs)}
}

func (h requestID) WithGroup(name string) slog.Handler {
	return requestID{h.Handler.WithGroup(name)}
}

// LambdaLevels are the application log levels of Lambda's log-level
// filter, most detailed first.
var LambdaLevels = []string{"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"}

// LambdaKeeps applies Lambda's application log-level filter, set to
// configured, to one line of a function's output, as the Lambda developer
// guide ("Log-level filtering") states it for runtimes that write their own
// JSON: the line's level is its "level" key (any case); when that is missing
// or not a level, the line counts as INFO; the line reaches CloudWatch Logs
// when its level is the configured one or less detailed. A line that is not
// a JSON object has no "level" either: INFO.
//
// The function does not call it: the tests hold the function's real output
// (a unit test's, and the deployed function's in test/install) to the rule
// the templates' LambdaFilterLevel relies on.
func LambdaKeeps(line []byte, configured string) bool {
	rank := func(level string) int {
		for i, l := range LambdaLevels {
			if strings.EqualFold(l, level) {
				return i
			}
		}
		return -1
	}
	level := "INFO"
	var doc map[string]any
	if json.Unmarshal(line, &doc) == nil {
		if l, ok := doc["level"].(string); ok && rank(l) >= 0 {
			level = l
		}
	}
	return rank(level) >= rank(configured)
}
