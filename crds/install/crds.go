// Package install finds Gantry's CustomResourceDefinitions (and the
// ClusterRoles that come with them) on disk and installs them into a cluster,
// waiting until the API server serves them. The cluster program (kind/), the
// integration-test control plane (test/integration/framework) and the e2e
// suites all install CRDs through it.
package install

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// FieldManager owns the fields of the CRDs Install applies.
const FieldManager = "gantry-cluster"

// Load reads every CustomResourceDefinition in the YAML files under dir.
// Documents of other kinds are skipped; a document that does not parse is an
// error naming its file. A missing dir holds no CRDs.
func Load(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return load(dir, decodeCRDs, "CRD")
}

// LoadRoles reads every ClusterRole in the YAML files under dir: the roles
// that come with Gantry's kinds (crds/rbac), such as those aggregated into
// edit and view. Like Load, it skips other kinds.
func LoadRoles(dir string) ([]*rbacv1.ClusterRole, error) {
	return load(dir, decodeRoles, "ClusterRole")
}

// load decodes the objects of every YAML file under dir, sorted by name;
// what names their kind in errors.
func load[T metav1.Object](dir string, decode func([]byte) ([]T, error), what string) ([]T, error) {
	var out []T
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path == dir {
				return fs.SkipAll
			}
			return err
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		found, err := decode(data)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, found...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	for i := 1; i < len(out); i++ {
		if out[i].GetName() == out[i-1].GetName() {
			return nil, fmt.Errorf("%s %s is defined twice under %s", what, out[i].GetName(), dir)
		}
	}
	return out, nil
}

func decodeCRDs(data []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	return decode(data, "CustomResourceDefinition", apiextensionsv1.SchemeGroupVersion.String(),
		func() *apiextensionsv1.CustomResourceDefinition { return &apiextensionsv1.CustomResourceDefinition{} })
}

func decodeRoles(data []byte) ([]*rbacv1.ClusterRole, error) {
	return decode(data, "ClusterRole", rbacv1.SchemeGroupVersion.String(), func() *rbacv1.ClusterRole { return &rbacv1.ClusterRole{} })
}

// decode returns the documents of kind in data, which must be of
// apiVersion and named; documents of other kinds are skipped.
func decode[T metav1.Object](data []byte, kind, apiVersion string, newObj func() T) ([]T, error) {
	var out []T
	r := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for doc := 1; ; doc++ {
		var raw map[string]any
		if err := r.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if raw == nil || raw["kind"] != kind {
			continue
		}
		if raw["apiVersion"] != apiVersion {
			return nil, fmt.Errorf("document %d: %s must be %s, not %v", doc, kind, apiVersion, raw["apiVersion"])
		}
		js, err := json.Marshal(raw)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		obj := newObj()
		if err := json.Unmarshal(js, obj); err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if obj.GetName() == "" {
			return nil, fmt.Errorf("document %d: %s has no metadata.name", doc, kind)
		}
		out = append(out, obj)
	}
}

// Install applies every CRD under dir (server-side apply, so a re-run is a
// no-op) and waits until each is Established, then applies the ClusterRoles
// found there (LoadRoles). It returns the CRDs' names.
func Install(ctx context.Context, cfg *rest.Config, dir string, timeout time.Duration) ([]string, error) {
	list, err := Load(dir)
	if err != nil {
		return nil, err
	}
	roles, err := LoadRoles(dir)
	if err != nil {
		return nil, err
	}
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list))
	for _, crd := range list {
		crd.TypeMeta = metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "CustomResourceDefinition"}
		if err := apply(ctx, client.ApiextensionsV1().RESTClient(), "customresourcedefinitions", crd.Name, crd); err != nil {
			return nil, fmt.Errorf("applying CRD %s: %w", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	for _, name := range names {
		if err := WaitEstablished(ctx, client, name, timeout); err != nil {
			return nil, err
		}
	}
	if len(roles) > 0 {
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		for _, role := range roles {
			role.TypeMeta = metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRole"}
			if err := apply(ctx, kube.RbacV1().RESTClient(), "clusterroles", role.Name, role); err != nil {
				return nil, fmt.Errorf("applying ClusterRole %s: %w", role.Name, err)
			}
		}
	}
	return names, nil
}

// apply server-side applies the cluster-scoped obj as FieldManager.
func apply(ctx context.Context, c rest.Interface, resource, name string, obj any) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return c.Patch(types.ApplyPatchType).Resource(resource).Name(name).
		Param("fieldManager", FieldManager).Param("force", "true").
		Body(body).Do(ctx).Error()
}

// WaitEstablished waits until the named CRD is Established, and reports why
// not (its NamesAccepted condition) when it is not within timeout.
func WaitEstablished(ctx context.Context, client apiextensionsclient.Interface, name string, timeout time.Duration) error {
	var last *apiextensionsv1.CustomResourceDefinition
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = crd
		return condition(crd, apiextensionsv1.Established) == apiextensionsv1.ConditionTrue, nil
	})
	if err == nil {
		return nil
	}
	reason := "it was never read back"
	if last != nil {
		reason = "conditions: "
		for _, c := range last.Status.Conditions {
			reason += fmt.Sprintf("%s=%s (%s) ", c.Type, c.Status, c.Message)
		}
	}
	return fmt.Errorf("CRD %s not established within %s; %s", name, timeout, strings.TrimSpace(reason))
}

func condition(crd *apiextensionsv1.CustomResourceDefinition, t apiextensionsv1.CustomResourceDefinitionConditionType) apiextensionsv1.ConditionStatus {
	for _, c := range crd.Status.Conditions {
		if c.Type == t {
			return c.Status
		}
	}
	return apiextensionsv1.ConditionUnknown
}
