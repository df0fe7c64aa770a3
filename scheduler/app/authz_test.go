package app

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/server/mux"
	"k8s.io/client-go/rest"
	fwk "k8s.io/kube-scheduler/framework"
	rbacregistryvalidation "k8s.io/kubernetes/pkg/registry/rbac/validation"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"

	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

// demoHandle is the part of a framework handle the extension layer needs to
// build a plugin: a kubeconfig (never dialled here).
type demoHandle struct{ fwk.Handle }

func (demoHandle) KubeConfig() *rest.Config { return &rest.Config{Host: "https://127.0.0.1:1"} }

type demoPlugin struct{}

func (demoPlugin) Name() string { return "Demo" }
func (demoPlugin) RegisterEndpoints(r frameworkext.Router) {
	r.Get("/things/{name}", func(w http.ResponseWriter, req *http.Request) {
		frameworkext.WriteJSON(w, http.StatusOK, req.PathValue("name"))
	})
}

// shippedClusterRoles reads the ClusterRoles of scheduler/config/rbac.yaml.
func shippedClusterRoles(t *testing.T) map[string]*rbacv1.ClusterRole {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "config", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	roles := map[string]*rbacv1.ClusterRole{}
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		r := &rbacv1.ClusterRole{}
		if err := dec.Decode(r); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding rbac.yaml: %v", err)
		}
		if r.Kind != "ClusterRole" {
			t.Fatalf("rbac.yaml holds a %q; only ClusterRoles are expected", r.Kind)
		}
		roles[r.Name] = r
	}
	return roles
}

// TestEndpointsNeedExplicitRBAC serves Gantry's endpoints behind the
// scheduler's serving filters, authorized by the real RBAC authorizer with
// Kubernetes' bootstrap roles and bindings (system:discovery,
// system:basic-user and system:public-info-viewer for every authenticated
// identity) plus the shipped ClusterRoles bound to two users. An identity
// with only the default roles must get 403 on every Gantry endpoint.
func TestEndpointsNeedExplicitRBAC(t *testing.T) {
	ext := frameworkext.New()
	factory := ext.PluginFactoryProxy("Demo", func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
		return demoPlugin{}, nil
	})
	if _, err := factory(context.Background(), nil, demoHandle{}); err != nil {
		t.Fatal(err)
	}

	shipped := shippedClusterRoles(t)
	var clusterRoles []*rbacv1.ClusterRole
	var bindings []*rbacv1.ClusterRoleBinding
	for _, r := range bootstrappolicy.ClusterRoles() {
		clusterRoles = append(clusterRoles, &r)
	}
	for _, b := range bootstrappolicy.ClusterRoleBindings() {
		bindings = append(bindings, &b)
	}
	bind := func(role, user string) {
		if shipped[role] == nil {
			t.Fatalf("rbac.yaml has no ClusterRole %s", role)
		}
		bindings = append(bindings, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role + "-" + user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		})
	}
	for _, r := range shipped {
		clusterRoles = append(clusterRoles, r)
	}
	bind("gantry:scheduler-services-viewer", "viewer")
	bind("gantry:scheduler-score-debugger", "debugger")
	_, static := rbacregistryvalidation.NewTestRuleResolver(nil, nil, clusterRoles, bindings)
	authz := rbac.New(static, static, static, static)
	// The user is named by a header; every named user is authenticated.
	authn := authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
		name := r.Header.Get("X-Test-User")
		if name == "" {
			return nil, false, nil
		}
		return &authenticator.Response{User: &user.DefaultInfo{Name: name, Groups: []string{user.AllAuthenticated}}}, true, nil
	})

	m := mux.NewPathRecorderMux("test")
	installGantryEndpoints(m, true, ext, func() bool { return true })
	srv := httptest.NewServer(withServingFilters(m, authn, authz))
	defer srv.Close()
	do := func(method, path, who, body string) int {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Test-User", who)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}

	p := frameworkext.ServicesPrefix
	for _, tc := range []struct {
		method, path, body string
		// want is the answer to each user.
		anonymous, tenant, viewer, debugger int
	}{
		{method: "GET", path: p + "__services__", anonymous: 401, tenant: 403, viewer: 200, debugger: 403},
		{method: "GET", path: p + "plugins/Demo/things/x", anonymous: 401, tenant: 403, viewer: 200, debugger: 403},
		// Authorized, but no scheduler is attached: 503.
		{method: "GET", path: p + "nodes/n1", anonymous: 401, tenant: 403, viewer: 503, debugger: 403},
		{method: "PUT", path: "/debug/flags/s", body: "3", anonymous: 401, tenant: 403, viewer: 403, debugger: 200},
	} {
		for who, want := range map[string]int{"": tc.anonymous, "tenant": tc.tenant, "viewer": tc.viewer, "debugger": tc.debugger} {
			if got := do(tc.method, tc.path, who, tc.body); got != want {
				t.Errorf("%s %s as %q: %d, want %d", tc.method, tc.path, who, got, want)
			}
		}
	}
	if got := ext.DebugScores(); got != 3 {
		t.Errorf("score debugging after the debugger's PUT: %d, want 3", got)
	}
}

// TestScoreToggleNeedsProfiling: without profiling, /debug/flags/s is not
// served at all, as upstream serves no /debug/flags/v then.
func TestScoreToggleNeedsProfiling(t *testing.T) {
	for _, profiling := range []bool{false, true} {
		m := mux.NewPathRecorderMux("test")
		installGantryEndpoints(m, profiling, frameworkext.New(), func() bool { return true })
		srv := httptest.NewServer(m)
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/debug/flags/s", strings.NewReader("1"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		srv.Close()
		want := http.StatusNotFound
		if profiling {
			want = http.StatusOK
		}
		if resp.StatusCode != want {
			t.Errorf("PUT /debug/flags/s with profiling=%v: %d, want %d", profiling, resp.StatusCode, want)
		}
	}
}
