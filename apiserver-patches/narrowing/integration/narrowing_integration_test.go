//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/e2e/framework/controlplane"
)

func in(key string, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
}

func op(key string, o corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: o, Values: values}
}

func terms(ts ...[]corev1.NodeSelectorRequirement) []corev1.NodeSelectorTerm {
	out := make([]corev1.NodeSelectorTerm, 0, len(ts))
	for _, t := range ts {
		out = append(out, corev1.NodeSelectorTerm{MatchExpressions: t})
	}
	return out
}

func r(rs ...corev1.NodeSelectorRequirement) []corev1.NodeSelectorRequirement { return rs }

func newPod(name string, gated bool, required []corev1.NodeSelectorTerm) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers:  []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
			Tolerations: []corev1.Toleration{{Key: "gantry.dev/spot", Operator: corev1.TolerationOpExists}},
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: required},
			}},
		},
	}
	if gated {
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "gantry.dev/queue"}}
	}
	return p
}

func TestGatedPodUpdates(t *testing.T) {
	cp := controlplane.Start(t)
	ctx := context.Background()
	ns := "default"
	pods := cp.Client.CoreV1().Pods(ns)

	broad := terms(r(in("zone", "a", "b", "c")), r(op("rank", corev1.NodeSelectorOpGt, "5")))
	for _, tc := range []struct {
		name    string
		gated   bool
		old     []corev1.NodeSelectorTerm
		edit    func(p *corev1.Pod)
		wantErr string // "" accepts
	}{
		{name: "narrow In and ungate", gated: true, old: broad,
			edit: func(p *corev1.Pod) {
				setTerms(p, terms(r(in("zone", "a"))))
				p.Spec.SchedulingGates = nil
			}},
		{name: "split and tighten Gt", gated: true, old: broad,
			edit: func(p *corev1.Pod) {
				setTerms(p, terms(r(in("zone", "a"), in("type", "x")), r(in("zone", "b")), r(op("rank", corev1.NodeSelectorOpGt, "9"))))
			}},
		{name: "padded integer admitted by Gt", gated: true, old: broad,
			edit: func(p *corev1.Pod) { setTerms(p, terms(r(in("rank", "07")))) }},
		{name: "drop tolerations", gated: true, old: broad,
			edit: func(p *corev1.Pod) { p.Spec.Tolerations = nil }},
		{name: "widen In", gated: true, old: broad,
			edit:    func(p *corev1.Pod) { setTerms(p, terms(r(in("zone", "a", "d")))) },
			wantErr: "term 0 admits no label rank, zone=d, which no previous term admits"},
		{name: "loosen Gt", gated: true, old: broad,
			edit:    func(p *corev1.Pod) { setTerms(p, terms(r(op("rank", corev1.NodeSelectorOpGt, "2")))) },
			wantErr: "term 0 admits rank=3"},
		{name: "merge terms", gated: true, old: terms(r(in("zone", "a")), r(in("zone", "b"))),
			edit:    func(p *corev1.Pod) { setTerms(p, terms(r(in("zone", "a", "b")))) },
			wantErr: "not contained in any single previous term"},
		{name: "remove required affinity", gated: true, old: broad,
			edit:    func(p *corev1.Pod) { p.Spec.Affinity = nil },
			wantErr: "may not be removed while the pod has scheduling gates"},
		{name: "non-gated: narrowing is upstream's immutable-field error", gated: false, old: broad,
			edit:    func(p *corev1.Pod) { setTerms(p, terms(r(in("zone", "a")))) },
			wantErr: "pod updates may not change fields"},
		{name: "non-gated: dropping a toleration is upstream's error", gated: false, old: broad,
			edit:    func(p *corev1.Pod) { p.Spec.Tolerations = nil },
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

func setTerms(p *corev1.Pod, ts []corev1.NodeSelectorTerm) {
	p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = ts
}
