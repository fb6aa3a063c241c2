// Package lambdart runs a real Lambda function binary (a provided.al2023
// "bootstrap", e.g. built with aws-lambda-go and -tags lambda.norpc) the way
// AWS Lambda does, for the test harness: it serves the Lambda Runtime API to
// the function's process and the Lambda Invoke API to its callers.
//
// The emulation has one execution environment: invocations run one at a
// time, in arrival order. Each has a deadline of start+Timeout; a function
// that misses it is recorded as "Task timed out", killed, and a fresh process
// is started for the next invocation, as Lambda does. A process that exits
// is restarted for the next invocation too. Asynchronous invocations (Invoke
// API with X-Amz-Invocation-Type: Event) that fail are retried
// Options.AsyncRetries more times with the same request id; the retries are
// queued at the back at once, not after Lambda's one and two minute delays.
// A synchronous self-invocation waits behind its caller (there is no second
// environment), so only asynchronous self-invocation is useful.
//
// Every process gets its own Runtime API listener (AWS_LAMBDA_RUNTIME_API),
// so a killed process can never take an invocation meant for its successor.
// The Invoke API is served on Endpoint, which stays the same and is passed
// to the function as AWS_ENDPOINT_URL_LAMBDA, so aws-sdk-go-v2's lambda
// client in the function invokes this emulator.
package lambdart

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// DefaultAsyncRetries is how many times Lambda retries a failed asynchronous
// invocation unless configured otherwise.
const DefaultAsyncRetries = 2

// AccountID is the account in the function's ARN.
const AccountID = "123456789012"

// initTimeout bounds how long a fresh process may take to ask for its first
// invocation (Lambda's init phase limit).
const initTimeout = 10 * time.Second

// maxPayload is Lambda's limit for a synchronous request or response.
const maxPayload = 6 << 20

// Options configure a Runtime.
type Options struct {
	// Bootstrap is the path of the function binary.
	Bootstrap string
	// Env is added to the function's environment and overrides the
	// defaults: the Lambda variables, AWS_ENDPOINT_URL_LAMBDA=Endpoint() and
	// static credentials test/test. The parent's environment is not passed.
	Env []string
	// Timeout is the function timeout; default 3 s, as in Lambda.
	Timeout time.Duration
	// FunctionName defaults to "function".
	FunctionName string
	// MemoryMB is reported in AWS_LAMBDA_FUNCTION_MEMORY_SIZE; default 128.
	// It is not enforced.
	MemoryMB int
	// Region defaults to us-east-1.
	Region string
	// AsyncRetries is how many more times a failed asynchronous invocation
	// is run: 0 for none; Lambda's default is DefaultAsyncRetries.
	AsyncRetries int
	// Log receives the function's stdout and stderr and platform lines
	// (JSON, like Lambda's platform.start and platform.report); default
	// discarded.
	Log io.Writer
	// LambdaAPI is the URL of a Lambda API (the AWS emulator) that answers
	// the function's other Lambda requests on Endpoint, Invoke excepted:
	// reading its own configuration and tags, as a deployed function does
	// (its deployment's removal mark). Empty: the runtime answers them for
	// its own function, as Lambda does (its configuration; its tags, kept
	// in memory, none at the start); for any other function, 404.
	LambdaAPI string
}

// Result is the outcome of a synchronous invocation.
type Result struct {
	RequestID string
	// Payload is the function's response or, when FunctionError is set, the
	// error document ({"errorMessage": ..., "errorType": ...}).
	Payload []byte
	// FunctionError is "Unhandled" when the function failed, timed out or
	// exited, as in the X-Amz-Function-Error header; "" on success.
	FunctionError string
	Duration      time.Duration
}

// Invocation is the record of one attempt of one invocation.
type Invocation struct {
	RequestID string
	Payload   []byte
	Async     bool
	// Attempt is 0 for the first run, then 1, 2… for retries.
	Attempt int
	// Queued is when the invocation arrived; Start when the function
	// received it (zero until then); End when it finished (zero until then).
	Queued, Start, End time.Time
	// Init is, for the invocation that started a process (a cold start),
	// the time from the process's start to its first request for the next
	// invocation: what Lambda reports as the init duration. 0 when warm.
	Init time.Duration
	// Response is the function's response or the error document.
	Response []byte
	// ErrorType is "" on success, else the errorType the function
	// reported, "Sandbox.Timedout" for a timeout or "Runtime.ExitError".
	ErrorType string
	// Error is the error message, "" on success.
	Error string
}

// Done reports whether the attempt has finished.
func (i Invocation) Done() bool { return !i.End.IsZero() }

// OK reports whether the attempt finished successfully.
func (i Invocation) OK() bool { return i.Done() && i.ErrorType == "" }

// TimedOut reports whether the attempt ran past its deadline.
func (i Invocation) TimedOut() bool { return i.ErrorType == errTimeout }

const (
	errTimeout = "Sandbox.Timedout"
	errExit    = "Runtime.ExitError"
)

// Runtime is a running emulator.
type Runtime struct {
	opts     Options
	arn      string
	endpoint string
	api      *http.Server
	log      *lockedWriter

	mu      sync.Mutex
	queue   []*invocation
	running *invocation
	records []*Invocation
	changed chan struct{} // closed and replaced on every state change
	proc    *process      // owned by the loop goroutine

	stop     chan struct{}
	stopOnce sync.Once
	loopDone chan struct{}
	apiDone  chan struct{}

	tagsMu sync.Mutex
	tags   map[string]string // the function's tags, without LambdaAPI
}

// invocation is an attempt in flight; its record is guarded by Runtime.mu.
type invocation struct {
	rec      *Invocation
	deadline time.Time
	result   chan outcome // buffered: the first outcome of the attempt
	done     chan struct{}
	out      outcome // set before done is closed
}

type outcome struct {
	payload   []byte
	errorType string
	errorMsg  string
}

// Start listens on a free port of 127.0.0.1 for the Invoke API and starts
// running invocations. The function's process is started on the first
// invocation (a cold start). Stop the runtime when done.
func Start(ctx context.Context, o Options) (*Runtime, error) {
	if o.Bootstrap == "" {
		return nil, errors.New("lambdart: Bootstrap is required")
	}
	if _, err := exec.LookPath(o.Bootstrap); err != nil {
		return nil, fmt.Errorf("lambdart: bootstrap: %w", err)
	}
	if o.Timeout <= 0 {
		o.Timeout = 3 * time.Second
	}
	if o.FunctionName == "" {
		o.FunctionName = "function"
	}
	if o.MemoryMB <= 0 {
		o.MemoryMB = 128
	}
	if o.Region == "" {
		o.Region = "us-east-1"
	}
	if o.AsyncRetries < 0 {
		return nil, errors.New("lambdart: AsyncRetries must not be negative")
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("lambdart: %w", err)
	}
	r := &Runtime{
		opts:     o,
		arn:      fmt.Sprintf("arn:aws:lambda:%s:%s:function:%s", o.Region, AccountID, o.FunctionName),
		endpoint: "http://" + ln.Addr().String(),
		log:      &lockedWriter{w: o.Log},
		changed:  make(chan struct{}),
		stop:     make(chan struct{}),
		loopDone: make(chan struct{}),
		apiDone:  make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /2015-03-31/functions/{name}/invocations", r.serveInvoke)
	if o.LambdaAPI != "" {
		target, err := url.Parse(o.LambdaAPI)
		if err != nil {
			return nil, fmt.Errorf("lambdart: LambdaAPI: %w", err)
		}
		mux.Handle("/", httputil.NewSingleHostReverseProxy(target))
	} else {
		r.tags = map[string]string{}
		mux.HandleFunc("GET /2015-03-31/functions/{name}/configuration", r.serveConfiguration)
		mux.HandleFunc("/2017-03-31/tags/{arn}", r.serveTags)
	}
	r.api = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(r.apiDone)
		_ = r.api.Serve(ln)
	}()
	go r.loop()
	return r, nil
}

// Endpoint is the Invoke API's URL, http://127.0.0.1:PORT, for
// AWS_ENDPOINT_URL_LAMBDA or an SDK client's BaseEndpoint.
func (r *Runtime) Endpoint() string { return r.endpoint }

// FunctionARN is the function's ARN.
func (r *Runtime) FunctionARN() string { return r.arn }

// Invoke runs the function synchronously with payload, like Lambda's
// RequestResponse invocation. A function error is reported in
// Result.FunctionError; the error is for the emulator (stopped) or ctx.
func (r *Runtime) Invoke(ctx context.Context, payload []byte) (Result, error) {
	inv, err := r.enqueue(payload, false, 0, "")
	if err != nil {
		return Result{}, err
	}
	select {
	case <-inv.done:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	}
	r.mu.Lock()
	res := Result{RequestID: inv.rec.RequestID, Payload: inv.out.payload, Duration: inv.rec.End.Sub(inv.rec.Start)}
	r.mu.Unlock()
	if inv.out.errorType != "" {
		res.FunctionError = "Unhandled"
	}
	return res, nil
}

// InvokeAsync queues an asynchronous invocation, like Lambda's Event
// invocation, and returns its request id.
func (r *Runtime) InvokeAsync(payload []byte) (string, error) {
	inv, err := r.enqueue(payload, true, 0, "")
	if err != nil {
		return "", err
	}
	return inv.rec.RequestID, nil
}

// Invocations returns a copy of every attempt so far, queued, running and
// finished, in arrival order.
func (r *Runtime) Invocations() []Invocation {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Invocation, len(r.records))
	for i, rec := range r.records {
		out[i] = *rec
	}
	return out
}

// WaitIdle waits until no invocation is queued or running.
func (r *Runtime) WaitIdle(ctx context.Context) error {
	for {
		r.mu.Lock()
		idle, changed := len(r.queue) == 0 && r.running == nil, r.changed
		r.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the function to be idle: %w", ctx.Err())
		}
	}
}

// PID is the function's current process id, 0 when none runs.
func (r *Runtime) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil {
		return 0
	}
	return r.proc.cmd.Process.Pid
}

// Stop kills the function, fails what is queued and closes the Invoke API.
// It is idempotent.
func (r *Runtime) Stop() error {
	r.stopOnce.Do(func() {
		close(r.stop)
		<-r.loopDone
		_ = r.api.Close()
		<-r.apiDone
	})
	return nil
}

func (r *Runtime) enqueue(payload []byte, async bool, attempt int, id string) (*invocation, error) {
	if id == "" {
		id = newRequestID()
	}
	inv := &invocation{
		rec: &Invocation{
			RequestID: id, Payload: payload, Async: async, Attempt: attempt, Queued: time.Now(),
		},
		result: make(chan outcome, 1),
		done:   make(chan struct{}),
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.stop:
		return nil, errors.New("lambdart: runtime stopped")
	default:
	}
	r.queue = append(r.queue, inv)
	r.records = append(r.records, inv.rec)
	r.notifyLocked()
	return inv, nil
}

func (r *Runtime) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// loop runs the queued invocations one at a time.
func (r *Runtime) loop() {
	defer close(r.loopDone)
	for {
		select {
		case <-r.stop:
			r.shutdown()
			return
		default:
		}
		r.mu.Lock()
		if len(r.queue) == 0 {
			changed := r.changed
			r.mu.Unlock()
			select {
			case <-changed:
				continue
			case <-r.stop:
				r.shutdown()
				return
			}
		}
		inv := r.queue[0]
		r.queue = r.queue[1:]
		r.running = inv
		r.notifyLocked()
		r.mu.Unlock()

		out := r.run(inv)

		r.mu.Lock()
		inv.rec.End = time.Now()
		if inv.rec.Start.IsZero() {
			inv.rec.Start = inv.rec.End
		}
		r.writeReport(inv.rec, out)
		inv.rec.Response, inv.rec.ErrorType, inv.rec.Error = out.payload, out.errorType, out.errorMsg
		inv.out = out
		close(inv.done)
		r.running = nil
		if out.errorType != "" && inv.rec.Async && inv.rec.Attempt < r.opts.AsyncRetries {
			retry := &invocation{
				rec: &Invocation{
					RequestID: inv.rec.RequestID, Payload: inv.rec.Payload, Async: true,
					Attempt: inv.rec.Attempt + 1, Queued: time.Now(),
				},
				result: make(chan outcome, 1),
				done:   make(chan struct{}),
			}
			r.queue = append(r.queue, retry)
			r.records = append(r.records, retry.rec)
		}
		r.notifyLocked()
		r.mu.Unlock()
	}
}

// run hands inv to the function's process, starting one if needed, and
// waits for its outcome or its deadline.
func (r *Runtime) run(inv *invocation) outcome {
	p, poll, failed := r.awaitPoll()
	if failed != nil {
		return *failed
	}
	now := time.Now()
	r.mu.Lock()
	inv.rec.Start = now
	if p.served == 0 {
		inv.rec.Init = now.Sub(p.started)
	}
	r.mu.Unlock()
	inv.deadline = now.Add(r.opts.Timeout)
	p.setCurrent(inv)
	p.served++
	r.writeStart(inv.rec)
	poll <- inv

	timer := time.NewTimer(r.opts.Timeout)
	defer timer.Stop()
	select {
	case out := <-inv.result:
		p.setCurrent(nil)
		return out
	case <-p.exited:
		r.dropProcess()
		return failure(errExit, "Runtime exited with error: "+p.exitStatus())
	case <-timer.C:
		r.dropProcess()
		return failure(errTimeout, fmt.Sprintf("RequestId: %s Error: Task timed out after %.2f seconds",
			inv.rec.RequestID, r.opts.Timeout.Seconds()))
	case <-r.stop:
		return failure(errExit, "runtime stopped")
	}
}

// awaitPoll returns the process once it asks for an invocation, starting a
// fresh one if there is none or the last one exited between invocations.
func (r *Runtime) awaitPoll() (*process, chan *invocation, *outcome) {
	for {
		if r.proc == nil {
			np, err := r.startProcess()
			if err != nil {
				out := failure(errExit, err.Error())
				return nil, nil, &out
			}
			r.mu.Lock()
			r.proc = np
			r.mu.Unlock()
		}
		p := r.proc
		timer := time.NewTimer(initTimeout)
		var out outcome
		select {
		case poll := <-p.polls:
			timer.Stop()
			return p, poll, nil
		case <-p.exited:
			timer.Stop()
			r.dropProcess()
			if p.served > 0 {
				continue // exited after an invocation (a panic): start afresh
			}
			if msg := p.initError(); msg != "" {
				out = failure("Runtime.InitError", msg)
			} else {
				out = failure(errExit, "Runtime exited during init: "+p.exitStatus())
			}
		case <-timer.C:
			r.dropProcess()
			out = failure(errTimeout, "Runtime did not ask for an invocation within "+initTimeout.String())
		case <-r.stop:
			timer.Stop()
			out = failure(errExit, "runtime stopped")
		}
		return nil, nil, &out
	}
}

func failure(errorType, msg string) outcome {
	doc, _ := json.Marshal(map[string]string{"errorType": errorType, "errorMessage": msg})
	return outcome{payload: doc, errorType: errorType, errorMsg: msg}
}

// shutdown kills the process and fails the queued invocations.
func (r *Runtime) shutdown() {
	r.dropProcess()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, inv := range r.queue {
		inv.out = failure(errExit, "runtime stopped")
		inv.rec.End = time.Now()
		inv.rec.ErrorType, inv.rec.Error, inv.rec.Response = inv.out.errorType, inv.out.errorMsg, inv.out.payload
		close(inv.done)
	}
	r.queue = nil
	r.notifyLocked()
}

// dropProcess kills the current process, if any.
func (r *Runtime) dropProcess() {
	r.mu.Lock()
	p := r.proc
	r.proc = nil
	r.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

func (r *Runtime) writeStart(rec *Invocation) {
	r.writePlatform("platform.start", map[string]any{"requestId": rec.RequestID, "version": "$LATEST"})
}

func (r *Runtime) writeReport(rec *Invocation, out outcome) {
	status := "success"
	switch out.errorType {
	case "":
	case errTimeout:
		status = "timeout"
	default:
		status = "error"
	}
	r.writePlatform("platform.report", map[string]any{
		"requestId": rec.RequestID,
		"status":    status,
		"metrics":   map[string]any{"durationMs": float64(rec.End.Sub(rec.Start).Microseconds()) / 1000},
	})
}

func (r *Runtime) writePlatform(typ string, record map[string]any) {
	line, _ := json.Marshal(map[string]any{"time": time.Now().UTC().Format(time.RFC3339Nano), "type": typ, "record": record})
	_, _ = r.log.Write(append(line, '\n'))
}

// serveInvoke is Lambda's Invoke API.
func (r *Runtime) serveInvoke(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("name")
	if name != r.opts.FunctionName && name != r.arn && name != r.arn+":$LATEST" && name != "function" {
		apiError(w, http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+name)
		return
	}
	if q := req.URL.Query().Get("Qualifier"); q != "" && q != "$LATEST" {
		apiError(w, http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+r.arn+":"+q)
		return
	}
	payload, err := io.ReadAll(io.LimitReader(req.Body, maxPayload+1))
	if err != nil {
		apiError(w, http.StatusBadRequest, "InvalidRequestContentException", err.Error())
		return
	}
	if len(payload) > maxPayload {
		apiError(w, http.StatusRequestEntityTooLarge, "RequestTooLargeException", "Request must be smaller than 6291456 bytes for the InvokeFunction operation")
		return
	}
	switch typ := req.Header.Get("X-Amz-Invocation-Type"); typ {
	case "Event":
		id, err := r.InvokeAsync(payload)
		if err != nil {
			apiError(w, http.StatusServiceUnavailable, "ServiceException", err.Error())
			return
		}
		w.Header().Set("X-Amzn-Requestid", id)
		w.WriteHeader(http.StatusAccepted)
	case "", "RequestResponse":
		res, err := r.Invoke(req.Context(), payload)
		if err != nil {
			apiError(w, http.StatusServiceUnavailable, "ServiceException", err.Error())
			return
		}
		w.Header().Set("X-Amzn-Requestid", res.RequestID)
		w.Header().Set("X-Amz-Executed-Version", "$LATEST")
		w.Header().Set("Content-Type", "application/json")
		if res.FunctionError != "" {
			w.Header().Set("X-Amz-Function-Error", res.FunctionError)
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(res.Payload)
	case "DryRun":
		w.WriteHeader(http.StatusNoContent)
	default:
		apiError(w, http.StatusBadRequest, "InvalidParameterValueException", "Unsupported invocation type "+strconv.Quote(typ))
	}
}

// apiError writes an error as Lambda's REST-JSON API does.
// serveConfiguration answers GetFunctionConfiguration for the function.
func (r *Runtime) serveConfiguration(w http.ResponseWriter, req *http.Request) {
	if name := req.PathValue("name"); name != r.opts.FunctionName && name != r.arn {
		apiError(w, http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+name)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"FunctionName": r.opts.FunctionName, "FunctionArn": r.arn, "Runtime": "provided.al2023"})
}

// serveTags answers ListTags, TagResource and UntagResource for the
// function's ARN.
func (r *Runtime) serveTags(w http.ResponseWriter, req *http.Request) {
	if arn := req.PathValue("arn"); arn != r.arn {
		apiError(w, http.StatusNotFound, "ResourceNotFoundException", "Function not found: "+arn)
		return
	}
	r.tagsMu.Lock()
	defer r.tagsMu.Unlock()
	switch req.Method {
	case http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"Tags": r.tags})
	case http.MethodPost:
		var in struct{ Tags map[string]string }
		if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
			apiError(w, http.StatusBadRequest, "InvalidParameterValueException", err.Error())
			return
		}
		for k, v := range in.Tags {
			r.tags[k] = v
		}
		w.WriteHeader(http.StatusNoContent)
	case http.MethodDelete:
		for _, k := range req.URL.Query()["tagKeys"] {
			delete(r.tags, k)
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		apiError(w, http.StatusMethodNotAllowed, "InvalidRequestContentException", req.Method)
	}
}

// Tags are the function's tags as the runtime keeps them (without
// LambdaAPI).
func (r *Runtime) Tags() map[string]string {
	r.tagsMu.Lock()
	defer r.tagsMu.Unlock()
	out := map[string]string{}
	for k, v := range r.tags {
		out[k] = v
	}
	return out
}

func apiError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("X-Amzn-Errortype", code)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"Type": "User", "message": msg})
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func newTraceID(now time.Time) string {
	var b [20]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return fmt.Sprintf("Root=1-%08x-%s;Parent=%s;Sampled=0", now.Unix(), h[:24], h[24:40])
}

// lockedWriter serialises the platform lines and the function's output.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// killGroup kills a process group.
func killGroup(pid int) { _ = syscall.Kill(-pid, syscall.SIGKILL) }
