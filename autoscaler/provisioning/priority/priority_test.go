package priority

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/gantry-dev/gantry/autoscaler/simulator"
	"github.com/gantry-dev/gantry/test/wrappers"
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

// resolveOne runs Resolve for one pod set of pod in namespace ns, with the
// PriorityClasses classes and an API holding objs, and returns the pod
// set's priority, or Resolve's error.
func resolveOne(t *testing.T, classes []*schedulingv1.PriorityClass, ns string, pod *v1.Pod, objs ...client.Object) (*int32, error) {
	t.Helper()
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(objs...).Build()
	pod.Namespace = ns
	sets := []simulator.PodSet{{Name: "0-workers", Pod: pod, Count: 1}}
	if err := Resolve(context.Background(), priorityLister(t, classes...), c, ns, sets); err != nil {
		return nil, err
	}
	return sets[0].Pod.Spec.Priority, nil
}

func cpuPod() *v1.Pod { return wrappers.MakePod("p", "ns").Requests("cpu", "1").Obj() }

func TestBookingPriorityFromClass(t *testing.T) {
	high := priorityClass("high", 100000, false)
	// A template naming a class, with no priority (or a forged one): the
	// pods get the class's value, as admission gives them.
	for _, forged := range []*int32{nil, ptr.To[int32](2147483647), ptr.To[int32](0)} {
		pod := cpuPod()
		pod.Spec.PriorityClassName = "high"
		pod.Spec.Priority = forged
		prio, err := resolveOne(t, []*schedulingv1.PriorityClass{high}, "ml", pod)
		if err != nil || prio == nil || *prio != 100000 {
			t.Errorf("class high, template priority %v: priority %v, %v; want 100000", ptr.Deref(forged, -1), ptr.Deref(prio, -1), err)
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
		pod := cpuPod()
		pod.Spec.Priority = ptr.To[int32](2147483647)
		prio, err := resolveOne(t, tc.classes, "ml", pod)
		if err != nil || prio == nil || *prio != tc.want {
			t.Errorf("%s: priority %v, %v; want %d", tc.name, ptr.Deref(prio, -1), err, tc.want)
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
		rejected        bool
		cause           Cause
		msg             string
	}{
		{name: "missing class", ns: "ml", class: "gold",
			rejected: true, cause: ClassNotFound, msg: `pod set 0-workers: spec.priorityClassName: no PriorityClass "gold"`},
		{name: "system class in a tenant namespace", ns: "ml", class: "system-cluster-critical",
			rejected: true, cause: ClassForbidden, msg: `spec.priorityClassName "system-cluster-critical" is a system PriorityClass, which namespace ml may not use`},
		{name: "quota for another class", ns: "platform", class: "system-cluster-critical",
			objs:     []client.Object{quota(v1.ScopeSelectorOpIn, "system-node-critical")},
			rejected: true, cause: ClassForbidden, msg: "namespace platform may not use"},
		{name: "kube-system", ns: "kube-system", class: "system-cluster-critical"},
		{name: "quota for the class", ns: "platform", class: "system-cluster-critical",
			objs: []client.Object{quota(v1.ScopeSelectorOpIn, "system-node-critical", "system-cluster-critical")}},
	} {
		pod := cpuPod()
		pod.Spec.PriorityClassName = tc.class
		prio, err := resolveOne(t, []*schedulingv1.PriorityClass{critical}, tc.ns, pod, tc.objs...)
		if !tc.rejected {
			if err != nil || prio == nil || *prio != critical.Value {
				t.Errorf("%s: priority %v, %v; want %d", tc.name, ptr.Deref(prio, -1), err, critical.Value)
			}
			continue
		}
		rej, ok := AsRejection(err)
		if !ok || rej.Cause != tc.cause || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v; want a rejection (cause %d) saying %q", tc.name, err, tc.cause, tc.msg)
		}
	}
}
