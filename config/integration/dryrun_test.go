//go:build integration

package integration

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gantry-dev/gantry/internal/apply"
	"github.com/gantry-dev/gantry/internal/kustomize"
	"github.com/gantry-dev/gantry/release/manifests"
	"github.com/gantry-dev/gantry/test/integration/framework"
	"github.com/gantry-dev/gantry/test/util"
)

// fakeDigests gives every image of the kustomization at dir a digest of
// its own, as `make images`' layout would.
func fakeDigests(t *testing.T, dir string) map[string]string {
	t.Helper()
	objs, err := kustomize.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, image := range manifests.Images(objs) {
		out[image] = fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(image)))
	}
	return out
}

// withComponents writes a kustomization in a new directory: overlay plus
// components, all relative to the repository root.
func withComponents(t *testing.T, root, overlay string, components ...string) string {
	t.Helper()
	dir := t.TempDir()
	for i, c := range components {
		components[i] = filepath.Join(root, c)
	}
	if err := kustomize.WriteWithComponents(dir, filepath.Join(root, overlay), components...); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestManifestsPassServerSideDryRun(t *testing.T) {
	cp := framework.Start(t)
	root := framework.Root(t)
	w := &util.Warnings{}
	cfg := rest.CopyConfig(cp.Config)
	cfg.WarningHandler = w
	a, err := apply.New(cfg, "gantry-dry-run")
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)

	for name, dir := range map[string]string{
		"managed":                  manifests.Dir(root, "managed"),
		"full":                     manifests.Dir(root, "full"),
		"managed+fail-open+capi":   withComponents(t, root, "config/overlays/managed", "config/components/webhook-fail-open", "autoscaler/config/components/clusterapi"),
		"full+kwok":                withComponents(t, root, "config/overlays/full", "autoscaler/config/components/kwok"),
		"kind addons (full, kwok)": filepath.Join(root, "kind", "config", "addons"),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			objs, err := manifests.Pin(t.TempDir(), dir, "registry.example.com/gantry", fakeDigests(t, dir))
			if err != nil {
				t.Fatal(err)
			}
			// Namespaced objects can be dry-run only in a namespace
			// that exists: create the namespaces for real.
			var namespaces []*unstructured.Unstructured
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					namespaces = append(namespaces, o)
				}
			}
			if len(namespaces) == 0 {
				t.Fatal("no Namespace rendered")
			}
			if err := a.Apply(ctx, namespaces, false); err != nil {
				t.Fatal(err)
			}
			w.Take()
			if err := a.Apply(ctx, objs, true); err != nil {
				t.Fatal(err)
			}
			if got := w.Take(); len(got) > 0 {
				t.Errorf("the API server warned:\n%s", strings.Join(got, "\n"))
			}
			// Dry run stored nothing.
			for _, o := range objs {
				if o.GetKind() != "Deployment" {
					continue
				}
				_, err := client.AppsV1().Deployments(o.GetNamespace()).Get(ctx, o.GetName(), metav1.GetOptions{})
				if !apierrors.IsNotFound(err) {
					t.Errorf("Deployment %s after a dry run: %v", apply.Name(o), err)
				}
			}
		})
	}
}
