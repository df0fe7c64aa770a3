// Package crds finds Gantry's CustomResourceDefinitions on disk and installs
// them into a cluster, waiting until the API server serves them.
package crds

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

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
)

// FieldManager owns the fields of the CRDs Install applies.
const FieldManager = "gantry-cluster"

// Load reads every CustomResourceDefinition in the YAML files under dir.
// Documents of other kinds are skipped; a document that does not parse is an
// error naming its file. A missing dir holds no CRDs.
func Load(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
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
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	for i := 1; i < len(out); i++ {
		if out[i].Name == out[i-1].Name {
			return nil, fmt.Errorf("CRD %s is defined twice under %s", out[i].Name, dir)
		}
	}
	return out, nil
}

func decode(data []byte) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	r := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for doc := 1; ; doc++ {
		var raw map[string]any
		if err := r.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if raw == nil || raw["kind"] != "CustomResourceDefinition" {
			continue
		}
		if raw["apiVersion"] != apiextensionsv1.SchemeGroupVersion.String() {
			return nil, fmt.Errorf("document %d: CustomResourceDefinition must be %s, not %v", doc, apiextensionsv1.SchemeGroupVersion, raw["apiVersion"])
		}
		js, err := json.Marshal(raw)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := json.Unmarshal(js, crd); err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if crd.Name == "" {
			return nil, fmt.Errorf("document %d: CustomResourceDefinition has no metadata.name", doc)
		}
		out = append(out, crd)
	}
}

// Install applies every CRD under dir (server-side apply, so a re-run is a
// no-op) and waits until each is Established. It returns their names.
func Install(ctx context.Context, cfg *rest.Config, dir string, timeout time.Duration) ([]string, error) {
	list, err := Load(dir)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, nil
	}
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list))
	for _, crd := range list {
		crd.TypeMeta = metav1.TypeMeta{APIVersion: apiextensionsv1.SchemeGroupVersion.String(), Kind: "CustomResourceDefinition"}
		body, err := json.Marshal(crd)
		if err != nil {
			return nil, err
		}
		force := true
		if _, err := client.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, crd.Name, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: FieldManager, Force: &force}); err != nil {
			return nil, fmt.Errorf("applying CRD %s: %w", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	for _, name := range names {
		if err := WaitEstablished(ctx, client, name, timeout); err != nil {
			return nil, err
		}
	}
	return names, nil
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
