package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const widget = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.gantry.dev
spec:
  group: example.gantry.dev
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object}
`

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a/widgets.yaml", widget)
	gadget := strings.ReplaceAll(strings.ReplaceAll(widget, "widgets", "gadgets"), "Widget", "Gadget")
	// Several documents in one file, one of another kind, and an empty one.
	write(t, dir, "b/more.yml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\n---\n"+gadget)
	write(t, dir, "README.md", "not yaml: [")

	list, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range list {
		names = append(names, c.Name)
	}
	if diff := cmp.Diff([]string{"gadgets.example.gantry.dev", "widgets.example.gantry.dev"}, names); diff != "" {
		t.Errorf("loaded CRDs (-want +got):\n%s", diff)
	}
	if list[1].Spec.Versions[0].Name != "v1" || !list[1].Spec.Versions[0].Served {
		t.Errorf("widget versions decoded wrongly: %+v", list[1].Spec.Versions)
	}
}

func TestLoadErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		files   map[string]string
		wantErr string
	}{
		"malformed yaml names the file": {
			files:   map[string]string{"bad.yaml": "kind: CustomResourceDefinition\n  name: [unclosed"},
			wantErr: "bad.yaml",
		},
		"wrong apiVersion": {
			files:   map[string]string{"old.yaml": strings.Replace(widget, "apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1", 1)},
			wantErr: "must be apiextensions.k8s.io/v1",
		},
		"nameless": {
			files:   map[string]string{"anon.yaml": strings.Replace(widget, "name: widgets.example.gantry.dev", "labels: {}", 1)},
			wantErr: "no metadata.name",
		},
		"defined twice": {
			files:   map[string]string{"one.yaml": widget, "two.yaml": widget},
			wantErr: "defined twice",
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for f, c := range tc.files {
				write(t, dir, f, c)
			}
			_, err := Load(dir)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Load error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestLoadMissingDirHoldsNothing(t *testing.T) {
	list, err := Load(filepath.Join(t.TempDir(), "absent"))
	if err != nil || len(list) != 0 {
		t.Errorf("Load(absent) = %v, %v; want nothing and no error", list, err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(widget))
	f.Add([]byte("---\n---\nkind: CustomResourceDefinition\napiVersion: apiextensions.k8s.io/v1\n"))
	f.Add([]byte("{\"kind\":\"CustomResourceDefinition\"}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		list, err := decodeCRDs(data)
		if err != nil {
			return
		}
		for _, c := range list {
			if c.Name == "" {
				t.Fatalf("decode returned a nameless CRD without error")
			}
		}
	})
}

// TestShippedRoles: the roles under crds/ that aggregate into the
// user-facing roles (docs/security.md's tenant) never let a tenant write a
// status subresource or reach a cluster-scoped Gantry kind.
func TestShippedRoles(t *testing.T) {
	roles, err := LoadRoles("..")
	if err != nil {
		t.Fatal(err)
	}
	if len(roles) == 0 {
		t.Fatal("no ClusterRole found under crds/")
	}
	clusterScoped := map[string]bool{"reservations": true, "provisioningclasses": true, "clustermetadatapolicies": true}
	writes := map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true, "*": true}
	for _, role := range roles {
		aggregated := false
		for k := range role.Labels {
			aggregated = aggregated || strings.HasPrefix(k, "rbac.authorization.k8s.io/aggregate-to-")
		}
		if !aggregated {
			continue
		}
		for _, rule := range role.Rules {
			for _, res := range rule.Resources {
				base, sub, _ := strings.Cut(res, "/")
				if clusterScoped[base] || res == "*" {
					t.Errorf("%s grants %v on %s, a cluster-scoped kind", role.Name, rule.Verbs, res)
				}
				for _, v := range rule.Verbs {
					if sub != "" && writes[v] {
						t.Errorf("%s grants %s on %s", role.Name, v, res)
					}
				}
			}
		}
	}
}
