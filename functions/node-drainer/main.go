// Command node-drainer is the Lambda function: it wires configuration and
// clients and hands every event to internal/handler, and the deployment's
// own requests about its lifecycle hooks to internal/hooks.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/internal/hooks"
	"github.com/node-drainer/node-drainer/internal/logging"
	"github.com/node-drainer/node-drainer/internal/outcome"
	"github.com/node-drainer/node-drainer/internal/version"
)

func main() {
	// the function applies LOG_LEVEL itself (internal/logging says why); a
	// bad value logs at INFO until the configuration refuses it
	level, _ := logging.ParseLevel(os.Getenv("LOG_LEVEL"))
	log := logging.New(os.Stdout, os.Getenv("AWS_LAMBDA_LOG_FORMAT"), level)
	starting(log)
	s, err := setup(context.Background(), log)
	if err != nil {
		log.Error("node-drainer cannot start", "version", version.Get(), "error", err)
		os.Exit(1)
	}
	lambda.Start(s.handle)
}

// starting writes the first log line of an execution environment: which
// build runs, before the configuration is read, so that even a function that
// cannot start says its version (its error line says it again, for a log
// level above INFO).
func starting(log *slog.Logger) {
	log.Info("node-drainer starting", "version", version.Get(), "go", runtime.Version(), "arch", runtime.GOARCH)
}

// awsAttemptLimit bounds each attempt of an AWS call, from connecting to the
// response's last byte: a call that never answers is retried (a timeout is
// retryable), not waited on until the invocation's deadline. The
// Kubernetes client's requests have the same bound (RequestLimit).
const awsAttemptLimit = 30 * time.Second

// awsHTTPClient is the SDK's own HTTP client with each attempt bounded.
func awsHTTPClient(limit time.Duration) *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTimeout(limit)
}

// service is the function once its configuration is read: the handler,
// built once the cluster's clients are (once per execution environment, so
// the Kubernetes token cache outlives single invocations).
type service struct {
	log *slog.Logger
	// connect builds the cluster's clients and the handler; it is tried at
	// start and again by each invocation until it succeeds
	connect func(context.Context) (*handler.Handler, error)
	mu      sync.Mutex // Lambda may run several invocations in one process (AWS_LAMBDA_MAX_CONCURRENCY)
	h       *handler.Handler
	// hooks serves the deployment's own lifecycle-hook requests (SAM's
	// custom resource, terraform's invocation), which need Auto Scaling
	// only: an uninstall after the cluster is gone still removes the hooks
	hooks *hooks.Keeper
}

// handle runs one invocation: a lifecycle-hook request (hooks.Request) is
// served by internal/hooks, without the cluster; every other payload is an
// event, for the handler, which the cluster's clients are built for. The
// response is the one or the other's Outcome.
func (s *service) handle(ctx context.Context, payload json.RawMessage) (any, error) {
	if hooks.Request(payload) {
		return s.hooks.Serve(ctx, payload)
	}
	h, err := s.handler(ctx)
	if err != nil {
		s.log.ErrorContext(ctx, "node-drainer cannot reach its cluster", "version", version.Get(), "error", err)
		return handler.Outcome{}, fmt.Errorf("node-drainer cannot reach its cluster: %w", err)
	}
	return h.Handle(ctx, payload)
}

// handler is the handler, connected now if it was not yet.
func (s *service) handler(ctx context.Context) (*handler.Handler, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == nil {
		h, err := s.connect(ctx)
		if err != nil {
			return nil, err
		}
		s.h = h
	}
	return s.h, nil
}

// setup reads the configuration and the AWS configuration (an error here is
// the function's: it cannot start) and tries to reach the cluster. A
// cluster it cannot reach now (its kubeconfig unreadable, DescribeCluster
// failing, the cluster deleted before node-drainer) is said, and tried
// again by the next invocation.
func setup(ctx context.Context, log *slog.Logger) (*service, error) {
	cfg, err := config.FromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRetryer(func() aws.Retryer {
		// throttling is retried with backoff; the handler's deadline bounds it
		return retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = 8
			o.MaxBackoff = 5 * time.Second
		})
	}), awsconfig.WithHTTPClient(awsHTTPClient(awsAttemptLimit)))
	if err != nil {
		return nil, fmt.Errorf("loading AWS configuration: %w", err)
	}
	asg := autoscaling.NewFromConfig(awsCfg)
	lambdaClient := awslambda.NewFromConfig(awsCfg)
	clients := handler.Clients{
		EC2:         ec2.NewFromConfig(awsCfg),
		ASG:         asg,
		AutoScaling: asg,
		Hooks:       asg,
		Lambda:      lambdaClient,
		Self:        lambdaClient,
	}
	metrics := handler.WithMetrics(os.Stdout) // CloudWatch Logs extracts the EMF lines: no API call
	outcomes := handler.WithOutcomes(outcomePublisher(cfg, awsCfg))
	s := &service{log: log, hooks: hooks.New(cfg, hooks.Clients{Hooks: asg, Self: lambdaClient}, log)}
	s.connect = func(ctx context.Context) (*handler.Handler, error) {
		kubeconfig, err := cluster.LoadKubeconfig(ctx, cfg.KubeconfigPath, cfg.KubeconfigSSMParameter, cfg.KubeconfigSecretID,
			ssm.NewFromConfig(awsCfg), secretsmanager.NewFromConfig(awsCfg))
		if err != nil {
			return nil, err
		}
		rest, err := cluster.RESTConfig(ctx, cluster.Source{
			ClusterName:  cfg.ClusterName,
			Endpoint:     cfg.ClusterEndpoint,
			CAData:       cfg.ClusterCAData,
			Kubeconfig:   kubeconfig,
			QPS:          cfg.KubeQPS,
			Burst:        cfg.KubeBurst,
			RequestLimit: 30 * time.Second,
		}, eks.NewFromConfig(awsCfg), sts.NewFromConfig(awsCfg))
		if err != nil {
			return nil, err
		}
		kube, err := cluster.NewClientset(rest)
		if err != nil {
			return nil, fmt.Errorf("creating Kubernetes client: %w", err)
		}
		log.Info("node-drainer configured", "mode", cfg.Mode(), "cluster", cfg.ClusterName, "dryRun", cfg.DryRun)
		c := clients
		c.Kube = kube
		return handler.New(cfg, c, log, metrics, outcomes), nil
	}
	if s.h, err = s.connect(ctx); err != nil {
		log.Error("node-drainer cannot reach its cluster: each invocation tries again", "version", version.Get(), "error", err)
	}
	return s, nil
}

// outcomePublisher puts the outcome events on OUTCOME_EVENT_BUS; nil (none)
// unless a bus is named. A put is bounded by the publisher, its retries
// too: at most one more attempt.
func outcomePublisher(cfg config.Config, awsCfg aws.Config) *outcome.Publisher {
	if cfg.OutcomeEventBus == "" {
		return nil
	}
	bus := eventbridge.NewFromConfig(awsCfg, func(o *eventbridge.Options) { o.RetryMaxAttempts = 2 })
	return outcome.NewPublisher(bus, cfg.OutcomeEventBus, outcome.DefaultTimeout)
}
