package framework

import (
	"context"
	"fmt"
	"path"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/gantry-dev/gantry/test/util"
)

// ApplyFieldManager owns what the suites apply.
const ApplyFieldManager = "gantry-e2e"

// Applier applies objects server-side to the suite's cluster and deletes
// them again.
type Applier struct {
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

// NewApplier talks to the suite's cluster as its admin.
func NewApplier() (*Applier, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(TestContext.Config)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(TestContext.Config)
	if err != nil {
		return nil, err
	}
	return &Applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

func (a *Applier) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.dyn.Resource(m.Resource).Namespace(obj.GetNamespace()), nil
	}
	return a.dyn.Resource(m.Resource), nil
}

// Apply applies objs in order, server-side as ApplyFieldManager, taking
// over fields another manager set.
func (a *Applier) Apply(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, obj := range objs {
		ri, err := a.resource(obj)
		if err != nil {
			return err
		}
		if _, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: ApplyFieldManager, Force: true}); err != nil {
			return fmt.Errorf("applying %s %s: %w", obj.GetKind(), path.Join(obj.GetNamespace(), obj.GetName()), err)
		}
	}
	return nil
}

// Delete deletes objs in reverse order (a namespace after what is in it),
// in the foreground, and waits until each is gone; objects already gone
// are fine.
func (a *Applier) Delete(ctx context.Context, objs []*unstructured.Unstructured) error {
	for _, obj := range slices.Backward(objs) {
		ri, err := a.resource(obj)
		if err != nil {
			return err
		}
		policy := metav1.DeletePropagationForeground
		if err := ri.Delete(ctx, obj.GetName(), metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	for _, obj := range objs {
		ri, err := a.resource(obj)
		if err != nil {
			return err
		}
		what := fmt.Sprintf("%s %s gone", obj.GetKind(), path.Join(obj.GetNamespace(), obj.GetName()))
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
