// Package manifests renders the kustomize overlays Gantry ships
// (config/overlays) into the release's manifests: one YAML file per
// overlay, with every image pinned by the digest `make images` built, so
// that what a cluster runs is exactly what was built and tested.
package manifests

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gantry-dev/gantry/internal/kustomize"
)

// Overlays are the overlays a release renders, by name, as directories
// relative to the repository root: managed (a cluster whose control plane
// cannot be replaced) and full (a cluster running Gantry's kube-apiserver
// and kube-scheduler).
var Overlays = []string{"managed", "full"}

// Dir is the directory of an overlay under the repository root.
func Dir(root, overlay string) string { return filepath.Join(root, "config", "overlays", overlay) }

// Images returns the distinct images of every container, init container
// and ephemeral container of objs' pod templates (Deployments, DaemonSets,
// StatefulSets, Jobs), sorted.
func Images(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		spec, ok, _ := unstructured.NestedMap(o.Object, "spec", "template", "spec")
		if !ok {
			continue
		}
		for _, field := range []string{"initContainers", "containers", "ephemeralContainers"} {
			list, _, _ := unstructured.NestedSlice(spec, field)
			for _, c := range list {
				if m, ok := c.(map[string]any); ok {
					if image, ok := m["image"].(string); ok {
						out = append(out, image)
					}
				}
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// Pin renders the overlay at dir with every image pinned by digest: an
// image gantry.local/<name>:<tag> becomes <registry>/<name>@<digest>, the
// digest being what digests (reference to digest, LayoutDigests of `make
// images`' layout) holds for that reference. The kustomization that does it
// is written into work. An image the layout does not hold is an error, so
// is any image left unpinned.
func Pin(work, dir, registry string, digests map[string]string) ([]*unstructured.Unstructured, error) {
	objs, err := kustomize.Build(dir)
	if err != nil {
		return nil, err
	}
	var images strings.Builder
	var missing []string
	for _, image := range Images(objs) {
		digest, ok := digests[image]
		if !ok {
			missing = append(missing, image)
			continue
		}
		ref, err := name.NewTag(image, name.WeakValidation)
		if err != nil {
			return nil, fmt.Errorf("image %q of %s: %w", image, dir, err)
		}
		target, err := name.NewRepository(strings.TrimSuffix(registry, "/")+"/"+ref.RepositoryStr(), name.WeakValidation)
		if err != nil {
			return nil, fmt.Errorf("--registry %q: %w", registry, err)
		}
		fmt.Fprintf(&images, "- {name: %q, newName: %q, digest: %q}\n", strings.TrimSuffix(image, ":"+ref.TagStr()), target.Name(), digest)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s uses images that are not in the layout (run `make images`): %s", dir, strings.Join(missing, ", "))
	}
	pinned, err := kustomize.BuildOver(work, dir, "images:\n"+images.String(), nil)
	if err != nil {
		return nil, err
	}
	for _, image := range Images(pinned) {
		if _, err := name.NewDigest(image, name.WeakValidation); err != nil {
			return nil, fmt.Errorf("%s: image %q is not pinned by digest", dir, image)
		}
	}
	return pinned, nil
}

// YAML writes objs as one multi-document YAML stream, in order.
func YAML(objs []*unstructured.Unstructured) ([]byte, error) {
	var b bytes.Buffer
	for i, o := range objs {
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(data)
	}
	return b.Bytes(), nil
}
