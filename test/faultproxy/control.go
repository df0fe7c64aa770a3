package faultproxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"time"

	"k8s.io/client-go/util/keyutil"
)

// The control API a proxy in another process serves (ControlHandler) and
// Remote calls: the paths, under the control address.
const (
	// PathRules: PUT adds the rule of the body (JSON), DELETE removes
	// every rule.
	PathRules = "/rules"
	// PathInjected: GET is Injected, as a JSON number.
	PathInjected = "/injected"
	// PathAgents: GET is Agents, as a JSON object.
	PathAgents = "/agents"
)

// maxRule bounds a rule's body.
const maxRule = 1 << 12

// ControlHandler serves the control API of p. It has no authentication:
// serve it on a loopback address only.
func (p *Proxy) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT "+PathRules, func(w http.ResponseWriter, r *http.Request) {
		var rule Rule
		if err := json.NewDecoder(io.LimitReader(r.Body, maxRule)).Decode(&rule); err != nil {
			http.Error(w, "decoding the rule: "+err.Error(), http.StatusBadRequest)
			return
		}
		p.Add(rule)
	})
	mux.HandleFunc("DELETE "+PathRules, func(http.ResponseWriter, *http.Request) { p.Clear() })
	mux.HandleFunc("GET "+PathInjected, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, p.Injected()) })
	mux.HandleFunc("GET "+PathAgents, func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, p.Agents()) })
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Remote rules a proxy in another process through its control API. Do
// sends one request there (method, a path of the API, a body or nil) and
// returns the answer's body, or an error for a failure or an answer other
// than 2xx: over HTTP, or through a command on the proxy's machine.
type Remote struct {
	Do func(ctx context.Context, method, path string, body []byte) ([]byte, error)
}

// Add adds a rule, after those there are.
func (r Remote) Add(ctx context.Context, rule Rule) error {
	body, err := json.Marshal(rule)
	if err != nil {
		return err
	}
	_, err = r.Do(ctx, http.MethodPut, PathRules, body)
	return err
}

// Clear removes every rule.
func (r Remote) Clear(ctx context.Context) error {
	_, err := r.Do(ctx, http.MethodDelete, PathRules, nil)
	return err
}

// Injected is how many requests a rule has failed or delayed so far.
func (r Remote) Injected(ctx context.Context) (int, error) {
	var n int
	return n, r.get(ctx, PathInjected, &n)
}

// Agents is how many requests the proxy has seen so far, by the product
// their User-Agent names.
func (r Remote) Agents(ctx context.Context) (map[string]int, error) {
	var m map[string]int
	return m, r.get(ctx, PathAgents, &m)
}

func (r Remote) get(ctx context.Context, path string, out any) error {
	body, err := r.Do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("decoding the proxy's answer to GET %s: %w", path, err)
	}
	return nil
}

// SignedCertificate makes a serving certificate for ips, valid for a day,
// signed by the CA of caCert and caKey (PEM): a proxy on a cluster's path
// serves it, so that clients that trust the cluster's CA (in-cluster
// clients) verify it.
func SignedCertificate(caCert, caKey []byte, ips []net.IP) (*tls.Certificate, error) {
	block, _ := pem.Decode(caCert)
	if block == nil {
		return nil, fmt.Errorf("the CA certificate is not PEM")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the CA certificate: %w", err)
	}
	signer, err := keyutil.ParsePrivateKeyPEM(caKey)
	if err != nil {
		return nil, fmt.Errorf("the CA key: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "gantry-faultproxy"},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, signer)
	if err != nil {
		return nil, fmt.Errorf("signing the proxy's certificate: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
