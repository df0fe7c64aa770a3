package framework

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gantry-dev/gantry/internal/apply"
	"github.com/gantry-dev/gantry/test/util"
)

// ApplyFieldManager owns what the suites apply.
const ApplyFieldManager = "gantry-e2e"

// Applier applies objects server-side to the suite's cluster and deletes
// them again.
type Applier struct{ a *apply.Applier }

// NewApplier talks to the suite's cluster as its admin.
func NewApplier() (*Applier, error) {
	a, err := apply.New(TestContext.Config, ApplyFieldManager)
	if err != nil {
		return nil, err
	}
	return &Applier{a: a}, nil
}

// Apply applies objs in order, server-side as ApplyFieldManager, taking
// over fields another manager set.
func (a *Applier) Apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	return a.a.Apply(ctx, objs, false)
}

// Delete deletes objs in reverse order (a namespace after what is in it),
// in the foreground, and waits until each is gone; objects already gone
// are fine.
func (a *Applier) Delete(ctx context.Context, objs []*unstructured.Unstructured) error {
	if err := a.a.Delete(ctx, objs); err != nil {
		return err
	}
	for _, obj := range objs {
		ri, err := a.a.Resource(obj)
		if err != nil {
			return err
		}
		what := fmt.Sprintf("%s %s gone", obj.GetKind(), apply.Name(obj))
		if err := util.Poll(ctx, util.LongTimeout, what, func(ctx context.Context) (bool, error) {
			_, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		}); err != nil {
			return err
		}
	}
	return nil
}

// Missing returns the objects of objs the cluster does not have, so a spec
// can apply and later delete those alone and leave what an install put
// there as it was.
func (a *Applier) Missing(ctx context.Context, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, obj := range objs {
		ri, err := a.a.Resource(obj)
		if err != nil {
			return nil, err
		}
		_, err = ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, obj)
		case err != nil:
			return nil, fmt.Errorf("%s %s: %w", obj.GetKind(), apply.Name(obj), err)
		}
	}
	return out, nil
}
