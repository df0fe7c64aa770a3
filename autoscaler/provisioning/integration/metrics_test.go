//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/autoscaler/app"
	"github.com/gantry-dev/gantry/test/util"
)

// TestMetricsNeedAuthorization: /metrics answers 401 to a caller without
// a token, 403 to one whose ServiceAccount may not get /metrics, and
// serves one bound to gantry-provisioner-metrics-reader. Before, anyone
// who reached the port read it over plain HTTP.
func TestMetricsNeedAuthorization(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	e.startProvisioner(func(o *app.Options) { o.MetricsAddress = addr })

	// Two ServiceAccounts: one bound to the shipped metrics-reader role.
	token := map[string]string{}
	for _, name := range []string{"nosy", "scraper"} {
		if _, err := e.Client.CoreV1().ServiceAccounts("default").Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := e.Client.CoreV1().ServiceAccounts("default").CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		token[name] = tr.Status.Token
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scraper-metrics"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "gantry-provisioner-metrics-reader"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: "default"}}}
	if _, err := e.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The certificate is self-signed.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(token string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
		if err != nil {
			return 0, err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for _, tc := range []struct {
		who, token string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a ServiceAccount without the metrics-reader role", token["nosy"], http.StatusForbidden},
		{"a ServiceAccount bound to gantry-provisioner-metrics-reader", token["scraper"], http.StatusOK},
	} {
		var got int
		// The server starts with the manager; RBAC caches catch up.
		util.Must(t).Poll(ctx, util.Timeout, fmt.Sprintf("GET /metrics as %s answers %d", tc.who, tc.want), func(context.Context) (bool, error) {
			var err error
			got, err = get(tc.token)
			if err != nil {
				return false, err
			}
			return got == tc.want, fmt.Errorf("status %d", got)
		})
		t.Logf("GET /metrics as %s: %d", tc.who, got)
	}
}
