//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/autoscaler/app"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// shape changes the pod spec of a template whose pods select each other
// by selector.
type shape func(spec *v1.PodSpec, selector *metav1.LabelSelector)

// antiAffine pods may not share a node: every pod's PreFilter reads every
// node.
func antiAffine(spec *v1.PodSpec, selector *metav1.LabelSelector) {
	spec.Affinity = &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []v1.PodAffinityTerm{{LabelSelector: selector, TopologyKey: v1.LabelHostname}},
	}}
}

// spreadOverNodes spreads pods over nodes with at most maxSkew between
// two: every pod's PreFilter reads every node.
func spreadOverNodes(maxSkew int32) shape {
	return func(spec *v1.PodSpec, selector *metav1.LabelSelector) {
		spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{
			MaxSkew: maxSkew, TopologyKey: v1.LabelHostname, WhenUnsatisfiable: v1.DoNotSchedule, LabelSelector: selector,
		}}
	}
}

// shapedTemplate creates a PodTemplate of pods labelled app=name, each
// requesting cpu, shaped by each of shapes.
func (e *env) shapedTemplate(ns, name, cpu string, shapes ...shape) {
	e.t.Helper()
	pt := wrappers.MakePodTemplate(name, ns).Requests("cpu", cpu).Obj()
	pt.Template.Labels = map[string]string{"app": name}
	for _, s := range shapes {
		s(&pt.Template.Spec, &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}})
	}
	if _, err := e.Client.CoreV1().PodTemplates(ns).Create(context.Background(), pt, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// TestSimulationBudget: a request whose simulation needs more evaluations
// than --simulation-budget Fails with SimulationBudgetExceeded, naming the
// budget, and books nothing; a request beside it is booked.
func TestSimulationBudget(t *testing.T) {
	e := newEnv(t)
	e.CreateNodes(100, "4")
	e.StartScheduler(schedtest.GantryProfile)
	e.startProvisioner(func(o *app.Options) { o.SimulationBudget = 5000 })
	e.shapedTemplate("default", "spread", "1", antiAffine)
	e.template("default", "workers", "1")
	// 401 pods, one a node, on 100 nodes: each pod's PreFilter alone counts
	// 100 evaluations.
	e.request("default", "wide", provv1.ClassCheckCapacity, "spread", 401, nil)
	e.request("default", "narrow", provv1.ClassCheckCapacity, "workers", 10, nil)
	e.expectFailed("default", "wide", provisioning.ReasonSimulationBudgetExceeded,
		"needed more than its budget of 5000 filter evaluations", "the budget")
	e.waitCondition("default", "narrow", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
	if got := e.bookings(e.uid("default", "wide")); len(got) != 0 {
		t.Errorf("%d reservations booked for a request past the budget", len(got))
	}
}

// TestNamespacesSimulatedInTurn: one namespace's expensive requests, all
// queued first, do not hold up another namespace's small request: it is
// simulated in the next turn, and Provisioned while most of them wait.
func TestNamespacesSimulatedInTurn(t *testing.T) {
	e := newEnv(t)
	e.CreateNodes(300, "4")
	e.StartScheduler(schedtest.GantryProfile)
	// Each of greedy's attempts spends the whole budget: about 0.4 s of CPU.
	e.startProvisioner(func(o *app.Options) { o.SimulationBudget = 500_000 })
	e.namespaceWithQuota("greedy", "100000")
	e.namespaceWithQuota("other", "100")
	// No constraint in practice (a skew of 1000), at its full cost.
	e.shapedTemplate("greedy", "spread", "10m", spreadOverNodes(1000))
	e.template("other", "small", "1")
	// 5000 pods that each count 300 evaluations for their PreFilter: the
	// budget runs out after about 1650.
	const greedy = 20
	for i := range greedy {
		e.request("greedy", fmt.Sprintf("r%d", i), provv1.ClassCheckCapacity, "spread", 5000, nil)
	}
	start := time.Now()
	e.request("other", "small", provv1.ClassCheckCapacity, "small", 10, nil)
	e.waitCondition("other", "small", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
	took := time.Since(start)
	ctx := context.Background()
	decided := func() int {
		list, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("greedy").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, pr := range list.Items {
			if c := meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
				if c.Reason != provisioning.ReasonSimulationBudgetExceeded {
					t.Errorf("greedy's %s failed with %s: %s", pr.Name, c.Reason, c.Message)
				}
				n++
			}
		}
		return n
	}
	atSmall := decided()
	t.Logf("other's request Provisioned after %s, with %d of greedy's %d requests decided", took, atSmall, greedy)
	// In turn, other waits for at most the turn running when it came; in
	// order of arrival, for all of greedy's.
	if atSmall > greedy/2 {
		t.Errorf("other's request waited for %d of greedy's %d requests", atSmall, greedy)
	}
	if err := util.Poll(ctx, 5*util.Timeout, "every request of greedy decided", func(context.Context) (bool, error) {
		return decided() == greedy, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestQuotaConstraintsOfPodsWithoutRequests: in a namespace whose quota
// tracks requests.cpu, a request for pods that request no CPU is refused
// as quota admission refuses such pods, with its message.
func TestQuotaConstraintsOfPodsWithoutRequests(t *testing.T) {
	e := setup(t)
	q := e.namespaceWithQuota("constrained", "10")
	// ResourceQuota admission needs the quota's status (there is no quota
	// controller here).
	e.quotaUsed(q, "0")
	pt := wrappers.MakePodTemplate("bare", "constrained").Obj()
	if _, err := e.Client.CoreV1().PodTemplates("constrained").Create(context.Background(), pt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.request("constrained", "bare", provv1.ClassCheckCapacity, "bare", 1, nil)
	e.expectFailed("constrained", "bare", provisioning.ReasonPodsNotAdmitted, "must specify requests.cpu", "the quota's constraint")

	// Without a quota, such pods are admitted, but a booking could hold
	// nothing for them.
	pt.Namespace = "default"
	if _, err := e.Client.CoreV1().PodTemplates("default").Create(context.Background(), pt, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.request("default", "bare", provv1.ClassCheckCapacity, "bare", 1, nil)
	e.expectFailed("default", "bare", provisioning.ReasonUnsupportedPods, "its pods request no resources", "the empty booking")
}
