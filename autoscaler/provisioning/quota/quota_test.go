package quota

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/autoscaler/simulator"
	"github.com/gantry-dev/gantry/test/wrappers"
)

func TestCheckQuota(t *testing.T) {
	pod := wrappers.MakePod("p", "ns").Requests("cpu", "1").Obj()
	pods := Demands([]simulator.PodSet{{Name: "0-p", Pod: pod, Count: 3}})
	q := func(name string, hard, used v1.ResourceList) *v1.ResourceQuota {
		return &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: v1.ResourceQuotaSpec{Hard: hard}, Status: v1.ResourceQuotaStatus{Hard: hard, Used: used}}
	}
	cpu := func(s string) v1.ResourceList { return v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse(s)} }
	if err := Check([]*v1.ResourceQuota{q("roomy", cpu("4"), cpu("1"))}, pods, nil); err != nil {
		t.Errorf("3 CPUs on top of 1 used, limit 4: %v", err)
	}
	err := Check([]*v1.ResourceQuota{q("tight", cpu("4"), cpu("2"))}, pods, nil)
	if err == nil || !strings.Contains(err.Error(), "tight: requests.cpu requested 3, used 2, limited 4") {
		t.Errorf("3 CPUs on top of 2 used, limit 4: %v", err)
	}
	count := q("count", v1.ResourceList{v1.ResourcePods: resource.MustParse("2")}, nil)
	count.Status.Hard = nil // not yet seen by the quota controller: the spec limits
	if err := Check([]*v1.ResourceQuota{count}, pods, nil); err == nil || !strings.Contains(err.Error(), "count: pods requested 3") {
		t.Errorf("3 pods, limit 2: %v", err)
	}
	// A quota scoped to BestEffort pods does not count pods with requests.
	scoped := q("best-effort", v1.ResourceList{v1.ResourcePods: resource.MustParse("1")}, nil)
	scoped.Spec.Scopes = []v1.ResourceQuotaScope{v1.ResourceQuotaScopeBestEffort}
	if err := Check([]*v1.ResourceQuota{scoped}, pods, nil); err != nil {
		t.Errorf("a BestEffort-scoped quota counted burstable pods: %v", err)
	}
}

// TestCheckQuotaHugeCount: a pod set of 2^31 pods is one usage multiplied
// by its count (no slice of 2^31 pods): the quota names the exact totals.
func TestCheckQuotaHugeCount(t *testing.T) {
	pod := wrappers.MakePod("p", "ns").Requests("cpu", "1500m", "memory", "1Ei").Obj()
	hard := v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("1000"), v1.ResourcePods: resource.MustParse("100"),
		v1.ResourceRequestsMemory: resource.MustParse("1Ei")}
	q := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "q"},
		Spec: v1.ResourceQuotaSpec{Hard: hard}, Status: v1.ResourceQuotaStatus{Hard: hard}}
	err := Check([]*v1.ResourceQuota{q}, Demands([]simulator.PodSet{{Name: "0-p", Pod: pod, Count: 1 << 31}}), nil)
	var qe *ExceededError
	if !errors.As(err, &qe) {
		t.Fatalf("2^31 pods in a quota of 100: %v, want an ExceededError", err)
	}
	// 1.5 × 2^31 = 3221225472 CPUs; 2^31 EiB = 2^91 bytes, past int64.
	for _, want := range []string{"q: pods requested 2147483648,", "q: requests.cpu requested 3221225472,", "q: requests.memory requested 2475880078570760549798248448,"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v does not say %q", err, want)
		}
	}
	// Within the quota when it is big enough.
	big := v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("3221225472"), v1.ResourcePods: resource.MustParse("2147483648")}
	q = &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "big"}, Status: v1.ResourceQuotaStatus{Hard: big}}
	if err := Check([]*v1.ResourceQuota{q}, Demands([]simulator.PodSet{{Name: "0-p", Pod: pod, Count: 1 << 31}}), nil); err != nil {
		t.Errorf("2^31 pods in a quota of exactly their size: %v", err)
	}
}

// BenchmarkCheckQuota prints the cost of the quota check for one pod set of
// 1 to 2^31 pods: it is the same at every count (upstream cluster-autoscaler
// has no such check to compare with). Before the check counted per set, it
// built a slice of count pods (16 GiB at 2^31) and matched each.
func BenchmarkCheckQuota(b *testing.B) {
	pod := wrappers.MakePod("p", "ns").Requests("cpu", "1").Obj()
	hard := v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("100"), v1.ResourcePods: resource.MustParse("100")}
	q := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "q"}, Status: v1.ResourceQuotaStatus{Hard: hard}}
	for _, n := range []int{1, 1000, 1000000, 1 << 31} {
		b.Run(fmt.Sprintf("count=%d", n), func(b *testing.B) {
			want := Demands([]simulator.PodSet{{Name: "0-p", Pod: pod, Count: n}})
			b.ReportAllocs()
			for b.Loop() {
				_ = Check([]*v1.ResourceQuota{q}, want, nil)
			}
		})
	}
}

// TestAlreadyCounted: existing pods of the request lower the counts they
// stand for, one pod each, never below zero, only when they are at least
// as large as the set's pod and the quotas count them alike.
func TestAlreadyCounted(t *testing.T) {
	small := wrappers.MakePod("s", "ns").Requests("cpu", "1").Obj()
	large := wrappers.MakePod("l", "ns").Requests("cpu", "4").Obj()
	want := Demands(nil)
	want = append(want, Demand{Pod: large, Count: 2}, Demand{Pod: small, Count: 3})
	hard := v1.ResourceList{v1.ResourceRequestsCPU: resource.MustParse("100")}
	plainQuota := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "q"}, Spec: v1.ResourceQuotaSpec{Hard: hard}}
	highOnly := &v1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "high"},
		Spec: v1.ResourceQuotaSpec{Hard: v1.ResourceList{v1.ResourcePods: resource.MustParse("5")}, ScopeSelector: &v1.ScopeSelector{
			MatchExpressions: []v1.ScopedResourceSelectorRequirement{{ScopeName: v1.ResourceQuotaScopePriorityClass, Operator: v1.ScopeSelectorOpIn, Values: []string{"high"}}}}}}
	high := wrappers.MakePod("hi", "ns").Requests("cpu", "4").PriorityClass("high").Obj()
	huge := wrappers.MakePod("h", "ns").Requests("cpu", "64").Obj()
	tiny := wrappers.MakePod("t", "ns").Requests("cpu", "100m").Obj()
	noRequests := wrappers.MakePod("n", "ns").Obj()
	for _, tc := range []struct {
		name     string
		quotas   []*v1.ResourceQuota
		existing []*v1.Pod
		counts   []int64
	}{
		{name: "none", quotas: []*v1.ResourceQuota{plainQuota}, counts: []int64{2, 3}},
		{name: "one of each", quotas: []*v1.ResourceQuota{plainQuota}, existing: []*v1.Pod{large, small}, counts: []int64{1, 2}},
		{name: "a huge pod stands for one pod only", quotas: []*v1.ResourceQuota{plainQuota}, existing: []*v1.Pod{huge}, counts: []int64{1, 3}},
		{name: "smaller than every set's pod", quotas: []*v1.ResourceQuota{plainQuota}, existing: []*v1.Pod{tiny}, counts: []int64{2, 3}},
		{name: "more than asked", quotas: []*v1.ResourceQuota{plainQuota}, existing: []*v1.Pod{large, large, large, small, small, small, small}, counts: []int64{0, 0}},
		{name: "smaller pods do not stand for larger ones", quotas: []*v1.ResourceQuota{plainQuota}, existing: []*v1.Pod{small, small, small, small}, counts: []int64{2, 0}},
		{name: "no requests", quotas: []*v1.ResourceQuota{plainQuota}, existing: []*v1.Pod{noRequests}, counts: []int64{2, 3}},
		{name: "a quota counts it and not the set's pods", quotas: []*v1.ResourceQuota{plainQuota, highOnly}, existing: []*v1.Pod{high}, counts: []int64{2, 3}},
		{name: "the same pod without the class", quotas: []*v1.ResourceQuota{plainQuota, highOnly}, existing: []*v1.Pod{large}, counts: []int64{1, 3}},
	} {
		got, counted, err := AlreadyCounted(tc.quotas, want, tc.existing)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var counts []int64
		var sum int64
		for i, d := range got {
			counts = append(counts, d.Count)
			sum += want[i].Count - d.Count
		}
		if len(counts) != len(tc.counts) || counts[0] != tc.counts[0] || counts[1] != tc.counts[1] || int64(counted) != sum {
			t.Errorf("%s: counts %v (%d counted), want %v", tc.name, counts, counted, tc.counts)
		}
	}
	if want[0].Count != 2 || want[1].Count != 3 {
		t.Errorf("the demands passed in were changed: %+v", want)
	}
}
