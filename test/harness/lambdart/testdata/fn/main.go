// Command fn is the function lambdart's tests run: it does what the request
// says, so each Lambda behaviour can be observed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	awslambda "github.com/aws/aws-sdk-go-v2/service/lambda"
	"github.com/aws/aws-sdk-go-v2/service/lambda/types"
)

type request struct {
	// Action is echo, error, sleep, info, invoke-async or panic.
	Action  string          `json:"action"`
	Message string          `json:"message,omitempty"`
	Millis  int             `json:"millis,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

type info struct {
	RequestID  string            `json:"requestId"`
	ARN        string            `json:"arn"`
	DeadlineMs int64             `json:"deadlineMs"`
	PID        int               `json:"pid"`
	Count      int               `json:"count"`
	Env        map[string]string `json:"env"`
}

// count is how many invocations this process has handled.
var count int

func handle(ctx context.Context, req request) (any, error) {
	count++
	switch req.Action {
	case "echo":
		return req, nil
	case "error":
		return nil, errors.New(req.Message)
	case "sleep":
		time.Sleep(time.Duration(req.Millis) * time.Millisecond)
		return "slept", nil
	case "info":
		lc, _ := lambdacontext.FromContext(ctx)
		deadline, _ := ctx.Deadline()
		env := map[string]string{}
		for _, k := range []string{"AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_FUNCTION_VERSION", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
			"AWS_REGION", "AWS_LAMBDA_LOG_FORMAT", "_HANDLER", "AWS_ENDPOINT_URL_LAMBDA", "EXTRA", "_X_AMZN_TRACE_ID"} {
			env[k] = os.Getenv(k)
		}
		return info{RequestID: lc.AwsRequestID, ARN: lc.InvokedFunctionArn, DeadlineMs: deadline.UnixMilli(),
			PID: os.Getpid(), Count: count, Env: env}, nil
	case "invoke-async":
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, err
		}
		out, err := awslambda.NewFromConfig(cfg).Invoke(ctx, &awslambda.InvokeInput{
			FunctionName:   aws.String(lambdacontext.FunctionName),
			InvocationType: types.InvocationTypeEvent,
			Payload:        req.Payload,
		})
		if err != nil {
			return nil, fmt.Errorf("invoking myself: %w", err)
		}
		return map[string]int32{"statusCode": out.StatusCode}, nil
	case "panic":
		panic(req.Message)
	}
	return nil, fmt.Errorf("unknown action %q", req.Action)
}

func main() {
	lambda.Start(handle)
}
