package metadatapolicy

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/client-go/tools/record"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/gantry-dev/gantry/admission/metadatapolicy/engine"
	"github.com/gantry-dev/gantry/admission/metrics"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
)

// benchPlugin is the in-process plugin over n policies in namespace "bench":
// each selects pods of one app and sets a label, one routes BestEffort pods
// to a scheduler, so a request matches two of them.
func benchPlugin(tb testing.TB, n int) *Plugin {
	s := NewSourceForTest()
	for i := range n {
		spec := policyv1alpha1.MetadataPolicySpec{Rules: []policyv1alpha1.MetadataPolicyRule{{
			PolicyPredicate: policyv1alpha1.PolicyPredicate{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("app-%d", i)}}},
			PolicyAction:    policyv1alpha1.PolicyAction{UpdatedLabels: map[string]policyv1alpha1.LabelValue{"team": policyv1alpha1.LabelValue(fmt.Sprintf("team-%d", i))}},
		}}}
		if i == n-1 {
			spec.Rules = append(spec.Rules, policyv1alpha1.MetadataPolicyRule{
				PolicyPredicate: policyv1alpha1.PolicyPredicate{AnnotationSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"scheduler.alpha.kubernetes.io/qos": "BestEffort"}}},
				PolicyAction:    policyv1alpha1.PolicyAction{SchedulerName: "gantry-best-effort"},
			})
		}
		p, errs := engine.CompileNamespaced(&policyv1alpha1.MetadataPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("policy-%04d", i)}, Spec: spec})
		if errs != nil {
			tb.Fatal(errs)
		}
		s.AddForTest(p)
	}
	p := &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update), source: s,
		reviewer: &Reviewer{Source: s, Recorder: record.NewFakeRecorder(1000), Deployment: metrics.InProcess}}
	p.SetReadyFunc(func() bool { return true })
	return p
}

func admitOnce(tb testing.TB, p *Plugin) {
	pod := &api.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "bench",
		Labels:      map[string]string{"app": "app-0"},
		Annotations: map[string]string{"scheduler.alpha.kubernetes.io/qos": "BestEffort"}}}
	attrs := admission.NewAttributesRecord(pod, nil, api.Kind("Pod").WithVersion("v1"), "bench", "p",
		api.Resource("pods").WithVersion("v1"), "", admission.Create, &metav1.CreateOptions{}, false, nil)
	if err := p.Admit(context.Background(), attrs, nil); err != nil {
		tb.Fatal(err)
	}
	if pod.Labels["team"] != "team-0" || pod.Spec.SchedulerName != "gantry-best-effort" {
		tb.Fatalf("policies not applied: %v %q", pod.Labels, pod.Spec.SchedulerName)
	}
}

var policyCounts = []int{1, 10, 100, 1000}

// BenchmarkAdmitPod is the in-process per-request cost of MetadataPolicy
// admission of a pod create, by number of policies in the namespace.
func BenchmarkAdmitPod(b *testing.B) {
	for _, n := range policyCounts {
		b.Run(fmt.Sprintf("%dpolicies", n), func(b *testing.B) {
			p := benchPlugin(b, n)
			b.ReportAllocs()
			for b.Loop() {
				admitOnce(b, p)
			}
		})
	}
}

// TestAdmitCostByPolicyCount prints the per-request cost for each policy
// count, and its ratio to one policy, measured in one run. It asserts
// nothing about time; it runs when GANTRY_BENCH is set (make bench).
func TestAdmitCostByPolicyCount(t *testing.T) {
	if os.Getenv("GANTRY_BENCH") == "" {
		t.Skip("set GANTRY_BENCH=1 (make bench) to measure")
	}
	var base int64
	fmt.Printf("%-12s %12s %10s %12s\n", "policies", "ns/op", "vs 1", "allocs/op")
	for _, n := range policyCounts {
		p := benchPlugin(t, n)
		r := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				admitOnce(b, p)
			}
		})
		if base == 0 {
			base = r.NsPerOp()
		}
		fmt.Printf("%-12d %12d %9.2fx %12d   (%s per request)\n", n, r.NsPerOp(), float64(r.NsPerOp())/float64(base), r.AllocsPerOp(), time.Duration(r.NsPerOp()))
	}
}
