package faultproxy

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// testCA is a self-signed CA: its certificate and key, PEM.
func testCA(t *testing.T) (certPEM, keyPEM []byte, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := cert.NewSelfSignedCACert(cert.Config{CommonName: "test-ca"}, key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err = cert.EncodeCertificates(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	return certPEM, keyPEM, pool
}

// A proxy on a cluster's path: a certificate the cluster's CA signed,
// each client's credentials passed on (never the target's), and ruled
// through its control API.
func TestForwardingProxyAndControl(t *testing.T) {
	backend := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Authorization", r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusOK)
	}))
	defer backend.Close()
	backendCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: backend.Certificate().Raw})
	caCert, caKey, pool := testCA(t)
	cert, err := SignedCertificate(caCert, caKey, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := &rest.Config{Host: backend.URL, BearerToken: "the-proxy's-own", TLSClientConfig: rest.TLSClientConfig{CAData: backendCA}}
	p, err := NewWithOptions(target, Options{Listener: l, Certificate: cert, ForwardCredentials: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if p.URL() != "https://"+l.Addr().String() {
		t.Errorf("URL %s, want the listener's %s", p.URL(), l.Addr())
	}
	// The client verifies the proxy with the CA alone.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	do := func(agent, token string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, p.URL()+"/api/v1/pods", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("User-Agent", agent)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Authorization")
	}
	if code, auth := do("gantry-provisioner/v1", "tenant"); code != http.StatusOK || auth != "Bearer tenant" {
		t.Errorf("a client's request: %d with Authorization %q at kube-apiserver, want 200 with its own token", code, auth)
	}
	if code, auth := do("gantry-provisioner/v1", ""); code != http.StatusOK || auth != "" {
		t.Errorf("an anonymous request: %d with Authorization %q at kube-apiserver, want none: the proxy adds no credentials", code, auth)
	}

	control := httptest.NewServer(p.ControlHandler())
	defer control.Close()
	remote := Remote{Do: func(ctx context.Context, method, path string, body []byte) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, method, control.URL+path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			return nil, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, out)
		}
		return out, err
	}}
	ctx := context.Background()
	if err := remote.Add(ctx, Rule{UserAgent: "gantry-webhook/", Status: http.StatusServiceUnavailable}); err != nil {
		t.Fatal(err)
	}
	if code, _ := do("gantry-webhook/v1", "w"); code != http.StatusServiceUnavailable {
		t.Errorf("after a rule for gantry-webhook: %d, want 503", code)
	}
	if code, _ := do("gantry-provisioner/v1", "p"); code != http.StatusOK {
		t.Errorf("another agent after the rule: %d, want 200", code)
	}
	if n, err := remote.Injected(ctx); err != nil || n != 1 {
		t.Errorf("Injected: %d, %v, want 1", n, err)
	}
	agents, err := remote.Agents(ctx)
	if err != nil || agents["gantry-provisioner"] != 3 || agents["gantry-webhook"] != 1 {
		t.Errorf("Agents: %v, %v, want gantry-provisioner 3, gantry-webhook 1", agents, err)
	}
	if err := remote.Clear(ctx); err != nil {
		t.Fatal(err)
	}
	if code, _ := do("gantry-webhook/v1", "w"); code != http.StatusOK {
		t.Errorf("after Clear: %d, want 200", code)
	}
	if _, err := remote.Do(ctx, http.MethodPut, PathRules, []byte("{")); err == nil {
		t.Error("a rule that is no JSON was taken")
	}
}

func TestSignedCertificateBadInput(t *testing.T) {
	caCert, caKey, _ := testCA(t)
	for name, in := range map[string][2][]byte{
		"no PEM certificate": {[]byte("x"), caKey},
		"no PEM key":         {caCert, []byte("x")},
	} {
		if _, err := SignedCertificate(in[0], in[1], nil); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
