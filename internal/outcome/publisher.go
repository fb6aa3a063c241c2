package outcome

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"
)

// API is the one EventBridge call the Publisher makes.
type API interface {
	PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, opts ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error)
}

// DefaultTimeout bounds one put, retries included.
const DefaultTimeout = 3 * time.Second

// maxEntries is PutEvents' limit of entries per call; maxRequestBytes its
// limit of bytes, the entries together (as EventBridge counts them:
// entrySize).
const (
	maxEntries      = 10
	maxRequestBytes = 256 << 10
)

// Why an event was not put: the keys of Lost, and the suffix of the metric
// OutcomeEventsFailed.<reason>.
const (
	// LostNoTime: not called: the caller had less time left than the
	// put's bound (or none).
	LostNoTime = "no-time"
	// LostCooldown: not called: the bus failed less than Cooldown ago.
	LostCooldown = "cooldown"
	// LostBusFault: the call failed for the bus's own fault: no answer
	// within the put's bound, a 5xx, no connection. It starts the cooldown.
	LostBusFault = "bus-fault"
	// LostRefused: the call was refused (AccessDenied, a
	// ValidationException, throttling) or failed otherwise.
	LostRefused = "refused"
	// LostEnded: the caller's context ended during the call.
	LostEnded = "ended"
	// LostEntryRefused: the call went through, the bus refused the entry.
	LostEntryRefused = "entry-refused"
	// LostEncoding: the detail could not be encoded.
	LostEncoding = "encoding"
)

// Lost counts the events not put, by why (the Lost* reasons).
type Lost map[string]int

// Total is the number of events not put.
func (l Lost) Total() int {
	n := 0
	for _, c := range l {
		n += c
	}
	return n
}

// Publisher puts outcome events on one bus. After a call that failed for
// the bus's own fault (no answer within the bound, a 5xx, no connection),
// it puts nothing for Cooldown, so that a bus that hangs costs the
// invocation, and the sweep's many drains in it, one bound and not one per
// event. A refusal of one request, or a caller out of time, starts none:
// the next put may well go through.
type Publisher struct {
	api     API
	bus     string
	timeout time.Duration

	mu        sync.Mutex
	downUntil time.Time // no call before it (zero: the bus answered last)
	downErr   error     // why
}

// Cooldown is how long a Publisher puts nothing after a call that failed
// for the bus's own fault.
const Cooldown = time.Minute

// NewPublisher returns a Publisher putting events on bus (a name or ARN)
// through api, each put bounded by timeout (DefaultTimeout when zero or
// less). A nil api or an empty bus gives nil: outcome events are off.
func NewPublisher(api API, bus string, timeout time.Duration) *Publisher {
	if api == nil || bus == "" {
		return nil
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Publisher{api: api, bus: bus, timeout: timeout}
}

// Bus is the bus the Publisher puts on.
func (p *Publisher) Bus() string { return p.bus }

// Put puts the events, each detail bounded in bytes (Detail.trimmed), at
// most maxEntries and maxRequestBytes a call, each call bounded by the
// Publisher's timeout and by ctx; it returns the events not put, by why,
// and the errors. A call is not made when ctx has less time left than the
// bound: its events are lost (LostNoTime) rather than cut short. A nil
// Publisher puts nothing.
func (p *Publisher) Put(ctx context.Context, events ...Event) (Lost, error) {
	lost := Lost{}
	if p == nil || len(events) == 0 {
		return lost, nil
	}
	batches, errs := p.batches(events, lost)
	for _, b := range batches {
		if err := p.put(ctx, b, lost); err != nil {
			errs = append(errs, err)
		}
	}
	return lost, errors.Join(errs...)
}

// entry is an event as PutEvents takes it, and its size.
type entry struct {
	typ  DetailType
	in   types.PutEventsRequestEntry
	size int
}

// batches encodes the events and groups them, in order, into calls of at
// most maxEntries entries and maxRequestBytes together; an event that
// cannot be encoded is lost (LostEncoding).
func (p *Publisher) batches(events []Event, lost Lost) ([][]entry, []error) {
	var batches [][]entry
	var errs []error
	var cur []entry
	size := 0
	for _, e := range events {
		d := e.Detail
		d.SchemaVersion = SchemaVersion
		d, b, err := d.trimmed()
		if err != nil {
			lost[LostEncoding]++
			errs = append(errs, fmt.Errorf("encoding %s event: %w", e.Type, err))
			continue
		}
		in := types.PutEventsRequestEntry{
			EventBusName: aws.String(p.bus),
			Source:       aws.String(Source),
			DetailType:   aws.String(string(e.Type)),
			Detail:       aws.String(string(b)),
			Time:         aws.Time(d.Time),
		}
		n := entrySize(in)
		if len(cur) == maxEntries || len(cur) > 0 && size+n > maxRequestBytes {
			batches, cur, size = append(batches, cur), nil, 0
		}
		cur, size = append(cur, entry{e.Type, in, n}), size+n
	}
	if len(cur) > 0 {
		batches = append(batches, cur)
	}
	return batches, errs
}

// entrySize is an entry's size as EventBridge counts it against the
// request's limit (Time 14 bytes; Source, DetailType, Detail and each
// Resource in UTF-8), and the bus's name, which it does not count.
func entrySize(e types.PutEventsRequestEntry) int {
	n := len(aws.ToString(e.Source)) + len(aws.ToString(e.DetailType)) + len(aws.ToString(e.Detail)) + len(aws.ToString(e.EventBusName))
	if e.Time != nil {
		n += 14
	}
	for _, r := range e.Resources {
		n += len(r)
	}
	return n
}

// errPutBound is the cause of a call's context ending at the put's own
// bound (not the caller's).
var errPutBound = errors.New("the outcome put's bound passed")

func (p *Publisher) put(ctx context.Context, batch []entry, lost Lost) error {
	if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && time.Until(dl) < p.timeout {
		lost[LostNoTime] += len(batch)
		return fmt.Errorf("not put: less time left than the put's bound %s", p.timeout)
	}
	p.mu.Lock()
	down, why := time.Now().Before(p.downUntil), p.downErr
	p.mu.Unlock()
	if down {
		lost[LostCooldown] += len(batch)
		return fmt.Errorf("not put: the bus failed less than %s ago: %w", Cooldown, why)
	}
	entries := make([]types.PutEventsRequestEntry, len(batch))
	for i, e := range batch {
		entries[i] = e.in
	}
	cctx, cancel := context.WithTimeoutCause(ctx, p.timeout, errPutBound)
	defer cancel()
	out, err := p.api.PutEvents(cctx, &eventbridge.PutEventsInput{Entries: entries})
	if err != nil {
		err = fmt.Errorf("putting outcome events on %s: %w", p.bus, err)
		reason := whyFailed(ctx, cctx, err)
		lost[reason] += len(batch)
		if reason == LostBusFault {
			p.mu.Lock()
			p.downUntil, p.downErr = time.Now().Add(Cooldown), err
			p.mu.Unlock()
		}
		return err
	}
	if out.FailedEntryCount == 0 {
		return nil
	}
	lost[LostEntryRefused] += int(out.FailedEntryCount)
	var errs []error
	for i, r := range out.Entries {
		if r.ErrorCode != nil && i < len(batch) {
			errs = append(errs, fmt.Errorf("%s: %s: %s", batch[i].typ, aws.ToString(r.ErrorCode), aws.ToString(r.ErrorMessage)))
		}
	}
	return fmt.Errorf("putting outcome events on %s: %d refused: %w", p.bus, out.FailedEntryCount, errors.Join(errs...))
}

// whyFailed says why a call failed, by the SDK's error types: the caller's
// context ended (caller), the call's own bound passed (call), a 5xx or no
// connection — the bus's own faults, LostBusFault — or a refusal of this
// request (a 4xx: AccessDenied, ValidationException, throttling).
func whyFailed(caller, call context.Context, err error) string {
	if caller.Err() != nil {
		return LostEnded
	}
	if errors.Is(context.Cause(call), errPutBound) {
		return LostBusFault
	}
	var resp *awshttp.ResponseError
	if errors.As(err, &resp) {
		if resp.HTTPStatusCode() >= 500 {
			return LostBusFault
		}
		return LostRefused
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		if api.ErrorFault() == smithy.FaultServer {
			return LostBusFault
		}
		return LostRefused
	}
	// the SDK's send failures (smithyhttp.RequestSendError) and the net
	// package's (dial, DNS, reset)
	var conn interface{ ConnectionError() bool }
	var nerr net.Error
	if errors.As(err, &conn) && conn.ConnectionError() || errors.As(err, &nerr) {
		return LostBusFault
	}
	return LostRefused
}
