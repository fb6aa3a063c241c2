package lambdart

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// process is one execution environment: the function's process and the
// Runtime API listener only it knows.
type process struct {
	cmd     *exec.Cmd
	api     *http.Server
	apiDone chan struct{}
	// polls receives a reply channel each time the function asks for the
	// next invocation.
	polls   chan chan *invocation
	exited  chan struct{}
	waitErr error // set before exited is closed
	served  int   // invocations handed over; used by the loop goroutine only
	started time.Time

	mu       sync.Mutex
	current  *invocation
	initErr  string
	killOnce sync.Once
}

func (r *Runtime) startProcess() (*process, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the runtime API: %w", err)
	}
	p := &process{
		apiDone: make(chan struct{}),
		polls:   make(chan chan *invocation),
		exited:  make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", func(w http.ResponseWriter, req *http.Request) {
		r.serveNext(p, w, req)
	})
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", p.serveResponse)
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", p.serveError)
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", p.serveInitError)
	p.api = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(p.apiDone)
		_ = p.api.Serve(ln)
	}()

	cmd := exec.Command(r.opts.Bootstrap)
	cmd.Dir = filepath.Dir(r.opts.Bootstrap)
	cmd.Env = append(r.lambdaEnv(ln.Addr().String()), r.opts.Env...)
	cmd.Stdout, cmd.Stderr = r.log, r.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = time.Second
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		_ = p.api.Close()
		<-p.apiDone
		return nil, fmt.Errorf("starting %s: %w", r.opts.Bootstrap, err)
	}
	p.cmd = cmd
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// lambdaEnv is the environment Lambda gives a provided.al2023 function.
func (r *Runtime) lambdaEnv(runtimeAPI string) []string {
	o := r.opts
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"TZ=:UTC",
		"LAMBDA_TASK_ROOT=" + filepath.Dir(o.Bootstrap),
		"LAMBDA_RUNTIME_DIR=" + filepath.Dir(o.Bootstrap),
		"_HANDLER=" + filepath.Base(o.Bootstrap),
		"AWS_LAMBDA_RUNTIME_API=" + runtimeAPI,
		"AWS_LAMBDA_FUNCTION_NAME=" + o.FunctionName,
		"AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=" + strconv.Itoa(o.MemoryMB),
		"AWS_LAMBDA_LOG_FORMAT=JSON",
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/" + o.FunctionName,
		"AWS_LAMBDA_LOG_STREAM_NAME=" + time.Now().UTC().Format("2006/01/02") + "/[$LATEST]" + newRequestID(),
		"AWS_LAMBDA_INITIALIZATION_TYPE=on-demand",
		"AWS_REGION=" + o.Region,
		"AWS_DEFAULT_REGION=" + o.Region,
		"AWS_ACCESS_KEY_ID=test",
		"AWS_SECRET_ACCESS_KEY=test",
		"AWS_ENDPOINT_URL_LAMBDA=" + r.endpoint,
	}
}

// kill kills the process group, waits for it and closes its Runtime API.
func (p *process) kill() {
	p.killOnce.Do(func() {
		killGroup(p.cmd.Process.Pid)
		<-p.exited
		_ = p.api.Close()
		<-p.apiDone
	})
}

func (p *process) exitStatus() string {
	<-p.exited
	if p.waitErr == nil {
		return "exit status 0"
	}
	return p.waitErr.Error()
}

func (p *process) initError() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.initErr
}

func (p *process) setCurrent(inv *invocation) {
	p.mu.Lock()
	p.current = inv
	p.mu.Unlock()
}

// finish delivers the outcome of the current invocation; false if id is not
// the current invocation's or it already has an outcome.
func (p *process) finish(id string, out outcome) bool {
	p.mu.Lock()
	inv := p.current
	if inv == nil || inv.rec.RequestID != id {
		p.mu.Unlock()
		return false
	}
	p.current = nil
	p.mu.Unlock()
	inv.result <- out // buffered, and only the first outcome gets here
	return true
}

// serveNext blocks until the loop hands over an invocation.
func (r *Runtime) serveNext(p *process, w http.ResponseWriter, req *http.Request) {
	reply := make(chan *invocation, 1)
	select {
	case p.polls <- reply:
	case <-req.Context().Done():
		return
	}
	inv := <-reply
	h := w.Header()
	h.Set("Lambda-Runtime-Aws-Request-Id", inv.rec.RequestID)
	h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(inv.deadline.UnixMilli(), 10))
	h.Set("Lambda-Runtime-Invoked-Function-Arn", r.arn)
	h.Set("Lambda-Runtime-Trace-Id", newTraceID(time.Now()))
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(inv.rec.Payload)
}

func (p *process) serveResponse(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, maxPayload+1))
	if err != nil {
		runtimeError(w, http.StatusBadRequest, "InvalidRequest", err.Error())
		return
	}
	out := outcome{payload: body}
	if len(body) > maxPayload {
		out = failure("Function.ResponseSizeTooLarge", "Response payload size exceeded maximum allowed payload size (6291556 bytes).")
	}
	if !p.finish(req.PathValue("id"), out) {
		runtimeError(w, http.StatusBadRequest, "InvalidRequestID", "Invalid request ID")
		return
	}
	if len(body) > maxPayload {
		runtimeError(w, http.StatusRequestEntityTooLarge, "RequestEntityTooLarge", out.errorMsg)
		return
	}
	accepted(w)
}

func (p *process) serveError(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, maxPayload))
	if err != nil {
		runtimeError(w, http.StatusBadRequest, "InvalidRequest", err.Error())
		return
	}
	var doc struct {
		ErrorMessage string `json:"errorMessage"`
		ErrorType    string `json:"errorType"`
	}
	_ = json.Unmarshal(body, &doc)
	if doc.ErrorType == "" {
		doc.ErrorType = req.Header.Get("Lambda-Runtime-Function-Error-Type")
	}
	if doc.ErrorType == "" {
		doc.ErrorType = "Unhandled"
	}
	if !p.finish(req.PathValue("id"), outcome{payload: body, errorType: doc.ErrorType, errorMsg: doc.ErrorMessage}) {
		runtimeError(w, http.StatusBadRequest, "InvalidRequestID", "Invalid request ID")
		return
	}
	accepted(w)
}

func (p *process) serveInitError(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, maxPayload))
	var doc struct {
		ErrorMessage string `json:"errorMessage"`
	}
	_ = json.Unmarshal(body, &doc)
	if doc.ErrorMessage == "" {
		doc.ErrorMessage = string(body)
	}
	p.mu.Lock()
	p.initErr = doc.ErrorMessage
	p.mu.Unlock()
	accepted(w)
}

func accepted(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_, _ = io.WriteString(w, `{"status":"OK"}`)
}

func runtimeError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"errorType": typ, "errorMessage": msg})
}
