package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/discovery"
	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/internal/hooks"
)

// The functions of the world's account: the plan's (mainOwner), whose
// configuration a stack update changes, and a second deployment's, which
// serves its template's requests and sweeps for its hooks alone (its
// cluster is not simulated). Each has its tags (the removal mark), and is
// gone once its deployment is removed: no event reaches it then.

type function struct {
	env  map[string]string
	cfg  config.Config
	tags map[string]string
	gone bool
}

// fn is the function named owner (nil: none).
func (l *lambdaWorld) fn(owner string) *function {
	if l.fns == nil {
		l.fns = map[string]*function{}
	}
	if owner == mainOwner && l.fns[owner] == nil {
		l.fns[owner] = &function{env: maps.Clone(l.w.Plan.Env), cfg: l.cfg, tags: map[string]string{}}
	}
	return l.fns[owner]
}

// addFunction adds the second deployment's function.
func (l *lambdaWorld) addFunction(owner string, env map[string]string) {
	cfg, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		panic(fmt.Sprintf("sim: the second deployment's configuration: %v", err))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fn(mainOwner)
	l.fns[owner] = &function{env: env, cfg: cfg, tags: map[string]string{}}
}

// config is the configuration owner's function runs with now.
func (l *lambdaWorld) config(owner string) config.Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := l.fn(owner); f != nil {
		return f.cfg
	}
	return l.cfg
}

// setEnv changes owner's function's configuration (a stack update).
func (l *lambdaWorld) setEnv(owner string, change func(map[string]string)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.fn(owner)
	env := maps.Clone(f.env)
	change(env)
	cfg, err := config.FromEnv(func(k string) string { return env[k] })
	if err != nil {
		panic(fmt.Sprintf("sim: a stack update's configuration: %v", err))
	}
	f.env, f.cfg = env, cfg
}

// remove deletes owner's function (its deployment removed).
func (l *lambdaWorld) remove(owner string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := l.fn(owner); f != nil {
		f.gone = true
	}
}

// gone reports whether owner's function was deleted.
func (l *lambdaWorld) gone(owner string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.fn(owner)
	return f == nil || f.gone
}

func (l *lambdaWorld) tagsOf(owner string) map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.fn(owner).tags)
}

func (l *lambdaWorld) retag(owner string, add map[string]string, drop []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.fn(owner)
	maps.Copy(f.tags, add)
	for _, k := range drop {
		delete(f.tags, k)
	}
}

// removing reports whether owner's function carries a removal mark
// younger than the 30 minutes after which the sweep no longer heeds it.
func (l *lambdaWorld) removing(owner string) bool {
	v, ok := l.tagsOf(owner)["node-drainer:removing"]
	if !ok {
		return false
	}
	at, err := time.Parse(time.RFC3339, v)
	return err != nil || time.Since(at) <= 30*time.Minute+time.Minute
}

// owns reports whether a hook of that name is the main function's by its
// configuration now.
func (l *lambdaWorld) owns(name string) bool {
	if l == nil {
		return false
	}
	return slices.Contains(l.config(mainOwner).OwnedHooks(), name)
}

// owner is the function an invocation runs as.
func (l *lambdaWorld) owner(inv *invocation) string {
	if inv == nil || inv.fn == "" {
		return mainOwner
	}
	return inv.fn
}

type directResult struct {
	inv    *invocation
	detail string
	err    error
}

// direct invokes owner's function with payload outside the event queue (a
// template's request: CloudFormation's and terraform's invocations) and
// gives its result once it ends (or is killed at its deadline).
func (l *lambdaWorld) direct(id string, payload []byte, owner string, started func(*invocation)) <-chan directResult {
	inv := &invocation{id: id, payload: payload, about: "deploy", fn: owner, begun: l.w.now(), deadline: time.Now().Add(l.w.Plan.LambdaTimeout),
		result: make(chan directResult, 1)}
	l.mu.Lock()
	l.running++
	l.all = append(l.all, inv)
	l.mu.Unlock()
	started(inv)
	l.w.tracef("%s: invoked (%s's template)", inv.id, owner)
	go l.run(inv)
	time.AfterFunc(l.w.Plan.LambdaTimeout, func() { l.kill(inv) })
	return inv.result
}

// serve runs one invocation of the function: a template's request to the
// Keeper (as functions/node-drainer routes it), the second deployment's
// sweep to its Keeper alone, anything else to the handler. done: it was
// served here, err its error.
func (l *lambdaWorld) serve(ctx context.Context, inv *invocation) (out handler.Outcome, detail string, err error) {
	owner := l.owner(inv)
	cfg := l.config(owner)
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: inv.requestID(), InvokedFunctionArn: functionARN(owner)})
	asg, self := asgClient{l.w, inv}, lambdaClient{l.w, inv}
	switch {
	case hooks.Request(inv.payload):
		o, err := hooks.New(cfg, hooks.Clients{Hooks: asg, Self: self}, l.log).Serve(ctx, inv.payload)
		return handler.Outcome{Action: handler.Action(o.Action), Detail: o.Detail}, o.Detail, err
	case owner != mainOwner:
		wanted := discovery.Wanted(cfg.TerminateHookName, cfg.CreateTerminateHook, cfg.LaunchHookName, cfg.CreateLaunchHook, int32(cfg.HeartbeatTimeout/time.Second))
		tag := discovery.Tag{Key: cfg.ASGTagKey, Value: cfg.ASGTagValue, ClusterTagKey: cfg.ClusterTagKey, ClusterName: cfg.ClusterName}
		res, _, err := hooks.New(cfg, hooks.Clients{Hooks: asg, Self: self}, l.log).EnsureTagged(ctx, tag, wanted, false)
		return handler.Outcome{Action: "sweep", Detail: strings.Join(res.Put, ",")}, "", err
	}
	h := handler.New(cfg, handler.Clients{
		Kube:        l.w.kube.clientset(inv),
		EC2:         ec2Client{l.w, inv},
		ASG:         asg,
		AutoScaling: asg,
		Lambda:      self,
		Hooks:       asg,
		Self:        self,
	}, l.log)
	out, err = h.Handle(ctx, inv.payload)
	return out, out.Detail, err
}

var errKilled = errors.New("sim: killed at its deadline (Task timed out)")
