package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

func TestRouteComponents(t *testing.T) {
	r := New(&cluster.Options{Name: "route", WorkDir: t.TempDir(), KubeconfigPath: filepath.Join(t.TempDir(), "kubeconfig")})
	if err := os.MkdirAll(r.clusterDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	const direct = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: /pki/ca.crt
users:
- name: u
  user:
    client-certificate: /pki/admin.crt
    client-key: /pki/admin.key
contexts:
- name: c
  context: {cluster: c, user: u}
current-context: c
`
	if err := os.WriteFile(r.componentsKubeconfig(), []byte(direct), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	// No component runs in this cluster directory: none is restarted.
	restarted, err := r.RouteComponents(ctx, "https://127.0.0.1:9999")
	if err != nil || len(restarted) != 0 {
		t.Fatalf("RouteComponents(proxy) = %v, %v; want none restarted, no error", restarted, err)
	}
	cfg, err := clientcmd.LoadFromFile(r.componentsKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.Clusters["c"]
	if c.Server != "https://127.0.0.1:9999" || !c.InsecureSkipTLSVerify || c.CertificateAuthority != "" {
		t.Errorf("routed cluster: server %q, insecure %v, CA %q; want the proxy, insecure, no CA", c.Server, c.InsecureSkipTLSVerify, c.CertificateAuthority)
	}
	if u := cfg.AuthInfos["u"]; u.ClientCertificate != "/pki/admin.crt" {
		t.Errorf("routed kubeconfig lost the client certificate: %q", u.ClientCertificate)
	}
	if kept, err := os.ReadFile(r.directKubeconfig()); err != nil || string(kept) != direct {
		t.Errorf("the straight kubeconfig was not kept: %v", err)
	}
	// Published while routed: the straight one.
	if err := r.publishKubeconfig(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(r.o.KubeconfigPath); string(got) != direct {
		t.Error("publishKubeconfig wrote the routed kubeconfig for users")
	}

	// Routed again elsewhere: from the straight one, which stays kept.
	if _, err := r.RouteComponents(ctx, "https://127.0.0.1:8888"); err != nil {
		t.Fatal(err)
	}
	if kept, _ := os.ReadFile(r.directKubeconfig()); string(kept) != direct {
		t.Error("routing twice overwrote the straight kubeconfig")
	}

	if _, err := r.RouteComponents(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(r.componentsKubeconfig()); string(got) != direct {
		t.Errorf("routed straight again: the kubeconfig is\n%s\nwant it as written", got)
	}
	if _, err := os.Stat(r.directKubeconfig()); !os.IsNotExist(err) {
		t.Errorf("the kept copy is still there: %v", err)
	}
	if _, err := r.RouteComponents(ctx, ""); err != nil {
		t.Errorf("routing straight a cluster that is straight: %v", err)
	}
}
