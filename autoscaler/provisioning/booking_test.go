package provisioning

import (
	"context"
	"errors"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1"
	"k8s.io/client-go/tools/cache"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gantry-dev/gantry/autoscaler/provisioning/priority"
	"github.com/gantry-dev/gantry/autoscaler/simulator"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

func priorityClass(name string, value int32, globalDefault bool) *schedulingv1.PriorityClass {
	return &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value, GlobalDefault: globalDefault}
}

func priorityLister(t *testing.T, classes ...*schedulingv1.PriorityClass) schedulinglisters.PriorityClassLister {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, pc := range classes {
		if err := idx.Add(pc); err != nil {
			t.Fatal(err)
		}
	}
	return schedulinglisters.NewPriorityClassLister(idx)
}

// booker is a Reconciler that can run placeAndBook: a node of 4 CPUs, a
// fake API holding objs, and the PriorityClasses classes.
func booker(t *testing.T, classes []*schedulingv1.PriorityClass, objs ...client.Object) *Reconciler {
	t.Helper()
	r := planner(t)
	scheme := testScheme(t)
	r.Client = fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	if err := nodes.Add(st.MakeNode().Name("n1").Capacity(map[v1.ResourceName]string{v1.ResourceCPU: "4", v1.ResourcePods: "110"}).Obj()); err != nil {
		t.Fatal(err)
	}
	r.Nodes = corelisters.NewNodeLister(nodes)
	r.Pods = corelisters.NewPodLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	r.PriorityClasses = priorityLister(t, classes...)
	r.Clock = testingclock.NewFakeClock(time.Now())
	return r
}

// book runs placeAndBook for one pod like pod in namespace ns and returns
// the booking's priority, or placeAndBook's error.
func book(t *testing.T, r *Reconciler, ns string, pod *v1.Pod) (*int32, error) {
	t.Helper()
	ctx := context.Background()
	c, _ := builtinClass(provv1.ClassCheckCapacity)
	pr := &provv1.ProvisioningRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "train", UID: "u1"}}
	pod.Namespace = ns
	rq := &request{pr: pr, class: c, sets: []simulator.PodSet{{Name: "0-workers", Pod: pod, Count: 1}}}
	if _, err := r.placeAndBook(ctx, rq); err != nil {
		return nil, err
	}
	var rs schedv1alpha1.ReservationList
	if err := r.Client.List(ctx, &rs); err != nil {
		t.Fatal(err)
	}
	if len(rs.Items) != 1 {
		t.Fatalf("%d Reservations booked, want 1", len(rs.Items))
	}
	if p := rs.Items[0].Spec.Template.PreemptionPolicy; p == nil || *p != v1.PreemptNever {
		t.Errorf("booking preemptionPolicy %v, want Never", p)
	}
	return rs.Items[0].Spec.Template.Priority, nil
}

// TestBookingPriorityIsResolved: placeAndBook books at the priority
// package priority resolves for the pods (the class's value, never the
// template's spec.priority), never preempting; a rejected priority fails
// the request with its reason.
func TestBookingPriorityIsResolved(t *testing.T) {
	high := priorityClass("high", 100000, false)
	critical := priorityClass("system-cluster-critical", 2000000000, false)
	pod := cpuPod("1")
	pod.Spec.PriorityClassName = "high"
	pod.Spec.Priority = ptr.To[int32](2147483647)
	prio, err := book(t, booker(t, []*schedulingv1.PriorityClass{high}), "ml", pod)
	if err != nil || prio == nil || *prio != 100000 {
		t.Errorf("class high, template priority 2147483647: booking priority %v, %v; want 100000", ptr.Deref(prio, -1), err)
	}
	for _, tc := range []struct{ class, reason string }{
		{"gold", ReasonPriorityClassNotFound},
		{"system-cluster-critical", ReasonPriorityClassForbidden},
	} {
		pod := cpuPod("1")
		pod.Spec.PriorityClassName = tc.class
		_, err := book(t, booker(t, []*schedulingv1.PriorityClass{critical}), "ml", pod)
		rej, ok := priority.AsRejection(err)
		if !ok || priorityReason(rej) != tc.reason {
			t.Errorf("class %s in namespace ml: %v; want a rejection of reason %s", tc.class, err, tc.reason)
		}
	}
}

// A pod set whose pods request nothing (or only zeros) cannot be booked.
func TestBookable(t *testing.T) {
	if err := bookable([]simulator.PodSet{{Name: "w", Pod: cpuPod("1"), Count: 2}}); err != nil {
		t.Errorf("pods with requests: %v", err)
	}
	zero := cpuPod("0")
	for name, pod := range map[string]*v1.Pod{"none": st.MakePod().Name("p").Obj(), "zero": zero} {
		err := bookable([]simulator.PodSet{{Name: "w", Pod: cpuPod("1"), Count: 1}, {Name: name, Pod: pod, Count: 1}})
		var inv *simulator.InvalidPodSet
		if !errors.As(err, &inv) || inv.PodSet != name {
			t.Errorf("%s: %v, want the set refused", name, err)
		}
	}
}

// TestCapToShare: the share of n of total pods, also where the product of
// a large node's memory in milli-units and the count passes int64 (it
// wrapped negative, and so did the quota the booking was counted for).
func TestCapToShare(t *testing.T) {
	const gi, ti = int64(1) << 30, int64(1) << 40
	for _, tc := range []struct {
		name      string
		held, all int64 // bytes
		n, total  int
		want      int64 // milli-bytes
	}{
		{"a share below what is held", 10 * gi, 8 * gi, 1, 4, 2 * gi * 1000},
		{"what is held below the share", gi, 8 * gi, 2, 4, gi * 1000},
		{"none of them", gi, 8 * gi, 0, 4, 0},
		// 24Ti in milli-bytes times 400 passes int64.
		{"24Ti for 500 pods, 400 to come", 24 * ti, 24 * ti, 400, 500, 24 * ti * 1000 / 500 * 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := v1.ResourceList{v1.ResourceMemory: *resource.NewQuantity(tc.held, resource.BinarySI)}
			all := v1.ResourceList{v1.ResourceMemory: *resource.NewQuantity(tc.all, resource.BinarySI)}
			got := capToShare(held, all, tc.n, tc.total)[v1.ResourceMemory]
			if got.MilliValue() != tc.want {
				t.Errorf("capToShare = %s (%dm), want %dm", got.String(), got.MilliValue(), tc.want)
			}
		})
	}
}
