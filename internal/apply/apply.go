// Package apply applies rendered manifests to a cluster server-side, as
// `kubectl apply --server-side` would, and deletes them: for the cluster
// program, which installs Gantry's manifests, and for the tests of those
// manifests.
package apply

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
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Applier applies objects as one field manager.
type Applier struct {
	dyn          dynamic.Interface
	mapper       meta.RESTMapper
	fieldManager string
}

// New returns an Applier that talks to the cluster of cfg as fieldManager.
// Kinds are looked up through discovery when first used, so CRDs applied
// earlier in a list are found once they are served.
func New(cfg *rest.Config, fieldManager string) (*Applier, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), fieldManager: fieldManager}, nil
}

// Resource is the dynamic client of obj's kind (and namespace).
func (a *Applier) Resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
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

// Apply applies objs in order, taking over fields another manager set.
// With dryRun, the API server validates and admits each object (defaults,
// validation, admission webhooks and policies) and stores nothing.
func (a *Applier) Apply(ctx context.Context, objs []*unstructured.Unstructured, dryRun bool) error {
	opts := metav1.ApplyOptions{FieldManager: a.fieldManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, obj := range objs {
		ri, err := a.Resource(obj)
		if err != nil {
			return err
		}
		if _, err := ri.Apply(ctx, obj.GetName(), obj, opts); err != nil {
			return fmt.Errorf("applying %s %s: %w", obj.GetKind(), Name(obj), err)
		}
	}
	return nil
}

// Delete deletes objs in reverse order (a namespace after what is in it),
// in the foreground; objects already gone are fine. It does not wait for
// them to go.
func (a *Applier) Delete(ctx context.Context, objs []*unstructured.Unstructured) error {
	policy := metav1.DeletePropagationForeground
	for _, obj := range slices.Backward(objs) {
		ri, err := a.Resource(obj)
		if err != nil {
			return err
		}
		if err := ri.Delete(ctx, obj.GetName(), metav1.DeleteOptions{PropagationPolicy: &policy}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s %s: %w", obj.GetKind(), Name(obj), err)
		}
	}
	return nil
}

// Name is obj's namespace/name, or its name when cluster-scoped.
func Name(obj *unstructured.Unstructured) string { return path.Join(obj.GetNamespace(), obj.GetName()) }
