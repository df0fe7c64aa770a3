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
	"github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// env is what the specs act through: the framework's namespace and
// clients, and the Gantry clientset.
type env struct {
	f  *framework.Framework
	gc versioned.Interface
}

func newEnv(f *framework.Framework) *env {
	gc, err := framework.GantryClient()
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	return &env{f: f, gc: gc}
}

// request creates a request for count pods of a PodTemplate, deleted when
// the spec ends.
func (e *env) request(ctx context.Context, name, class, template string, count int, params map[string]provv1.Parameter) *provv1.ProvisioningRequest {
	pr := wrappers.MakeProvisioningRequest(name, e.f.Namespace, class).PodSet(template, int32(count)).Parameters(params).Obj()
	created, err := e.gc.AutoscalingXV1().ProvisioningRequests(e.f.Namespace).Create(ctx, pr, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(func(ctx context.Context) {
		_ = e.gc.AutoscalingXV1().ProvisioningRequests(e.f.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	})
	return created
}

// waitCondition waits until the request has condition typ True with
// reason.
func (e *env) waitCondition(ctx context.Context, name, typ, reason string) *metav1.Condition {
	return e.waitFor(ctx, name, typ, metav1.ConditionTrue, reason)
}

// waitConditionStatus waits until the request has condition typ with
// status and reason.
func (e *env) waitConditionStatus(ctx context.Context, name, typ string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	return e.waitFor(ctx, name, typ, status, reason)
}

// waitFor is called by the two above only: failures point at their caller.
func (e *env) waitFor(ctx context.Context, name, typ string, status metav1.ConditionStatus, reason string) *metav1.Condition {
	var c *metav1.Condition
	framework.Eventually(ctx, func(g gomega.Gomega) {
		pr, err := e.gc.AutoscalingXV1().ProvisioningRequests(e.f.Namespace).Get(ctx, name, metav1.GetOptions{})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		c = meta.FindStatusCondition(pr.Status.Conditions, typ)
		g.Expect(c).NotTo(gomega.BeNil(), "no %s condition yet: %v", typ, pr.Status.Conditions)
		g.Expect(c.Status).To(gomega.Equal(status), "%s: %v", typ, pr.Status.Conditions)
		g.Expect(c.Reason).To(gomega.Equal(reason), "%s: %v", typ, pr.Status.Conditions)
	}).WithOffset(2).Should(gomega.Succeed())
	return c
}

// reservations are the request's bookings.
func (e *env) reservations(ctx context.Context, pr *provv1.ProvisioningRequest) []schedv1alpha1.Reservation {
	list, err := e.gc.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{LabelSelector: provisioning.LabelRequestUID + "=" + string(pr.UID)})
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
