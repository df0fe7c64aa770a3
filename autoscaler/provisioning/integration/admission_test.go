//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
	"github.com/gantry-dev/gantry/test/util"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// TestBookingsPassAdmission: a booking is confined as its namespace's pods
// are. The namespace is restricted to pool a by PodNodeSelector: a
// template with no node selector is booked on pool a only (admission adds
// the namespace's selector), one asking for pool b fails with admission's
// message; the provisioner's identity may create pods as dry runs only.
func TestBookingsPassAdmission(t *testing.T) {
	e := &env{Env: schedtest.SetupWithArgs(t, "--enable-admission-plugins=PodNodeSelector"), t: t}
	ctx := context.Background()
	e.CreateNodes(2, "4")
	for node, pool := range map[string]string{"node-0": "a", "node-1": "b"} {
		n, err := e.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels["pool"] = pool
		if _, err := e.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.StartScheduler(schedtest.GantryProfile)
	e.startProvisioner()
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a",
		Annotations: map[string]string{"scheduler.alpha.kubernetes.io/node-selector": "pool=a"}}}
	if _, err := e.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.template("team-a", "anywhere", "1")
	for _, pt := range []*v1.PodTemplate{
		wrappers.MakePodTemplate("pool-b", "team-a").Requests("cpu", "1").NodeSelector("pool", "b").Obj(),
	} {
		if _, err := e.Client.CoreV1().PodTemplates("team-a").Create(ctx, pt, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("a template with no node selector is booked where the namespace's pods go", func(t *testing.T) {
		e.t = t
		// 4 pods of 1 CPU fill node-0; spread, some would land on node-1.
		e.request("team-a", "anywhere", provv1.ClassCheckCapacity, "anywhere", 4, nil)
		e.waitCondition("team-a", "anywhere", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsFound, util.Timeout)
		for _, res := range e.bookings(e.uid("team-a", "anywhere")) {
			if res.Spec.Template.NodeName != "node-0" {
				t.Errorf("booking %s on %s, outside the namespace's pool a", res.Name, res.Spec.Template.NodeName)
			}
		}
		// One more pod has no room left in pool a.
		e.request("team-a", "more", provv1.ClassCheckCapacity, "anywhere", 1, map[string]provv1.Parameter{provv1.ParameterNoRetry: "true"})
		e.expectFailed("team-a", "more", provv1.ReasonCapacityIsNotFound, "node(s) didn't match Pod's node affinity/selector", "the namespace's selector")
	})

	t.Run("a template outside the namespace's pool fails with admission's message", func(t *testing.T) {
		e.t = t
		e.request("team-a", "elsewhere", provv1.ClassCheckCapacity, "pool-b", 1, nil)
		e.expectFailed("team-a", "elsewhere", provisioning.ReasonPodsNotAdmitted,
			"pod node label selector conflicts with its namespace node label selector", "admission's refusal")
		if got := e.bookings(e.uid("team-a", "elsewhere")); len(got) != 0 {
			t.Errorf("%d reservations booked for a refused template", len(got))
		}
	})

	t.Run("the provisioner creates pods as dry runs only", func(t *testing.T) {
		e.t = t
		c := kubernetes.NewForConfigOrDie(e.asProvisioner())
		pod := wrappers.MakePod("real", "default").Requests("cpu", "1").Obj()
		_, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "gantry-provisioner may create pods as dry runs only") {
			t.Errorf("a pod created for real as the provisioner: %v, want refused by gantry-provisioner-dry-run-pods", err)
		}
		if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("a dry run as the provisioner: %v", err)
		}
	})
}
