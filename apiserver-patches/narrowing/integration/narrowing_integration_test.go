//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/test/integration/framework"
	"github.com/gantry-dev/gantry/test/wrappers"
)

func newPod(name string, gated bool, required []v1.NodeSelectorTerm) *v1.Pod {
	p := wrappers.MakePod(name, "").Toleration("gantry.dev/spot").RequiredTerms(required...)
	if gated {
		p.Gated("gantry.dev/queue")
	}
	return p.Obj()
}

func terms(ts ...v1.NodeSelectorTerm) []v1.NodeSelectorTerm { return ts }

func TestGatedPodUpdates(t *testing.T) {
	cp := framework.Start(t)
	ctx := context.Background()
	ns := "default"
	pods := cp.Client.CoreV1().Pods(ns)

	broad := terms(wrappers.Term(wrappers.In("zone", "a", "b", "c")), wrappers.Term(wrappers.Req("rank", v1.NodeSelectorOpGt, "5")))
	for _, tc := range []struct {
		name    string
		gated   bool
		old     []v1.NodeSelectorTerm
		edit    func(p *v1.Pod)
		wantErr string // "" accepts
	}{
		{name: "narrow In and ungate", gated: true, old: broad,
			edit: func(p *v1.Pod) {
				setTerms(p, terms(wrappers.Term(wrappers.In("zone", "a"))))
				p.Spec.SchedulingGates = nil
			}},
		{name: "split and tighten Gt", gated: true, old: broad,
			edit: func(p *v1.Pod) {
				setTerms(p, terms(wrappers.Term(wrappers.In("zone", "a"), wrappers.In("type", "x")), wrappers.Term(wrappers.In("zone", "b")), wrappers.Term(wrappers.Req("rank", v1.NodeSelectorOpGt, "9"))))
			}},
		{name: "padded integer admitted by Gt", gated: true, old: broad,
			edit: func(p *v1.Pod) { setTerms(p, terms(wrappers.Term(wrappers.In("rank", "07")))) }},
		{name: "drop tolerations", gated: true, old: broad,
			edit: func(p *v1.Pod) { p.Spec.Tolerations = nil }},
		{name: "widen In", gated: true, old: broad,
			edit:    func(p *v1.Pod) { setTerms(p, terms(wrappers.Term(wrappers.In("zone", "a", "d")))) },
			wantErr: "term 0 admits no label rank, zone=d, which no previous term admits"},
		{name: "loosen Gt", gated: true, old: broad,
			edit:    func(p *v1.Pod) { setTerms(p, terms(wrappers.Term(wrappers.Req("rank", v1.NodeSelectorOpGt, "2")))) },
			wantErr: "term 0 admits rank=3"},
		{name: "merge terms", gated: true, old: terms(wrappers.Term(wrappers.In("zone", "a")), wrappers.Term(wrappers.In("zone", "b"))),
			edit:    func(p *v1.Pod) { setTerms(p, terms(wrappers.Term(wrappers.In("zone", "a", "b")))) },
			wantErr: "not contained in any single previous term"},
		{name: "remove required affinity", gated: true, old: broad,
			edit:    func(p *v1.Pod) { p.Spec.Affinity = nil },
			wantErr: "may not be removed while the pod has scheduling gates"},
		{name: "non-gated: narrowing is upstream's immutable-field error", gated: false, old: broad,
			edit:    func(p *v1.Pod) { setTerms(p, terms(wrappers.Term(wrappers.In("zone", "a")))) },
			wantErr: "pod updates may not change fields"},
		{name: "non-gated: dropping a toleration is upstream's error", gated: false, old: broad,
			edit:    func(p *v1.Pod) { p.Spec.Tolerations = nil },
			wantErr: "existing toleration can not be modified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ToLower(strings.NewReplacer(" ", "-", ":", "", "'", "").Replace(tc.name))
			created, err := pods.Create(ctx, newPod(name, tc.gated, tc.old), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			updated := created.DeepCopy()
			tc.edit(updated)
			_, err = pods.Update(ctx, updated, metav1.UpdateOptions{})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("update rejected: %v", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want a 422 Invalid error containing %q, got %v", tc.wantErr, err)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not contain %q", err, tc.wantErr)
			}
			// Nothing of a rejected update is stored.
			stored, gerr := pods.Get(ctx, name, metav1.GetOptions{})
			if gerr != nil {
				t.Fatal(gerr)
			}
			if stored.ResourceVersion != created.ResourceVersion {
				t.Errorf("rejected update changed the stored pod (resourceVersion %s -> %s)", created.ResourceVersion, stored.ResourceVersion)
			}
		})
	}
}

func setTerms(p *v1.Pod, ts []v1.NodeSelectorTerm) { wrappers.SetRequiredTerms(p, ts...) }

// Numeric tolerations (KEP-5471, alpha): a gated pod may lower an Lt value
// or drop a toleration, never loosen one; a pod without gates keeps
// upstream's rule.
func TestGatedPodNumericTolerations(t *testing.T) {
	cp := framework.Start(t, "--feature-gates=TaintTolerationComparisonOperators=true")
	ctx := context.Background()
	pods := cp.Client.CoreV1().Pods("default")
	numeric := func(op v1.TolerationOperator, value string) v1.Toleration {
		return v1.Toleration{Key: "gantry.dev/rank", Operator: op, Value: value, Effect: v1.TaintEffectNoSchedule}
	}
	for _, tc := range []struct {
		name    string
		gated   bool
		edit    []v1.Toleration
		wantErr string
	}{
		{name: "lower Lt", gated: true, edit: []v1.Toleration{numeric(v1.TolerationOpLt, "3"), numeric(v1.TolerationOpGt, "9")}},
		{name: "raise Gt and drop Lt", gated: true, edit: []v1.Toleration{numeric(v1.TolerationOpGt, "12")}},
		{name: "Equal inside Lt", gated: true, edit: []v1.Toleration{numeric(v1.TolerationOpEqual, "2")},
			wantErr: "toleration 0 tolerates the taint gantry.dev/rank=2:NoSchedule, which no previous toleration does"},
		{name: "raise Lt", gated: true, edit: []v1.Toleration{numeric(v1.TolerationOpLt, "8"), numeric(v1.TolerationOpGt, "9")},
			wantErr: "toleration 0 tolerates the taint gantry.dev/rank=7:NoSchedule"},
		{name: "non-gated: lower Lt is upstream's error", edit: []v1.Toleration{numeric(v1.TolerationOpLt, "3"), numeric(v1.TolerationOpGt, "9")},
			wantErr: "existing toleration can not be modified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := strings.ToLower(strings.NewReplacer(" ", "-", ":", "", "'", "").Replace(tc.name))
			p := wrappers.MakePod(name, "").Obj()
			p.Spec.Tolerations = []v1.Toleration{numeric(v1.TolerationOpLt, "5"), numeric(v1.TolerationOpGt, "9")}
			if tc.gated {
				p.Spec.SchedulingGates = []v1.PodSchedulingGate{{Name: "gantry.dev/queue"}}
			}
			created, err := pods.Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			updated := created.DeepCopy()
			updated.Spec.Tolerations = tc.edit
			_, err = pods.Update(ctx, updated, metav1.UpdateOptions{})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("update rejected: %v", err)
			case tc.wantErr != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("want a 422 Invalid error containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}
