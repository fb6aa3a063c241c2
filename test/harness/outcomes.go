package harness

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// BusAndQueue makes an EventBridge bus and an SQS queue of that name in the
// AWS emulator, as an operator makes the bus node-drainer puts its outcome
// events on (OUTCOME_EVENT_BUS) and a target for them; it returns the
// queue's URL and ARN. The emulator's EventBridge sends a rule's events to
// queues, not to SNS topics.
func (e *Env) BusAndQueue(ctx context.Context, name string) (queueURL, queueARN string, err error) {
	cfg := e.AWS.AWSConfig()
	if _, err := eventbridge.NewFromConfig(cfg).CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: aws.String(name)}); err != nil {
		return "", "", fmt.Errorf("creating the bus %s: %w", name, err)
	}
	q := sqs.NewFromConfig(cfg)
	qu, err := q.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
	if err != nil {
		return "", "", fmt.Errorf("creating the queue %s: %w", name, err)
	}
	attrs, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: qu.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	if err != nil {
		return "", "", fmt.Errorf("reading the queue %s: %w", name, err)
	}
	return aws.ToString(qu.QueueUrl), attrs.Attributes["QueueArn"], nil
}
