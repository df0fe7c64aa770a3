//go:build integration

package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/gantry-dev/gantry/autoscaler/app"
	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	autoscalingv1alpha1 "github.com/gantry-dev/gantry/crds/autoscaling/v1alpha1"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/kind/pkg/nodes"
	"github.com/gantry-dev/gantry/scheduler/schedtest"
)

// nodeGroups is the kwok provider's configuration for these tests: a
// healthy pool, a group one node of each scale-up never comes up in, one
// whose creates fail, a large one for the benchmark, and one none of
// whose nodes come up.
const nodeGroups = `
nodeGroups:
- name: pool
  maxSize: 20
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
- name: flaky
  maxSize: 10
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  failureInjection: {neverReady: 1}
- name: broken
  maxSize: 10
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  failureInjection: {createErrors: 1}
- name: wide
  maxSize: 200
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
- name: stuck
  maxSize: 10
  capacity: {cpu: "4", memory: 16Gi, pods: "110"}
  failureInjection: {neverReady: 10}
`

// withNodeGroups runs the provisioner with the kwok provider and a quick
// scale-down.
func (e *env) withNodeGroups(o *app.Options) {
	path := filepath.Join(e.Dir, "node-groups.yaml")
	if err := os.WriteFile(path, []byte(nodeGroups), 0o600); err != nil {
		e.t.Fatal(err)
	}
	o.NodeGroupProvider, o.NodeGroupConfig = "kwok", path
	o.ScaleDownUnneededTime, o.ScaleDownInterval = 2*time.Second, 500*time.Millisecond
}

// startKubelet stands in for the kwok controller and the node lifecycle
// controller: nodes handed to kwok (its annotation) become Ready and lose
// the not-ready taint admission gave them. The returned func stops it.
func (e *env) startKubelet() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			list, err := e.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err == nil {
				for i := range list.Items {
					n := &list.Items[i]
					if n.Annotations[nodes.KwokAnnotation] == "" || len(n.Spec.Taints) == 0 && isReady(n) {
						continue
					}
					if !isReady(n) {
						n.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.Now()}}
						if n, err = e.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
							continue
						}
					}
					kept := n.Spec.Taints[:0]
					for _, t := range n.Spec.Taints {
						if t.Key != v1.TaintNodeNotReady {
							kept = append(kept, t)
						}
					}
					n.Spec.Taints = kept
					_, _ = e.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	stop = func() { cancel(); <-done }
	e.t.Cleanup(stop)
	return stop
}

func isReady(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue {
			return true
		}
	}
	return false
}

// groupNodes are the nodes of a node group.
func (e *env) groupNodes(group string) []v1.Node {
	e.t.Helper()
	list, err := e.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: nodegroups.LabelNodeGroup + "=" + group})
	if err != nil {
		e.t.Fatal(err)
	}
	return list.Items
}

func (e *env) class(name string, spec autoscalingv1alpha1.ProvisioningClassSpec) {
	e.t.Helper()
	spec.Handler = autoscalingv1alpha1.HandlerAtomicScaleUp
	pc := &autoscalingv1alpha1.ProvisioningClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	if _, err := e.Gantry.AutoscalingV1alpha1().ProvisioningClasses().Create(context.Background(), pc, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) deleteRequest(ns, name string) {
	e.t.Helper()
	ctx := context.Background()
	if err := e.Gantry.AutoscalingXV1().ProvisioningRequests(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.waitFor("request "+name+" gone", 30*time.Second, func() bool {
		_, err := e.Gantry.AutoscalingXV1().ProvisioningRequests(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func seconds(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

// TestAtomicScaleUp runs the atomic scale-up handler on the kwok provider
// against a real kube-apiserver and Gantry's scheduler.
func TestAtomicScaleUp(t *testing.T) {
	e := &env{Env: schedtest.Setup(t), t: t}
	ctx := context.Background()
	e.CreateNodes(1, "4")
	e.StartScheduler(schedtest.GantryProfile)
	e.startKubelet()
	e.startProvisioner(e.withNodeGroups)
	e.template("default", "workers", "2")
	e.class("atomic-pool", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"pool"}})

	t.Run("scales up all at once, books, consumers land, cancellation keeps used nodes", func(t *testing.T) {
		e.t = t
		// node-0 holds 2 of the 10 two-CPU pods; 4 new 4-CPU nodes the rest.
		e.request("default", "big", "atomic-pool", "workers", 10, nil)
		c := e.waitCondition("default", "big", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsProvisioned, 60*time.Second)
		t.Logf("Provisioned: %s", c.Message)
		if got := e.groupNodes("pool"); len(got) != 4 {
			t.Fatalf("%d pool nodes, want 4", len(got))
		}
		uid := e.uid("default", "big")
		if booked, _ := e.bookedPods(uid); booked != 10 {
			t.Fatalf("%d pods booked, want 10", booked)
		}
		e.pod("outsider", "2", "")
		e.pod("consumer", "2", "big")
		e.waitFor("consumer scheduled", 30*time.Second, func() bool { return e.nodeOf("consumer") != "" })
		time.Sleep(2 * time.Second)
		if n := e.nodeOf("outsider"); n != "" {
			t.Fatalf("a pod that does not consume the request took booked capacity on %s", n)
		}
		// Scale-down leaves booked nodes alone, however long they wait.
		if got := e.groupNodes("pool"); len(got) != 4 {
			t.Fatalf("%d pool nodes while booked, want 4", len(got))
		}
		used := e.nodeOf("consumer")
		e.deleteRequest("default", "big")
		// The outsider takes room too once the booking is released; every
		// pool node without a pod goes.
		e.waitFor("unused pool nodes removed", 30*time.Second, func() bool {
			for _, n := range e.groupNodes("pool") {
				if n.Name != used && n.Name != e.nodeOf("outsider") {
					return false
				}
			}
			return true
		})
		if e.nodeOf("consumer") != used {
			t.Fatal("the consumer lost its node")
		}
		for _, p := range []string{"outsider", "consumer"} {
			_ = e.Client.CoreV1().Pods("default").Delete(ctx, p, metav1.DeleteOptions{})
		}
		e.waitFor("pool scaled down once empty", 30*time.Second, func() bool { return len(e.groupNodes("pool")) == 0 })
		if _, err := e.Client.CoreV1().Nodes().Get(ctx, "node-0", metav1.GetOptions{}); err != nil {
			t.Errorf("scale-down removed a node the provisioner did not create: %v", err)
		}
	})

	t.Run("a node never Ready: rolled back, retried until the validity ends", func(t *testing.T) {
		e.t = t
		e.class("atomic-flaky", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"flaky"},
			ProvisioningTimeout: seconds(3 * time.Second), ValidUntilSeconds: ptr.To[int32](12),
			Backoff: &autoscalingv1alpha1.Backoff{Initial: seconds(time.Second), Max: seconds(time.Second)}})
		e.request("default", "flaky", "atomic-flaky", "workers", 6, nil)
		maxSeen := 0
		var c *metav1.Condition
		e.waitFor("Failed", 60*time.Second, func() bool {
			maxSeen = max(maxSeen, len(e.groupNodes("flaky")))
			pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(ctx, "flaky", metav1.GetOptions{})
			if err != nil {
				return false
			}
			for i := range pr.Status.Conditions {
				if pr.Status.Conditions[i].Type == provv1.ConditionFailed {
					c = &pr.Status.Conditions[i]
				}
			}
			return c != nil
		})
		if c.Reason != provisioning.ReasonValidityExpired || !strings.Contains(c.Message, "were not Ready within the provisioning timeout") {
			t.Errorf("Failed: %s: %s", c.Reason, c.Message)
		}
		t.Logf("Failed: %s", c.Message)
		if maxSeen != 2 {
			t.Errorf("saw up to %d flaky nodes at once, want the 2 of one attempt", maxSeen)
		}
		pr, err := e.Gantry.AutoscalingXV1().ProvisioningRequests("default").Get(ctx, "flaky", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := pr.Annotations[provisioning.AnnotationAttempts]; n == "" || n == "1" {
			t.Errorf("attempts %q: want the attempt retried", n)
		}
		if got := e.groupNodes("flaky"); len(got) != 0 {
			t.Errorf("%d flaky nodes left behind", len(got))
		}
		if got := e.bookings(string(pr.UID)); len(got) != 0 {
			t.Errorf("%d reservations left behind", len(got))
		}
	})

	t.Run("a create error rolls the attempt back at once; noRetry fails", func(t *testing.T) {
		e.t = t
		e.class("atomic-broken", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"broken"}})
		e.request("default", "broken", "atomic-broken", "workers", 6, map[string]provv1.Parameter{provv1.ParameterNoRetry: "true"})
		c := e.waitCondition("default", "broken", provv1.ConditionFailed, metav1.ConditionTrue, provv1.ReasonCapacityIsNotFound, 30*time.Second)
		if !strings.Contains(c.Message, "injected failure") {
			t.Errorf("Failed message %q does not carry the provider's error", c.Message)
		}
		if got := e.groupNodes("broken"); len(got) != 0 {
			t.Errorf("%d nodes of a failed scale-up left behind", len(got))
		}
	})

	t.Run("a pod no node group can hold fails at once", func(t *testing.T) {
		e.t = t
		e.template("default", "giant", "64")
		e.request("default", "giant", "atomic-pool", "giant", 1, nil)
		c := e.waitCondition("default", "giant", provv1.ConditionFailed, metav1.ConditionTrue, provisioning.ReasonNoNodeGroupFits, 30*time.Second)
		if !strings.Contains(c.Message, "pool: 1 Insufficient cpu") {
			t.Errorf("Failed message %q does not say why", c.Message)
		}
		if got := e.groupNodes("pool"); len(got) != 0 {
			t.Errorf("%d nodes created for a pod no node can hold", len(got))
		}
	})

	t.Run("deleting a request stops its attempt and removes its nodes", func(t *testing.T) {
		e.t = t
		e.class("atomic-stuck", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"stuck"}})
		e.request("default", "stuck", "atomic-stuck", "workers", 6, nil)
		e.waitCondition("default", "stuck", provv1.ConditionProvisioned, metav1.ConditionFalse, provisioning.ReasonScalingUp, 30*time.Second)
		if got := e.groupNodes("stuck"); len(got) != 2 {
			t.Fatalf("%d stuck nodes, want 2", len(got))
		}
		e.deleteRequest("default", "stuck")
		if got := e.groupNodes("stuck"); len(got) != 0 {
			t.Errorf("%d nodes of a cancelled attempt left behind", len(got))
		}
	})

	t.Run("an expired booking's nodes are scaled down", func(t *testing.T) {
		e.t = t
		e.class("atomic-brief", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"pool"}, BookingDuration: seconds(3 * time.Second)})
		e.request("default", "brief", "atomic-brief", "workers", 6, nil)
		e.waitCondition("default", "brief", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsProvisioned, 60*time.Second)
		n := len(e.groupNodes("pool"))
		if n == 0 {
			t.Fatal("no pool nodes")
		}
		e.waitCondition("default", "brief", provv1.ConditionBookingExpired, metav1.ConditionTrue, provisioning.ReasonBookingExpired, 30*time.Second)
		e.waitFor("expired booking's nodes scaled down", 30*time.Second, func() bool { return len(e.groupNodes("pool")) == 0 })
		t.Logf("%d nodes scaled down after the booking expired", n)
	})

	e.t = t
	for _, name := range []string{"nodes_created", "nodes_rolled_back", "nodes_scaled_down"} {
		if v := counterSum(t, "gantry_provisioning_"+name+"_total"); v == 0 {
			t.Errorf("gantry_provisioning_%s_total is 0", name)
		} else {
			t.Logf("gantry_provisioning_%s_total = %v", name, v)
		}
	}
}

// TestRestartMidScaleUp: the provisioner stops while its attempt's nodes
// come up; the next one finds the attempt on the request, waits for the
// same nodes and books them, creating no node twice.
func TestRestartMidScaleUp(t *testing.T) {
	e := &env{Env: schedtest.Setup(t), t: t}
	e.StartScheduler(schedtest.GantryProfile)
	e.template("default", "workers", "2")
	e.class("atomic-pool", autoscalingv1alpha1.ProvisioningClassSpec{NodeGroups: []string{"pool"}})
	stop := e.startProvisioner(e.withNodeGroups)
	e.request("default", "resumed", "atomic-pool", "workers", 4, nil)
	e.waitCondition("default", "resumed", provv1.ConditionProvisioned, metav1.ConditionFalse, provisioning.ReasonScalingUp, 30*time.Second)
	before := e.groupNodes("pool")
	stop()
	if len(before) != 2 {
		t.Fatalf("%d nodes created, want 2", len(before))
	}
	// The nodes come up while no provisioner runs.
	e.startKubelet()
	e.startProvisioner(e.withNodeGroups)
	e.waitCondition("default", "resumed", provv1.ConditionProvisioned, metav1.ConditionTrue, provv1.ReasonCapacityIsProvisioned, 60*time.Second)
	after := e.groupNodes("pool")
	if len(after) != 2 || after[0].UID != before[0].UID || after[1].UID != before[1].UID {
		t.Errorf("nodes changed across the restart: %d before, %d after", len(before), len(after))
	}
	placed := 0
	for _, r := range e.bookings(e.uid("default", "resumed")) {
		if r.Status.Phase == schedv1alpha1.ReservationAvailable {
			placed += provisioning.BookedPods(&r)
		}
	}
	if placed != 4 {
		t.Errorf("room for %d of 4 pods placed", placed)
	}
}

// counterSum is the sum over a counter's series in the provisioner's
// registry.
func counterSum(t *testing.T, name string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
