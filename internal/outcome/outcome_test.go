package outcome

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

const samplesDir = "../../events/outcomes"

// envelope is what EventBridge hands a rule's target.
type envelope struct {
	Version    string          `json:"version"`
	ID         string          `json:"id"`
	DetailType string          `json:"detail-type"`
	Source     string          `json:"source"`
	Account    string          `json:"account"`
	Time       time.Time       `json:"time"`
	Region     string          `json:"region"`
	Resources  []string        `json:"resources"`
	Detail     json.RawMessage `json:"detail"`
}

func strict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// readSamples decodes every sample strictly: a field the schema does not
// have fails.
func readSamples(t *testing.T) map[DetailType]Detail {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(samplesDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples in %s: %v", samplesDir, err)
	}
	got := map[DetailType]Detail{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var env envelope
		if err := strict(b, &env); err != nil {
			t.Fatalf("%s: envelope: %v", f, err)
		}
		if env.Source != Source || env.Version != "0" || env.Time.IsZero() {
			t.Errorf("%s: source %q version %q time %v: want %q, 0 and a time", f, env.Source, env.Version, env.Time, Source)
		}
		var d Detail
		if err := strict(env.Detail, &d); err != nil {
			t.Fatalf("%s: detail: %v", f, err)
		}
		dt := DetailType(env.DetailType)
		if err := Validate(dt, d); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if _, dup := got[dt]; dup {
			t.Errorf("%s: a second sample of %q", f, dt)
		}
		got[dt] = d
	}
	return got
}

// TestSamples holds events/outcomes to the schema: one sample of every
// detail-type, each valid, each read strictly.
func TestSamples(t *testing.T) {
	got := readSamples(t)
	for _, dt := range DetailTypes {
		if _, ok := got[dt]; !ok {
			t.Errorf("no sample of %q in %s", dt, samplesDir)
		}
	}
}

// TestValidateRefuses shows the schema check failing on each broken rule.
func TestValidateRefuses(t *testing.T) {
	good := readSamples(t)
	cases := map[string]struct {
		dt     DetailType
		mutate func(*Detail)
		want   string
	}{
		"unknown type":       {"Node Exploded", func(*Detail) {}, "unknown detail-type"},
		"no cluster":         {NodeDrained, func(d *Detail) { d.Cluster = "" }, "cluster"},
		"old schema":         {NodeDrained, func(d *Detail) { d.SchemaVersion = "0" }, "schemaVersion"},
		"no time":            {NodeDrainFailed, func(d *Detail) { d.Time = time.Time{} }, "time"},
		"failed, no reason":  {NodeDrainFailed, func(d *Detail) { d.Reason = "" }, "reason"},
		"blocked, no reason": {NodeDrainBlocked, func(d *Detail) { d.Reason = "" }, "reason"},
		"released, no proof": {NodeReleased, func(d *Detail) { d.Evidence = "" }, "evidence"},
		"released, nothing":  {NodeReleased, func(d *Detail) { d.PodsDeleted, d.AttachmentsDeleted = nil, nil }, "podsDeleted"},
		"completed, no hook": {LifecycleActionCompleted, func(d *Detail) { d.LifecycleHook = "" }, "lifecycleHook"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			d := good[tc.dt]
			if tc.dt == "Node Exploded" {
				d = good[NodeDrained]
			}
			tc.mutate(&d)
			if err := Validate(tc.dt, d); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestDocumented: every field of the detail is in docs/operations.md's
// table, and every detail-type too.
func TestDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	collect := func(typ reflect.Type) {
		for i := range typ.NumField() {
			fields = append(fields, strings.Split(typ.Field(i).Tag.Get("json"), ",")[0])
		}
	}
	collect(reflect.TypeFor[Detail]())
	collect(reflect.TypeFor[Held]())
	for _, f := range fields {
		if !regexp.MustCompile("`" + regexp.QuoteMeta(f) + "`").Match(doc) {
			t.Errorf("docs/operations.md does not document the detail field `%s`", f)
		}
	}
	for _, dt := range DetailTypes {
		if !bytes.Contains(doc, []byte("`"+string(dt)+"`")) {
			t.Errorf("docs/operations.md does not document the detail-type `%s`", dt)
		}
	}
}

// fakeAPI records PutEvents calls; each answer is chosen by the test.
type fakeAPI struct {
	mu     sync.Mutex
	calls  []*eventbridge.PutEventsInput
	answer func(ctx context.Context, in *eventbridge.PutEventsInput) (*eventbridge.PutEventsOutput, error)
}

func (f *fakeAPI) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	f.mu.Lock()
	f.calls = append(f.calls, in)
	f.mu.Unlock()
	if f.answer != nil {
		return f.answer(ctx, in)
	}
	return &eventbridge.PutEventsOutput{}, nil
}

// TestPutRoundTrip: a sample's detail, put, is the sample's detail on the
// wire, with the bus, source and detail-type a rule matches.
func TestPutRoundTrip(t *testing.T) {
	api := &fakeAPI{}
	p := NewPublisher(api, "on-call", 0)
	var events []Event
	for _, dt := range DetailTypes {
		events = append(events, Event{Type: dt, Detail: readSamples(t)[dt]})
	}
	if lost, err := p.Put(context.Background(), events...); lost.Total() != 0 || err != nil {
		t.Fatalf("Put = %v, %v", lost, err)
	}
	if len(api.calls) != 1 || len(api.calls[0].Entries) != len(events) {
		t.Fatalf("calls %d, want 1 with %d entries", len(api.calls), len(events))
	}
	for i, e := range api.calls[0].Entries {
		if aws.ToString(e.EventBusName) != "on-call" || aws.ToString(e.Source) != Source || aws.ToString(e.DetailType) != string(events[i].Type) {
			t.Errorf("entry %d: bus %q source %q type %q", i, aws.ToString(e.EventBusName), aws.ToString(e.Source), aws.ToString(e.DetailType))
		}
		var back Detail
		if err := strict([]byte(aws.ToString(e.Detail)), &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, events[i].Detail) {
			t.Errorf("entry %d: detail changed on the wire:\n got %+v\nwant %+v", i, back, events[i].Detail)
		}
	}
}

// TestPutBatchesAndTrims: more than ten events go in several calls; a
// detail's long lists are cut, the cut counted.
func TestPutBatchesAndTrims(t *testing.T) {
	api := &fakeAPI{}
	p := NewPublisher(api, "b", 0)
	pods := make([]string, 130)
	for i := range pods {
		pods[i] = "ns/pod"
	}
	var events []Event
	for range 23 {
		events = append(events, Event{Type: NodeDrained, Detail: Detail{Cluster: "c", Instance: "i-1", Node: "n", Event: "terminate", Result: "drained", Evicted: pods, Time: time.Unix(1, 0)}})
	}
	if _, err := p.Put(context.Background(), events...); err != nil {
		t.Fatal(err)
	}
	if n := len(api.calls); n != 3 {
		t.Fatalf("%d calls, want 3 (10+10+3)", n)
	}
	var d Detail
	if err := json.Unmarshal([]byte(aws.ToString(api.calls[2].Entries[2].Detail)), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Evicted) != maxList || d.Omitted != 130-maxList || Validate(NodeDrained, d) != nil {
		t.Fatalf("evicted %d omitted %d (%v), want %d and %d", len(d.Evicted), d.Omitted, Validate(NodeDrained, d), maxList, 130-maxList)
	}
	if len(events[0].Detail.Evicted) != 130 {
		t.Fatal("Put changed the caller's detail")
	}
}

// TestPutBoundedAndReported: a bus that hangs is given up at the
// Publisher's bound, and refused entries are counted with their reasons.
func TestPutBoundedAndReported(t *testing.T) {
	hang := &fakeAPI{answer: func(ctx context.Context, _ *eventbridge.PutEventsInput) (*eventbridge.PutEventsOutput, error) {
		if _, ok := ctx.Deadline(); !ok {
			return nil, errors.New("no deadline on the call")
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	ev := Event{Type: NodeDrained, Detail: Detail{Cluster: "c", Instance: "i-1", Node: "n", Event: "terminate", Result: "drained", Time: time.Unix(1, 0)}}
	p := NewPublisher(hang, "b", 20*time.Millisecond)
	lost, err := p.Put(context.Background(), ev, ev)
	if !maps.Equal(lost, Lost{LostBusFault: 2}) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung bus: lost %v, %v; want 2 for a bus fault and the deadline", lost, err)
	}
	// the next puts, within the cooldown, do not call the bus again
	if lost, err := p.Put(context.Background(), ev); !maps.Equal(lost, Lost{LostCooldown: 1}) || !errors.Is(err, context.DeadlineExceeded) || len(hang.calls) != 1 {
		t.Fatalf("within the cooldown: lost %v, %v, %d calls; want 1 not put and still 1 call", lost, err, len(hang.calls))
	}

	refuse := &fakeAPI{answer: func(context.Context, *eventbridge.PutEventsInput) (*eventbridge.PutEventsOutput, error) {
		return &eventbridge.PutEventsOutput{FailedEntryCount: 1, Entries: []types.PutEventsResultEntry{
			{EventId: aws.String("1")}, {ErrorCode: aws.String("ThrottlingException"), ErrorMessage: aws.String("slow down")}}}, nil
	}}
	lost, err = NewPublisher(refuse, "b", 0).Put(context.Background(), ev, ev)
	if !maps.Equal(lost, Lost{LostEntryRefused: 1}) || err == nil || !strings.Contains(err.Error(), "ThrottlingException") {
		t.Fatalf("refused entry: lost %v, %v", lost, err)
	}

	if p := NewPublisher(refuse, "", 0); p != nil {
		t.Fatal("an empty bus must turn outcome events off")
	}
	if lost, err := (*Publisher)(nil).Put(context.Background(), ev); lost.Total() != 0 || err != nil {
		t.Fatalf("nil Publisher: %v, %v", lost, err)
	}
}

// apiErr is err as the SDK returns a service's answer: an operation error
// around the HTTP response error around the API error.
func apiErr(status int, code string, fault smithy.ErrorFault) error {
	return &smithy.OperationError{ServiceID: "EventBridge", OperationName: "PutEvents", Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
			Err: &smithy.GenericAPIError{Code: code, Message: code + " (test)", Fault: fault}},
		RequestID: "r-1"}}
}

// sendErr is err as the SDK returns a request it could not send.
func sendErr(err error) error {
	return &smithy.OperationError{ServiceID: "EventBridge", OperationName: "PutEvents", Err: &smithyhttp.RequestSendError{Err: err}}
}

// TestCooldownOnlyForBusFaults: the cooldown starts on the bus's own
// faults (its answer slower than the put's bound, a 5xx, no connection),
// not on a refusal of this request or the caller's context ending: after
// those, the next put calls the bus again.
func TestCooldownOnlyForBusFaults(t *testing.T) {
	ev := Event{Type: NodeDrained, Detail: Detail{Cluster: "c", Instance: "i-1", Node: "n", Event: "terminate", Result: "drained", Time: time.Unix(1, 0)}}
	hang := func(ctx context.Context) error {
		<-ctx.Done()
		return sendErr(&url.Error{Op: "Post", URL: "https://events", Err: ctx.Err()})
	}
	cases := map[string]struct {
		fail     func(ctx context.Context, cancelCaller func()) error
		cooldown bool
		reason   string
	}{
		"no answer within the put's bound": {func(ctx context.Context, _ func()) error { return hang(ctx) }, true, LostBusFault},
		"500 InternalException": {func(context.Context, func()) error {
			return apiErr(500, "InternalException", smithy.FaultServer)
		}, true, LostBusFault},
		"503, no code": {func(context.Context, func()) error { return apiErr(503, "", smithy.FaultUnknown) }, true, LostBusFault},
		"connection refused": {func(context.Context, func()) error {
			return sendErr(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
		}, true, LostBusFault},
		"no such host": {func(context.Context, func()) error {
			return sendErr(&net.DNSError{Err: "no such host", Name: "events.example", IsNotFound: true})
		}, true, LostBusFault},
		"AccessDeniedException": {func(context.Context, func()) error {
			return apiErr(400, "AccessDeniedException", smithy.FaultClient)
		}, false, LostRefused},
		"ValidationException (too large)": {func(context.Context, func()) error {
			return apiErr(400, "ValidationException", smithy.FaultClient)
		}, false, LostRefused},
		"ThrottlingException": {func(context.Context, func()) error {
			return apiErr(400, "ThrottlingException", smithy.FaultClient)
		}, false, LostRefused},
		"the caller's context ends during the call": {func(ctx context.Context, cancelCaller func()) error {
			cancelCaller()
			return hang(ctx)
		}, false, LostEnded},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			calls := 0
			api := &fakeAPI{answer: func(callCtx context.Context, _ *eventbridge.PutEventsInput) (*eventbridge.PutEventsOutput, error) {
				calls++
				if calls == 1 {
					return nil, tc.fail(callCtx, cancel)
				}
				return &eventbridge.PutEventsOutput{}, nil
			}}
			p := NewPublisher(api, "b", 50*time.Millisecond)
			if lost, err := p.Put(ctx, ev); !maps.Equal(lost, Lost{tc.reason: 1}) || err == nil {
				t.Fatalf("first put: lost %v, %v; want 1 %s and an error", lost, err, tc.reason)
			}
			lost, err := p.Put(context.Background(), ev)
			if cooled := calls == 1; cooled != tc.cooldown {
				t.Fatalf("cooldown %v (second put: lost %v, %v, %d calls in all), want %v", cooled, lost, err, calls, tc.cooldown)
			}
			if want := (Lost{LostCooldown: 1}); tc.cooldown && !maps.Equal(lost, want) || !tc.cooldown && (lost.Total() != 0 || err != nil) {
				t.Fatalf("second put: lost %v, %v; want %v", lost, err, map[bool]Lost{true: want, false: {}}[tc.cooldown])
			}
		})
	}
}

// TestPutSkippedWithoutTime: with less time left than the put's bound, the
// bus is not called at all (and no cooldown starts): the events are lost,
// and counted so.
func TestPutSkippedWithoutTime(t *testing.T) {
	ev := Event{Type: NodeDrained, Detail: Detail{Cluster: "c", Instance: "i-1", Node: "n", Event: "terminate", Result: "drained", Time: time.Unix(1, 0)}}
	api := &fakeAPI{}
	p := NewPublisher(api, "b", 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	lost, err := p.Put(ctx, ev, ev)
	if !maps.Equal(lost, Lost{LostNoTime: 2}) || err == nil || len(api.calls) != 0 {
		t.Fatalf("1 s left, a 3 s bound: lost %v, %v, %d calls; want 2 lost for no time and no call", lost, err, len(api.calls))
	}
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	if lost, _ := p.Put(done, ev); !maps.Equal(lost, Lost{LostNoTime: 1}) || len(api.calls) != 0 {
		t.Fatalf("a caller already done: lost %v, %d calls; want 1 lost for no time and no call", lost, len(api.calls))
	}
	if lost, err := p.Put(context.Background(), ev); lost.Total() != 0 || err != nil || len(api.calls) != 1 {
		t.Fatalf("then with time: lost %v, %v, %d calls; want put (no cooldown)", lost, err, len(api.calls))
	}
}

// eventBridgeLimit is EventBridge's bound on one PutEvents request, its
// entries together, and so on one entry.
const eventBridgeLimit = 256 * 1024

// eventBridgeSize is an entry's size as EventBridge counts it (Time 14 bytes,
// Source, DetailType, Detail and each Resource in UTF-8).
func eventBridgeSize(e types.PutEventsRequestEntry) int {
	n := len(aws.ToString(e.Source)) + len(aws.ToString(e.DetailType)) + len(aws.ToString(e.Detail))
	if e.Time != nil {
		n += 14
	}
	for _, r := range e.Resources {
		n += len(r)
	}
	return n
}

// TestPutBoundedInBytes: 2,000 pods of long names, each held by a long
// admission message, a long reason and a timeline of long steps: each
// event and each request stays under EventBridge's limit, what was cut
// counted, and every event still valid.
func TestPutBoundedInBytes(t *testing.T) {
	const pods = 2000
	long := func(prefix string, n int) string { return prefix + strings.Repeat("x", n-len(prefix)) }
	var names []string
	var held []Held
	for i := range pods {
		p := long(fmt.Sprintf("ns-%04d-", i), 63) + "/" + long(fmt.Sprintf("pod-%04d-", i), 253)
		names = append(names, p)
		held = append(held, Held{Pod: p, HeldBy: long("admission webhook \"policy.example.com\" denied the request: ", 4000)})
	}
	var timeline []Step
	for i := range 200 {
		timeline = append(timeline, Step{AtMS: int64(i), Step: "pdb-wait", Detail: long("held by ", 20000)})
	}
	base := Detail{Cluster: "prod", Function: "node-drainer", Instance: "i-0123456789abcdef0", Node: "ip-10-0-0-1.ec2.internal",
		AutoScalingGroup: "workers", LifecycleHook: "node-drainer-terminate", Event: "terminate", Attempt: 3,
		Evicted: names, Remaining: held, Timeline: timeline, BlockedSeconds: 900, DrainSeconds: 1800, Time: time.Unix(1, 0)}
	failed, completed, blocked := base, base, base
	failed.Result, failed.Reason = "failed", long("drain timed out: ", 300000)
	completed.Result, completed.LifecycleResult, completed.Reason = "failed", "ABANDON", "at-deadline"
	blocked.Result, blocked.Reason = "blocked", long("drain not finished after 15m0s: ", 100000)
	released := base
	released.Result, released.Evidence, released.Reason = "released", long("stopped: ", 50000), "instance down"
	released.PodsDeleted, released.AttachmentsDeleted = names, names
	drained := base
	drained.Result, drained.Remaining = "drained", nil
	events := []Event{{NodeDrainFailed, failed}, {LifecycleActionCompleted, completed}, {NodeDrainBlocked, blocked}, {NodeReleased, released}, {NodeDrained, drained}}

	api := &fakeAPI{}
	if lost, err := NewPublisher(api, "on-call", 0).Put(context.Background(), events...); lost.Total() != 0 || err != nil {
		t.Fatalf("Put = %v, %v", lost, err)
	}
	largestEntry, largestRequest, put := 0, 0, 0
	for i, call := range api.calls {
		size := 0
		for _, e := range call.Entries {
			n := eventBridgeSize(e)
			size += n
			largestEntry = max(largestEntry, n)
			var d Detail
			if err := strict([]byte(aws.ToString(e.Detail)), &d); err != nil {
				t.Fatal(err)
			}
			if err := Validate(events[put].Type, d); err != nil {
				t.Errorf("%s: %v", events[put].Type, err)
			}
			if d.Omitted == 0 {
				t.Errorf("%s: nothing counted as omitted", events[put].Type)
			}
			put++
		}
		largestRequest = max(largestRequest, size)
		t.Logf("request %d: %d entries, %d bytes", i+1, len(call.Entries), size)
	}
	t.Logf("%d pods: largest event %d bytes, largest request %d bytes (limit %d), %d requests", pods, largestEntry, largestRequest, eventBridgeLimit, len(api.calls))
	if put != len(events) || len(api.calls) < 2 {
		t.Fatalf("%d events put in %d requests, want %d, split (they pass %d bytes together)", put, len(api.calls), len(events), eventBridgeLimit)
	}
	if largestEntry > eventBridgeLimit || largestRequest > eventBridgeLimit {
		t.Fatalf("largest event %d bytes, largest request %d bytes: over EventBridge's %d", largestEntry, largestRequest, eventBridgeLimit)
	}
	if len(events[0].Detail.Remaining) != pods || events[0].Detail.Remaining[0].HeldBy != held[0].HeldBy || events[0].Detail.Timeline[0].Detail != timeline[0].Detail {
		t.Fatal("Put changed the caller's detail")
	}
}

// TestCutText: a text past its bound is cut on a rune's boundary, within
// the bound, the cut marked.
func TestCutText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"0123456789abc", 10, "0123456…"},
		{"ééééé", 7, "éé…"}, // 2 bytes each: a cut inside the third is moved back
	} {
		got := cutText(tc.in, tc.n)
		if got != tc.want || len(got) > max(tc.n, len(tc.in)) || !utf8.ValidString(got) {
			t.Errorf("cutText(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
