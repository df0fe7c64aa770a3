// Package kustomize builds Gantry's kustomizations in process, as
// `kubectl kustomize` (and `kubectl apply -k`) would, for the cluster
// program, the release's manifests and the tests of both.
package kustomize

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Build builds the kustomization in dir and returns its objects in order.
func Build(dir string) ([]*unstructured.Unstructured, error) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range res.Resources() {
		// Through JSON, as a client reads objects: numbers become int64
		// or float64, which unstructured's helpers can copy.
		data, err := r.MarshalJSON()
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		if err := utiljson.Unmarshal(data, &m); err != nil {
			return nil, err
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// BuildOver writes, in dir, a kustomization made of kustomization (the text
// after its resources line) on top of base, with files beside it, and
// builds it. base is a directory; it is referred to relative to dir, as
// kustomize requires.
func BuildOver(dir, base, kustomization string, files map[string][]byte) ([]*unstructured.Unstructured, error) {
	rel, err := relative(dir, base)
	if err != nil {
		return nil, err
	}
	text := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + rel + "\n" + kustomization
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(text), 0o644); err != nil {
		return nil, err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return nil, err
		}
	}
	return Build(dir)
}

// WriteWithComponents writes, in dir, the kustomization a user would write
// to install base with components (directories, as `components:` takes
// them).
func WriteWithComponents(dir, base string, components ...string) error {
	rel, err := relative(dir, base)
	if err != nil {
		return err
	}
	text := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + rel + "\ncomponents:\n"
	for _, c := range components {
		r, err := relative(dir, c)
		if err != nil {
			return err
		}
		text += "- " + r + "\n"
	}
	return os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(text), 0o644)
}

// relative makes dir (created if missing) and returns target relative to
// it, with forward slashes.
func relative(dir, target string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	absTarget, err := filepath.Abs(target)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(absDir, absTarget)
	return filepath.ToSlash(rel), err
}
