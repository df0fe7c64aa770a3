//go:build soak

package soak

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/e2e/framework"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// The kinds of operation a tenant does, and the least each must be done a
// minute over the run (over all tenants), or the run fails: a run whose
// work stalled proves nothing.
const (
	opCheckCapacity = "check-capacity request"
	opAtomic        = "best-effort-atomic request"
	opReservation   = "reservation with an owner"
	opPod           = "pod"
)

var minPerMinute = map[string]float64{
	opCheckCapacity: 1, opAtomic: 0.5, opScaleUp: 0.2, opOverQuota: 0.1, opReservation: 1, opPod: 0.5,
	opRejected: 0.2, opPreemption: 0.3, opNarrowing: 0.3, opPolicy: 0.2, opJob: 0.3,
}

// weights are the odds of each kind of operation: a kind is drawn with
// its weight over the sum of them all.
var weights = []struct {
	kind   string
	weight int
}{
	{opCheckCapacity, 4}, {opAtomic, 2}, {opScaleUp, 2}, {opOverQuota, 1}, {opReservation, 4}, {opPod, 2},
	{opRejected, 1}, {opPreemption, 2}, {opNarrowing, 2}, {opPolicy, 1}, {opJob, 3},
}

// totalWeight is the sum of the weights.
var totalWeight = func() int {
	n := 0
	for _, w := range weights {
		n += w.weight
	}
	return n
}()

// failurePause is how long a tenant waits after an operation failed.
const failurePause = 2 * time.Second

// requestValidity is the ValidUntilSeconds of every request: the checker
// judges each decided within it.
const requestValidity = 3 * time.Minute

// tenant works in two namespaces: requests, under a ResourceQuota that
// their bookings count against, and pods, for reservations and plain pods
// (kube-apiserver's quota admission does not know bookings: pods that
// consume no request beside live bookings could pass the quota without any
// fault of Gantry's).
type tenant struct {
	name string
	// requests, pods and jobs (the Jobs queued in Kueue) are its
	// namespaces.
	requests, pods, jobs string
	rng                  *rand.Rand
	rec                  *recorder
	gantry               gantryclient.Interface
	w                    *world
	n                    int // operations started, for names
	churns               int // versions of the churned policy written
}

// How an operation ended, when it did not fail.
const (
	// resultDone: its pods were bound (and, for a request, after it was
	// Provisioned).
	resultDone = "done"
	// resultRefused: no room (a request Failed, a reservation not placed in
	// a minute): part of the service on busy nodes.
	resultRefused = "refused"
	// resultUnplaced: its pods were not bound within two minutes.
	resultUnplaced = "unplaced"
)

// work does one operation of a kind drawn from the tenant's seed, to its
// end, and records it.
func (t *tenant) work(ctx context.Context) {
	t.n++
	kind := pick(t.rng.IntN(totalWeight))
	var result string
	var err error
	switch kind {
	case opCheckCapacity:
		result, err = t.request(ctx, provv1.ClassCheckCapacity, onNodes)
	case opAtomic:
		result, err = t.request(ctx, provv1.ClassBestEffortAtomicScaleUp, onNodes)
	case opScaleUp:
		result, err = t.request(ctx, provv1.ClassBestEffortAtomicScaleUp, scaleUp)
	case opOverQuota:
		result, err = t.request(ctx, provv1.ClassBestEffortAtomicScaleUp, overQuota)
	case opReservation:
		result, err = t.reservation(ctx)
	case opPod:
		result, err = t.pod(ctx)
	case opRejected:
		result, err = t.rejected(ctx)
	case opPreemption:
		result, err = t.preemption(ctx)
	case opNarrowing:
		result, err = t.narrowing(ctx)
	case opPolicy:
		result, err = t.policy(ctx)
	case opJob:
		result, err = t.job(ctx)
	}
	if ctx.Err() != nil {
		return // the run ended mid-operation: neither done nor failed
	}
	t.rec.op(kind, result, err)
	if err != nil {
		// As a client would, pause after an error (kube-apiserver may be
		// restarting) rather than fail again at once.
		select {
		case <-ctx.Done():
		case <-time.After(failurePause):
		}
	}
}

// pick is the kind of operation x (0 to totalWeight-1) draws.
func pick(x int) string {
	for _, w := range weights {
		if x < w.weight {
			return w.kind
		}
		x -= w.weight
	}
	panic(fmt.Sprintf("x is past totalWeight (%d left)", x))
}

// What a request asks for.
type requestShape int

const (
	// onNodes: 1-3 pods of 100m-500m CPU, which the cluster's own nodes
	// have room for.
	onNodes requestShape = iota
	// scaleUp: 1-2 pods of 2-3 CPU of the general node group, which no
	// node the cluster started with is of.
	scaleUp
	// overQuota: 2 pods of 2.5-3 CPU of the general node group, more than
	// the namespace's quota (tenantQuotaCPU) even with nothing else booked:
	// it must be refused.
	overQuota
)

// tenantQuotaCPU is the CPU of the ResourceQuota of each tenant's requests
// namespace.
const tenantQuotaCPU = "4"

// overQuotaHold is how long an over-quota request that was Provisioned
// anyway is held, as its client would hold it, before the operation fails:
// long enough for the invariant checker to judge the booking.
const overQuotaHold = 20 * time.Second

// request asks for pods of the given shape, and once Provisioned creates
// its pods, waits until they are bound, and deletes them and the request.
// A request that fails (no capacity, quota) is refused, not failed:
// refusing is part of the service. An over-quota request is done when it
// fails for its quota, and an error when it is Provisioned.
func (t *tenant) request(ctx context.Context, class string, shape requestShape) (string, error) {
	c := framework.TestContext
	name := fmt.Sprintf("%s-r%d", t.name, t.n)
	count := int32(1 + t.rng.IntN(3))
	cpu := fmt.Sprintf("%dm", 100*(1+t.rng.IntN(5)))
	tw := wrappers.MakePodTemplate(name, t.requests)
	switch shape {
	case scaleUp:
		count = int32(1 + t.rng.IntN(2))
		cpu = fmt.Sprintf("%dm", 2000+500*t.rng.IntN(3))
	case overQuota:
		count = 2
		cpu = fmt.Sprintf("%dm", 2500+500*t.rng.IntN(2))
	}
	if shape != onNodes {
		tw.NodeSelector(v1.LabelInstanceTypeStable, generalInstanceType)
	}
	tmpl := tw.Requests("cpu", cpu).Obj()
	if _, err := c.Client.CoreV1().PodTemplates(t.requests).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating PodTemplate %s/%s: %w", t.requests, name, err)
	}
	defer func() {
		_ = c.Client.CoreV1().PodTemplates(t.requests).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	}()
	pr := wrappers.MakeProvisioningRequest(name, t.requests, class).PodSet(name, count).
		Parameter(provv1.ParameterValidUntilSeconds, provv1.Parameter(fmt.Sprint(int(requestValidity.Seconds())))).Obj()
	if _, err := t.gantry.AutoscalingXV1().ProvisioningRequests(t.requests).Create(ctx, pr, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating ProvisioningRequest %s/%s: %w", t.requests, name, err)
	}
	defer func() {
		_ = t.gantry.AutoscalingXV1().ProvisioningRequests(t.requests).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
	}()
	var provisioned bool
	var failed *metav1.Condition
	err := util.PollSlowly(ctx, requestValidity+time.Minute, "ProvisioningRequest "+t.requests+"/"+name+" decided", func(ctx context.Context) (bool, error) {
		got, err := t.gantry.AutoscalingXV1().ProvisioningRequests(t.requests).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil // the API server may be restarting
		}
		provisioned = meta.IsStatusConditionTrue(got.Status.Conditions, provv1.ConditionProvisioned)
		if c := meta.FindStatusCondition(got.Status.Conditions, provv1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
			failed = c
		}
		return provisioned || failed != nil, nil
	})
	if err != nil {
		return "", err
	}
	if !provisioned {
		if shape == overQuota && failed.Reason == provisioning.ReasonQuotaExceeded {
			return resultDone, nil // refused, as it must be
		}
		return resultRefused, nil
	}
	if shape == overQuota {
		select {
		case <-ctx.Done():
		case <-time.After(overQuotaHold):
		}
		return "", fmt.Errorf("the ProvisioningRequest %s/%s for %d pods of %s CPU was Provisioned, beyond its namespace's quota of %s CPU", t.requests, name, count, cpu, tenantQuotaCPU)
	}
	pods := make([]string, 0, count)
	for i := range count {
		pw := wrappers.MakePod(fmt.Sprintf("%s-%d", name, i), t.requests).Requests("cpu", cpu).
			Annotation(provv1.AnnotationConsume, name).Label(opLabel, "request")
		if shape != onNodes {
			pw.NodeSelector(v1.LabelInstanceTypeStable, generalInstanceType)
		}
		p := pw.Obj()
		if _, err := t.w.client.CoreV1().Pods(t.requests).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("creating pod %s/%s of a Provisioned request: %w", t.requests, p.Name, err)
		}
		pods = append(pods, p.Name)
	}
	defer t.deletePods(ctx, t.requests, pods...)
	return t.waitBound(ctx, t.requests, pods...)
}

// reservation reserves 100m-300m CPU for 2 minutes for one owner pod,
// creates the pod once the reservation is Available, waits until it is
// bound, and deletes it.
func (t *tenant) reservation(ctx context.Context) (string, error) {
	name := fmt.Sprintf("%s-v%d", t.pods, t.n) // cluster-scoped: the namespace names the run
	cpu := fmt.Sprintf("%dm", 100*(1+t.rng.IntN(3)))
	owner := map[string]string{"soak.gantry.dev/owner": name}
	r := wrappers.MakeReservation(name, "cpu", cpu).OwnerLabels(t.pods, owner).TTL(2 * time.Minute).Obj()
	if _, err := t.gantry.SchedulingV1alpha1().Reservations().Create(ctx, r, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating Reservation %s: %w", name, err)
	}
	err := util.PollSlowly(ctx, time.Minute, "Reservation "+name+" Available", func(ctx context.Context) (bool, error) {
		got, err := t.gantry.SchedulingV1alpha1().Reservations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return got.Status.Phase == schedv1alpha1.ReservationAvailable, nil
	})
	if err != nil {
		// Not placed within a minute (the nodes are full): delete it.
		_ = t.gantry.SchedulingV1alpha1().Reservations().Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
		return resultRefused, nil
	}
	p := wrappers.MakePod(name, t.pods).Requests("cpu", cpu).Label(opLabel, "owner").Obj()
	maps.Copy(p.Labels, owner)
	if _, err := t.w.client.CoreV1().Pods(t.pods).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating owner pod %s/%s: %w", t.pods, name, err)
	}
	defer t.deletePods(ctx, t.pods, name)
	return t.waitBound(ctx, t.pods, name)
}

// pod creates a pod of 100m CPU, waits until it is bound, and deletes it.
func (t *tenant) pod(ctx context.Context) (string, error) {
	name := fmt.Sprintf("%s-p%d", t.name, t.n)
	p := wrappers.MakePod(name, t.pods).Requests("cpu", "100m").Label(opLabel, "pod").Obj()
	if _, err := t.w.client.CoreV1().Pods(t.pods).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating pod %s/%s: %w", t.pods, name, err)
	}
	defer t.deletePods(ctx, t.pods, name)
	return t.waitBound(ctx, t.pods, name)
}

// waitBound waits until the pods are bound (resultUnplaced if one is not
// within two minutes), then holds them a while, as work would.
func (t *tenant) waitBound(ctx context.Context, ns string, names ...string) (string, error) {
	if !t.bound(ctx, ns, names...) {
		return resultUnplaced, nil
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(5+t.rng.IntN(20)) * time.Second):
	}
	return resultDone, nil
}

// bound waits up to two minutes for each pod to be bound, and says whether
// they were.
func (t *tenant) bound(ctx context.Context, ns string, names ...string) bool {
	for _, n := range names {
		err := util.PollSlowly(ctx, 2*time.Minute, "pod "+ns+"/"+n+" bound", func(ctx context.Context) (bool, error) {
			p, err := framework.TestContext.Client.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			return p.Spec.NodeName != "", nil
		})
		if err != nil {
			return false
		}
	}
	return true
}

func (t *tenant) deletePods(ctx context.Context, ns string, names ...string) {
	for _, n := range names {
		_ = framework.TestContext.Client.CoreV1().Pods(ns).Delete(context.WithoutCancel(ctx), n, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
}

// quota is the ResourceQuota of a tenant's requests namespace.
func quota(ns, cpu string) *v1.ResourceQuota {
	return &v1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "soak", Namespace: ns},
		Spec:       v1.ResourceQuotaSpec{Hard: v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse(cpu), v1.ResourcePods: resource.MustParse("30")}},
	}
}
