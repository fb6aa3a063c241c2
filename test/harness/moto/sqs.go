package moto

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// The SQS calls the bench needs for the peer it measures
// (aws-node-termination-handler reads its events from an SQS queue), made
// with SQS's query protocol and signed with the emulator's credentials, so
// the harness needs no SQS client module.

// CreateQueue creates a standard queue and returns its URL.
func (s *Server) CreateQueue(ctx context.Context, name string) (string, error) {
	body, err := s.Query(ctx, "sqs", "2012-11-05", url.Values{"Action": {"CreateQueue"}, "QueueName": {name}})
	if err != nil {
		return "", fmt.Errorf("creating SQS queue %s: %w", name, err)
	}
	var out struct {
		URL string `xml:"CreateQueueResult>QueueUrl"`
	}
	if err := xml.Unmarshal(body, &out); err != nil || out.URL == "" {
		return "", fmt.Errorf("creating SQS queue %s: no QueueUrl in %q (%v)", name, body, err)
	}
	return out.URL, nil
}

// SendMessage puts one message on the queue, as EventBridge delivers an
// event to an SQS target (the event JSON as the body).
func (s *Server) SendMessage(ctx context.Context, queueURL, body string) error {
	if _, err := s.Query(ctx, "sqs", "2012-11-05", url.Values{"Action": {"SendMessage"}, "QueueUrl": {queueURL}, "MessageBody": {body}}); err != nil {
		return fmt.Errorf("sending to %s: %w", queueURL, err)
	}
	return nil
}

// Query makes one call of an AWS query-protocol API of the emulator (params
// with their Action; version is the API version), signed with the
// emulator's credentials for service, the signing name (sqs, monitoring...),
// and returns the XML answer. It serves the calls whose SDK clients the
// emulator cannot answer (CloudWatch's client speaks RPCv2 CBOR) or the
// harness does not import.
func (s *Server) Query(ctx context.Context, service, version string, params url.Values) ([]byte, error) {
	params.Set("Version", version)
	payload := params.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/", strings.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	sum := sha256.Sum256([]byte(payload))
	creds, err := s.AWSConfig().Credentials.Retrieve(ctx)
	if err != nil {
		return nil, err
	}
	if err := v4.NewSigner().SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), service, Region, time.Now()); err != nil {
		return nil, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: HTTP %d: %s", params.Get("Action"), resp.StatusCode, b)
	}
	return b, nil
}
