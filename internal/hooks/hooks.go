// Package hooks is the deployment's lifecycle hooks: the custom resource
// (SAM) and terraform's invocation that install, update and remove them
// (stack.go, stackhooks.go), and the sweep's puts on tagged groups with the
// removal mark (removal.go). It needs Auto Scaling and Lambda's view of the
// function, never the cluster: an uninstall after the cluster is gone still
// removes the hooks. The handler's sweep calls EnsureTagged; the function's
// main routes a hooks request (Request) to Serve.
package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"time"

	"k8s.io/utils/clock"

	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/discovery"
	"github.com/node-drainer/node-drainer/internal/event"
)

// Clients are the APIs the hooks are kept with.
type Clients struct {
	// Hooks puts the function's lifecycle hooks on listed and tagged
	// groups, and removes them; nil: a request fails, the sweep puts none.
	Hooks discovery.API
	// Self is Lambda's view of the function itself, where the removal of
	// its deployment is marked (removal.go); nil: no mark is written or read.
	Self SelfAPI
}

// Keeper keeps the deployment's lifecycle hooks.
type Keeper struct {
	cfg   config.Config
	c     Clients
	log   *slog.Logger
	clock clock.PassiveClock
}

// Option changes a Keeper that New builds.
type Option func(*Keeper)

// WithClock makes the Keeper read the time from c (the handler's clock,
// tests); the default is the real clock.
func WithClock(c clock.PassiveClock) Option {
	return func(k *Keeper) { k.clock = c }
}

// New returns a Keeper.
func New(cfg config.Config, c Clients, log *slog.Logger, opts ...Option) *Keeper {
	if log == nil {
		log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	k := &Keeper{cfg: cfg, c: c, log: log, clock: clock.RealClock{}}
	for _, o := range opts {
		o(k)
	}
	if k.clock == nil {
		k.clock = clock.RealClock{}
	}
	return k
}

// now is the time by the keeper's clock.
func (k *Keeper) now() time.Time { return k.clock.Now() }

// Outcome is the function's response to a hooks request, in the shape of
// the handler's Outcome (the fields a hooks request fills).
type Outcome struct {
	Event      event.Kind `json:"event"`
	Action     string     `json:"action"`
	Detail     string     `json:"detail,omitempty"`
	DurationMS int64      `json:"durationMs"`
}

// The Actions of a hooks request's Outcome (ActionFailed is the handler's).
const (
	ActionHooks  = "lifecycle-hooks"
	ActionFailed = "failed"
)

// Request reports whether payload is the deployment's own request about
// its lifecycle hooks (SAM's custom resource, terraform's invocation),
// which Serve serves with Auto Scaling alone.
func Request(payload []byte) bool {
	if _, ok := stackRequest(payload); ok {
		return true
	}
	_, ok, _ := terraformRequest(payload)
	return ok
}

// Serve serves one hooks request (Request): SAM's custom resource, answered
// on its presigned URL, or terraform's invocation, whose error is what
// terraform reports.
func (k *Keeper) Serve(ctx context.Context, payload json.RawMessage) (Outcome, error) {
	if req, ok := stackRequest(payload); ok {
		return k.stackResource(ctx, req)
	}
	if req, ok, err := terraformRequest(payload); ok {
		return k.terraformResource(ctx, req, err)
	}
	return Outcome{}, errors.New("not a lifecycle-hooks request (neither CloudFormation's custom resource nor terraform's invocation)")
}
