//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/test/integration/framework"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// TestAdversarialSizeUpdates (security review, finding 1): updates of a
// gated pod with 2000 required terms, shaped to make the narrowing check
// super-linear, get a 422 whose text is small. The time is logged, not
// asserted (see BenchmarkAdversarial for figures).
func TestAdversarialSizeUpdates(t *testing.T) {
	const size = 2000
	const maxErrorBytes = 64 << 10
	cp := framework.Start(t)
	ctx := context.Background()
	pods := cp.Client.CoreV1().Pods("default")

	for _, tc := range []struct {
		name     string
		old, new []v1.NodeSelectorTerm
		wantErr  string
	}{
		{
			// size-2 fillers {b Exists}, {a In [other]}, {a In [other-0]}
			// widened to size terms {a Exists}.
			name: "review-shape",
			old: func() []v1.NodeSelectorTerm {
				var ts []v1.NodeSelectorTerm
				for range size - 2 {
					ts = append(ts, wrappers.Term(wrappers.Req("b", v1.NodeSelectorOpExists)))
				}
				return append(ts, wrappers.Term(wrappers.In("a", "other")), wrappers.Term(wrappers.In("a", "other-0")))
			}(),
			new: func() []v1.NodeSelectorTerm {
				var ts []v1.NodeSelectorTerm
				for range size {
					ts = append(ts, wrappers.Term(wrappers.Req("a", v1.NodeSelectorOpExists)))
				}
				return ts
			}(),
			wantErr: "term 0 is not contained in any single previous term",
		},
		{
			// Every new term narrows only the last old term: size x size
			// comparisons, over the check's budget.
			name: "last-container",
			old: func() []v1.NodeSelectorTerm {
				var ts []v1.NodeSelectorTerm
				for i := range size - 1 {
					ts = append(ts, wrappers.Term(wrappers.In("b", fmt.Sprintf("x-%d", i))))
				}
				return append(ts, wrappers.Term(wrappers.Req("a", v1.NodeSelectorOpExists)))
			}(),
			new: func() []v1.NodeSelectorTerm {
				var ts []v1.NodeSelectorTerm
				for i := range size {
					ts = append(ts, wrappers.Term(wrappers.In("a", fmt.Sprintf("v-%d", i))))
				}
				return ts
			}(),
			wantErr: "too large to prove that it narrows",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			created, err := pods.Create(ctx, newPod(tc.name, true, tc.old), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			updated := created.DeepCopy()
			setTerms(updated, tc.new)
			start := time.Now()
			_, err = pods.Update(ctx, updated, metav1.UpdateOptions{})
			t.Logf("%s: update of %d terms to %d terms answered in %v", tc.name, len(tc.old), len(tc.new), time.Since(start))
			if !apierrors.IsInvalid(err) {
				t.Fatalf("want a 422 Invalid error containing %q, got %.1000v", tc.wantErr, err)
			}
			var status *apierrors.StatusError
			if !errors.As(err, &status) {
				t.Fatalf("not a status error: %T", err)
			}
			size := len(status.ErrStatus.Message)
			if d := status.ErrStatus.Details; d != nil {
				for _, c := range d.Causes {
					size += len(c.Message) + len(c.Field)
				}
			}
			t.Logf("%s: %d bytes of error text", tc.name, size)
			if size >= maxErrorBytes {
				t.Errorf("%d bytes of error text, want < %d", size, maxErrorBytes)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %.2000q does not contain %q", err, tc.wantErr)
			}
			stored, err := pods.Get(ctx, tc.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if stored.ResourceVersion != created.ResourceVersion {
				t.Errorf("rejected update changed the stored pod (resourceVersion %s -> %s)", created.ResourceVersion, stored.ResourceVersion)
			}
		})
	}
}
