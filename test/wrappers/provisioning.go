package wrappers

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
)

// ProvisioningRequestWrapper wraps a ProvisioningRequest.
type ProvisioningRequestWrapper struct{ provv1.ProvisioningRequest }

// MakeProvisioningRequest returns a request of class, without pod sets or
// parameters.
func MakeProvisioningRequest(name, namespace, class string) *ProvisioningRequestWrapper {
	return &ProvisioningRequestWrapper{provv1.ProvisioningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       provv1.ProvisioningRequestSpec{ProvisioningClassName: class},
	}}
}

// Obj returns the request.
func (r *ProvisioningRequestWrapper) Obj() *provv1.ProvisioningRequest {
	return &r.ProvisioningRequest
}

// UID sets the request's UID (for tests without an API server).
func (r *ProvisioningRequestWrapper) UID(uid string) *ProvisioningRequestWrapper {
	r.ObjectMeta.UID = types.UID(uid)
	return r
}

// PodSet adds count pods of the PodTemplate named template.
func (r *ProvisioningRequestWrapper) PodSet(template string, count int32) *ProvisioningRequestWrapper {
	r.Spec.PodSets = append(r.Spec.PodSets, provv1.PodSet{PodTemplateRef: provv1.Reference{Name: template}, Count: count})
	return r
}

// Parameter sets a class parameter.
func (r *ProvisioningRequestWrapper) Parameter(name string, value provv1.Parameter) *ProvisioningRequestWrapper {
	if r.Spec.Parameters == nil {
		r.Spec.Parameters = map[string]provv1.Parameter{}
	}
	r.Spec.Parameters[name] = value
	return r
}

// Parameters sets every parameter of params.
func (r *ProvisioningRequestWrapper) Parameters(params map[string]provv1.Parameter) *ProvisioningRequestWrapper {
	for name, value := range params {
		r.Parameter(name, value)
	}
	return r
}

// ProvisioningClassWrapper wraps a ProvisioningClass.
type ProvisioningClassWrapper struct {
	autoscalingv1alpha1.ProvisioningClass
}

// MakeProvisioningClass returns a class served by handler, with the
// handler's defaults.
func MakeProvisioningClass(name string, handler autoscalingv1alpha1.Handler) *ProvisioningClassWrapper {
	return &ProvisioningClassWrapper{autoscalingv1alpha1.ProvisioningClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       autoscalingv1alpha1.ProvisioningClassSpec{Handler: handler},
	}}
}

// Obj returns the class.
func (c *ProvisioningClassWrapper) Obj() *autoscalingv1alpha1.ProvisioningClass {
	return &c.ProvisioningClass
}

// NodeGroups sets the node groups the class may scale.
func (c *ProvisioningClassWrapper) NodeGroups(groups ...string) *ProvisioningClassWrapper {
	c.Spec.NodeGroups = groups
	return c
}

// ValidUntilSeconds sets how long a request is retried.
func (c *ProvisioningClassWrapper) ValidUntilSeconds(s int32) *ProvisioningClassWrapper {
	c.Spec.ValidUntilSeconds = ptr.To(s)
	return c
}

// BookingDuration sets how long provisioned capacity stays booked.
func (c *ProvisioningClassWrapper) BookingDuration(d time.Duration) *ProvisioningClassWrapper {
	c.Spec.BookingDuration = &metav1.Duration{Duration: d}
	return c
}

// ProvisioningTimeout sets how long a scale-up attempt's nodes have to
// become Ready.
func (c *ProvisioningClassWrapper) ProvisioningTimeout(d time.Duration) *ProvisioningClassWrapper {
	c.Spec.ProvisioningTimeout = &metav1.Duration{Duration: d}
	return c
}

// Backoff sets the retry backoff of the class's requests.
func (c *ProvisioningClassWrapper) Backoff(initial, maximum time.Duration) *ProvisioningClassWrapper {
	c.Spec.Backoff = &autoscalingv1alpha1.Backoff{
		Initial: &metav1.Duration{Duration: initial},
		Max:     &metav1.Duration{Duration: maximum},
	}
	return c
}
