// Command node-drainer is the Lambda function: it wires configuration and
// clients and hands every invocation to internal/handler.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/node-drainer/node-drainer/internal/cluster"
	"github.com/node-drainer/node-drainer/internal/config"
	"github.com/node-drainer/node-drainer/internal/handler"
	"github.com/node-drainer/node-drainer/internal/logging"
	"github.com/node-drainer/node-drainer/internal/version"
)

func main() {
	// the function applies LOG_LEVEL itself (internal/logging says why); a
	// bad value logs at INFO until the configuration refuses it
	level, _ := logging.ParseLevel(os.Getenv("LOG_LEVEL"))
	log := logging.New(os.Stdout, os.Getenv("AWS_LAMBDA_LOG_FORMAT"), level)
	starting(log)
	h, err := setup(context.Background(), log)
	if err != nil {
		log.Error("node-drainer cannot start", "version", version.Get(), "error", err)
		os.Exit(1)
	}
	lambda.Start(func(ctx context.Context, payload json.RawMessage) (handler.Outcome, error) {
		return h.Handle(ctx, payload)
	})
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

// setup reads the configuration and builds the clients once per execution
// environment, so the Kubernetes token cache outlives single invocations.
func setup(ctx context.Context, log *slog.Logger) (*handler.Handler, error) {
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
	asg := autoscaling.NewFromConfig(awsCfg)
	return handler.New(cfg, handler.Clients{
		Kube:        kube,
		EC2:         ec2.NewFromConfig(awsCfg),
		ASG:         asg,
		AutoScaling: asg,
		Hooks:       asg,
		Lambda:      awslambda.NewFromConfig(awsCfg),
	}, log, handler.WithMetrics(os.Stdout)), nil // CloudWatch Logs extracts the EMF lines: no API call
}
