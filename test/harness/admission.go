package harness

import (
	"context"
	"errors"
	"fmt"
	"net"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Admission refusals of evictions, staged with no webhook server of the
// harness's own: the fault scenes (test/faults) and the world's conformance
// (test/conformance) refuse one pod's eviction with these. Each returns what
// lifts the refusal; the refusal is in force once the apiserver's admission
// has seen the objects (a moment after they are created: wait for it with a
// dry-run eviction).

// evictionRule is pods/eviction CREATE.
var evictionRule = admissionv1.RuleWithOperations{
	Operations: []admissionv1.OperationType{admissionv1.Create},
	Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/eviction"}},
}

// inNamespace selects namespace ns by its name label.
func inNamespace(ns string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}
}

// RefuseEviction installs a ValidatingAdmissionPolicy named name (and its
// binding, Deny) that refuses the eviction of pod in namespace ns with
// reason (Invalid: 422, Forbidden: 403) and message.
func (e *Env) RefuseEviction(ctx context.Context, name, ns, pod string, reason metav1.StatusReason, message string) (lift func(context.Context) error, err error) {
	adm := e.Client.AdmissionregistrationV1()
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionv1.Fail),
			MatchConstraints: &admissionv1.MatchResources{
				NamespaceSelector: inNamespace(ns),
				ResourceRules:     []admissionv1.NamedRuleWithOperations{{RuleWithOperations: evictionRule}},
			},
			Validations: []admissionv1.Validation{{Expression: fmt.Sprintf("request.name != %q", pod), Message: message, Reason: &reason}},
		},
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}},
	}
	lift = func(ctx context.Context) error {
		return errors.Join(
			ignoreNotFound(adm.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{})),
			ignoreNotFound(adm.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{})))
	}
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return nil, errors.Join(err, lift(ctx))
	}
	return lift, nil
}

// RefuseEvictionByWebhook installs a ValidatingWebhookConfiguration named
// name (failurePolicy Fail) for the eviction of pod in namespace ns only,
// whose endpoint is a loopback port that is down: it accepts connections
// and closes them at once (no other process can take the port meanwhile),
// so the apiserver answers 500 (failed calling webhook: EOF).
func (e *Env) RefuseEvictionByWebhook(ctx context.Context, name, ns, pod string) (lift func(context.Context) error, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	url := "https://" + ln.Addr().String() + "/validate"
	cfg := &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionv1.ValidatingWebhook{{
			Name:                    name + ".eviction.node-drainer.test",
			ClientConfig:            admissionv1.WebhookClientConfig{URL: &url},
			Rules:                   []admissionv1.RuleWithOperations{evictionRule},
			FailurePolicy:           ptr.To(admissionv1.Fail),
			SideEffects:             ptr.To(admissionv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(int32(5)),
			NamespaceSelector:       inNamespace(ns),
			MatchConditions:         []admissionv1.MatchCondition{{Name: "the-refused-pod", Expression: fmt.Sprintf("request.name == %q", pod)}},
		}},
	}
	whs := e.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	lift = func(ctx context.Context) error {
		err := ignoreNotFound(whs.Delete(ctx, name, metav1.DeleteOptions{}))
		_ = ln.Close()
		return err
	}
	if _, err := whs.Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		return nil, errors.Join(err, lift(ctx))
	}
	return lift, nil
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
