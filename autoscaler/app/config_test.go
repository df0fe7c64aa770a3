package app

import (
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gantry-dev/gantry/test/util"
)

// render builds the kustomization in autoscaler/config/dir, as
// `kubectl apply -k` would, and decodes its objects.
func render(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	objs, err := util.Kustomize(filepath.Join("..", "config", dir))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// nodeVerbs are the verbs on nodes that the rendered ClusterRoles grant,
// and the provider flag of the rendered Deployment.
func nodeVerbs(objs []runtime.Object) (verbs []string, provider []string) {
	for _, o := range objs {
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			for _, r := range o.Rules {
				if slices.Contains(r.APIGroups, "") && (slices.Contains(r.Resources, "nodes") || slices.Contains(r.Resources, "*")) {
					verbs = append(verbs, r.Verbs...)
				}
			}
		case *appsv1.Deployment:
			for _, a := range o.Spec.Template.Spec.Containers[0].Args {
				if len(a) > 22 && a[:22] == "--node-group-provider=" {
					provider = append(provider, a[22:])
				}
			}
		}
	}
	slices.Sort(verbs)
	return slices.Compact(verbs), provider
}

// TestRBACPerProvider: each node-group provider's overlay grants the node
// rights it needs and no more: Cluster API creates and deletes Nodes
// itself, so the provisioner with the clusterapi provider may not; without
// a provider it writes no node at all. Before, every install bound nodes
// create and delete.
func TestRBACPerProvider(t *testing.T) {
	for dir, want := range map[string]struct {
		verbs    []string
		provider []string
	}{
		".":                   {verbs: []string{"get", "list", "watch"}},
		"overlays/clusterapi": {verbs: []string{"get", "list", "patch", "update", "watch"}, provider: []string{"clusterapi"}},
		"overlays/kwok":       {verbs: []string{"create", "delete", "get", "list", "patch", "update", "watch"}, provider: []string{"kwok"}},
	} {
		verbs, provider := nodeVerbs(render(t, dir))
		if !slices.Equal(verbs, want.verbs) {
			t.Errorf("%s: verbs on nodes %v, want %v", dir, verbs, want.verbs)
		}
		if !slices.Equal(provider, want.provider) {
			t.Errorf("%s: --node-group-provider %v, want %v", dir, provider, want.provider)
		}
	}
}

// TestMetricsRBAC: the provisioner may review tokens and access (its
// /metrics checks callers with the API server), and a ClusterRole lets
// scrapers get /metrics.
func TestMetricsRBAC(t *testing.T) {
	var tokens, access, reader bool
	for _, o := range render(t, ".") {
		cr, ok := o.(*rbacv1.ClusterRole)
		if !ok {
			continue
		}
		for _, r := range cr.Rules {
			switch {
			case cr.Name == "gantry-provisioner" && slices.Contains(r.Resources, "tokenreviews") && slices.Contains(r.Verbs, "create"):
				tokens = true
			case cr.Name == "gantry-provisioner" && slices.Contains(r.Resources, "subjectaccessreviews") && slices.Contains(r.Verbs, "create"):
				access = true
			case cr.Name == "gantry-provisioner-metrics-reader" && slices.Equal(r.NonResourceURLs, []string{"/metrics"}) && slices.Equal(r.Verbs, []string{"get"}):
				reader = true
			}
		}
	}
	if !tokens || !access || !reader {
		t.Errorf("token reviews granted: %v, access reviews granted: %v; metrics-reader ClusterRole: %v", tokens, access, reader)
	}
}
