package provisioning

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/test/util"
	utilgomega "github.com/gantry-dev/gantry/test/util/gomega"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// env is what the specs act through: the framework's namespace and
// clients (f.Gantry for Gantry's API groups).
type env struct {
	f *framework.Framework
}

func newEnv(f *framework.Framework) *env { return &env{f: f} }

// request creates a request for count pods of a PodTemplate, deleted when
// the spec ends.
func (e *env) request(ctx context.Context, name, class, template string, count int, params map[string]provv1.Parameter) *provv1.ProvisioningRequest {
	pr := wrappers.MakeProvisioningRequest(name, e.f.Namespace, class).PodSet(template, int32(count)).Parameters(params).Obj()
	created, err := e.f.Gantry.AutoscalingXV1().ProvisioningRequests(e.f.Namespace).Create(ctx, pr, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func(ctx context.Context) {
		_ = e.f.Gantry.AutoscalingXV1().ProvisioningRequests(e.f.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	})
	return created
}

// waitCondition waits until the request has condition typ True with
// reason.
func (e *env) waitCondition(ctx context.Context, name, typ, reason string) *metav1.Condition {
	ginkgo.GinkgoHelper()
	return e.waitConditionStatus(ctx, name, typ, metav1.ConditionTrue, reason)
}

// waitConditionStatus waits until the request has condition typ with
// status and reason (util.WaitForProvisioningRequestCondition, as the
// integration tests); a failure points at the spec's line.
func (e *env) waitConditionStatus(ctx context.Context, name, typ string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	ginkgo.GinkgoHelper()
	pr := utilgomega.Must(util.WaitForProvisioningRequestCondition(ctx, util.LongTimeout, e.f.Gantry, e.f.Namespace, name, typ, status, reason))
	return meta.FindStatusCondition(pr.Status.Conditions, typ)
}

// reservations are the request's bookings.
func (e *env) reservations(ctx context.Context, pr *provv1.ProvisioningRequest) []schedv1alpha1.Reservation {
	list, err := e.f.Gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{LabelSelector: provisioning.LabelRequestUID + "=" + string(pr.UID)})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return list.Items
}

func (e *env) bookings(ctx context.Context, pr *provv1.ProvisioningRequest) int {
	return len(e.reservations(ctx, pr))
}

// bookedPods sums up a request's booking in pods: booked, and come.
func (e *env) bookedPods(ctx context.Context, pr *provv1.ProvisioningRequest) (booked, came int) {
	return provisioning.BookingPods(e.reservations(ctx, pr))
}

func (e *env) nodeOf(ctx context.Context, name string) string {
	p, err := e.f.Client.CoreV1().Pods(e.f.Namespace).Get(ctx, name, metav1.GetOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return p.Spec.NodeName
}

// template creates t in the spec's namespace.
func (e *env) template(ctx context.Context, t *wrappers.PodTemplateWrapper) {
	t.Namespace = e.f.Namespace
	_, err := e.f.Client.CoreV1().PodTemplates(e.f.Namespace).Create(ctx, t.Obj(), metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
}

// events are the request's events, one per line, for failure messages.
func (e *env) events(ctx context.Context, name string) string {
	list, err := e.f.Client.CoreV1().Events(e.f.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, ev := range list.Items {
		fmt.Fprintf(&b, "\n%s %s: %s", ev.LastTimestamp.Format(time.RFC3339), ev.Reason, ev.Message)
	}
	return b.String()
}
