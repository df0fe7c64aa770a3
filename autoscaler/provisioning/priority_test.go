package provisioning

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1"
	"k8s.io/client-go/tools/cache"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

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

func TestBookingPriorityFromClass(t *testing.T) {
	high := priorityClass("high", 100000, false)
	// A template naming a class, with no priority (or a forged one): the
	// booking has the class's value, as the pods will.
	for _, forged := range []*int32{nil, ptr.To[int32](2147483647), ptr.To[int32](0)} {
		pod := cpuPod("1")
		pod.Spec.PriorityClassName = "high"
		pod.Spec.Priority = forged
		prio, err := book(t, booker(t, []*schedulingv1.PriorityClass{high}), "ml", pod)
		if err != nil || prio == nil || *prio != 100000 {
			t.Errorf("class high, template priority %v: booking priority %v, %v; want 100000", ptr.Deref(forged, -1), ptr.Deref(prio, -1), err)
		}
	}
}

func TestBookingPriorityWithoutClass(t *testing.T) {
	// A raw spec.priority decides nothing: 0 without a default class, the
	// default class's value with one (the lowest of several).
	for _, tc := range []struct {
		name    string
		classes []*schedulingv1.PriorityClass
		want    int32
	}{
		{"no classes", nil, 0},
		{"no default", []*schedulingv1.PriorityClass{priorityClass("high", 100000, false)}, 0},
		{"default", []*schedulingv1.PriorityClass{priorityClass("high", 100000, false), priorityClass("batch", 50, true)}, 50},
		{"two defaults", []*schedulingv1.PriorityClass{priorityClass("a", 70, true), priorityClass("b", 60, true)}, 60},
	} {
		pod := cpuPod("1")
		pod.Spec.Priority = ptr.To[int32](2147483647)
		prio, err := book(t, booker(t, tc.classes), "ml", pod)
		if err != nil || prio == nil || *prio != tc.want {
			t.Errorf("%s: booking priority %v, %v; want %d", tc.name, ptr.Deref(prio, -1), err, tc.want)
		}
	}
}

func TestBookingPriorityRejected(t *testing.T) {
	critical := priorityClass("system-cluster-critical", 2000000000, false)
	quota := func(op v1.ScopeSelectorOperator, values ...string) *v1.ResourceQuota {
		return &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "critical"},
			Spec: v1.ResourceQuotaSpec{ScopeSelector: &v1.ScopeSelector{MatchExpressions: []v1.ScopedResourceSelectorRequirement{
				{ScopeName: v1.ResourceQuotaScopePriorityClass, Operator: op, Values: values}}}}}
	}
	for _, tc := range []struct {
		name, ns, class string
		objs            []client.Object
		reason, msg     string
	}{
		{name: "missing class", ns: "ml", class: "gold",
			reason: ReasonPriorityClassNotFound, msg: `pod set 0-workers: spec.priorityClassName: no PriorityClass "gold"`},
		{name: "system class in a tenant namespace", ns: "ml", class: "system-cluster-critical",
			reason: ReasonPriorityClassForbidden, msg: `spec.priorityClassName "system-cluster-critical" is a system PriorityClass, which namespace ml may not use`},
		{name: "quota for another class", ns: "platform", class: "system-cluster-critical",
			objs:   []client.Object{quota(v1.ScopeSelectorOpIn, "system-node-critical")},
			reason: ReasonPriorityClassForbidden, msg: "namespace platform may not use"},
		{name: "kube-system", ns: "kube-system", class: "system-cluster-critical"},
		{name: "quota for the class", ns: "platform", class: "system-cluster-critical",
			objs: []client.Object{quota(v1.ScopeSelectorOpIn, "system-node-critical", "system-cluster-critical")}},
	} {
		pod := cpuPod("1")
		pod.Spec.PriorityClassName = tc.class
		prio, err := book(t, booker(t, []*schedulingv1.PriorityClass{critical}, tc.objs...), tc.ns, pod)
		if tc.reason == "" {
			if err != nil || prio == nil || *prio != critical.Value {
				t.Errorf("%s: booking priority %v, %v; want %d", tc.name, ptr.Deref(prio, -1), err, critical.Value)
			}
			continue
		}
		rej, ok := asPriorityRejection(err)
		if !ok || rej.reason != tc.reason || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v; want a %s rejection saying %q", tc.name, err, tc.reason, tc.msg)
		}
	}
}
