package framework

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/test/util"
	utilgomega "github.com/gantry-dev/gantry/test/util/gomega"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// CreatePod creates p in the spec's namespace; it goes away at once when
// deleted. A PriorityClass created moments before may not be known yet to
// kube-apiserver's Priority admission (it reads them from an informer), so
// that one refusal is retried.
func (f *Framework) CreatePod(ctx context.Context, p *wrappers.PodWrapper) *v1.Pod {
	ginkgo.GinkgoHelper()
	p.Namespace = f.Namespace
	p.NoGrace()
	var created *v1.Pod
	Eventually(ctx, func() error {
		var err error
		created, err = f.Client.CoreV1().Pods(f.Namespace).Create(ctx, p.Obj(), metav1.CreateOptions{})
		if err != nil && !(apierrors.IsForbidden(err) && strings.Contains(err.Error(), "no PriorityClass with name")) {
			return gomega.StopTrying("creating pod " + p.Name).Wrap(err)
		}
		return err
	}).Should(gomega.Succeed(), "creating pod %s", p.Name)
	return created
}

// WaitForPod waits up to timeout until cond holds for the pod name of the
// spec's namespace, and returns the pod; what says what cond checks, for
// the failure message, which shows the pod as last seen.
func (f *Framework) WaitForPod(ctx context.Context, timeout time.Duration, name, what string, cond func(*v1.Pod) bool) *v1.Pod {
	ginkgo.GinkgoHelper()
	return utilgomega.Must(util.WaitForPod(ctx, timeout, f.Client, f.Namespace, name, what, cond))
}

// WaitScheduled waits up to timeout until the pod is bound, and returns
// it; how long the wait took goes to the spec's log.
func (f *Framework) WaitScheduled(ctx context.Context, timeout time.Duration, name string) *v1.Pod {
	ginkgo.GinkgoHelper()
	start := time.Now()
	p := f.WaitForPod(ctx, timeout, name, "scheduled", util.PodScheduled)
	ginkgo.GinkgoWriter.Printf("pod %s bound to %s, seen %s after the wait began\n", name, p.Spec.NodeName, time.Since(start).Round(10*time.Millisecond))
	return p
}

// WaitUnschedulable waits until the scheduler has found no node for the pod
// and said so, with a message containing every string of want.
func (f *Framework) WaitUnschedulable(ctx context.Context, name string, want ...string) *v1.Pod {
	ginkgo.GinkgoHelper()
	return f.WaitForPod(ctx, util.LongTimeout, name, fmt.Sprintf("unschedulable with a message containing %q", want),
		func(p *v1.Pod) bool { return util.Unschedulable(p, want...) })
}

// ExpectUnschedulable checks, inside an Eventually, that p is
// util.Unschedulable with want.
func ExpectUnschedulable(g gomega.Gomega, p *v1.Pod, want ...string) {
	g.Expect(util.Unschedulable(p, want...)).To(gomega.BeTrue(), "want unschedulable with a message containing %q: %s", want, util.DescribePod(p))
}

// DeleteWorkloads deletes the Deployments and ReplicaSets of the spec's
// namespace, then its pods at once, and waits until the pods are gone.
func (f *Framework) DeleteWorkloads(ctx context.Context) {
	ginkgo.GinkgoHelper()
	apps := f.Client.AppsV1()
	bg := metav1.DeletePropagationBackground
	opts := metav1.DeleteOptions{PropagationPolicy: &bg}
	gomega.Expect(apps.Deployments(f.Namespace).DeleteCollection(ctx, opts, metav1.ListOptions{})).To(gomega.Succeed())
	gomega.Expect(apps.ReplicaSets(f.Namespace).DeleteCollection(ctx, opts, metav1.ListOptions{})).To(gomega.Succeed())
	f.DeletePods(ctx)
}
