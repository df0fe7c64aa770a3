package faultproxy

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

func TestProxy(t *testing.T) {
	backend := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	defer backend.Close()
	p, err := New(&rest.Config{Host: backend.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the proxy's own test certificate
	do := func(method, path, agent string) int {
		t.Helper()
		req, err := http.NewRequest(method, p.URL()+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("User-Agent", agent)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}

	if got := do(http.MethodGet, "/api/v1/pods", "kube-scheduler/v1"); got != http.StatusOK {
		t.Fatalf("no rule: %d, want 200 from the backend", got)
	}
	p.Fail(http.MethodPost, "/bindings", http.StatusInternalServerError)
	if got := do(http.MethodPost, "/api/v1/namespaces/a/pods/b/bindings", "x"); got != http.StatusInternalServerError {
		t.Errorf("POST of a binding: %d, want the injected 500", got)
	}
	if got := do(http.MethodGet, "/api/v1/namespaces/a/pods/b/bindings", "x"); got != http.StatusOK {
		t.Errorf("GET (another method): %d, want 200", got)
	}

	p.Clear()
	p.Add(Rule{UserAgent: "gantry-provisioner/", Every: 3, Status: http.StatusServiceUnavailable})
	var failed []int
	for i := 1; i <= 6; i++ {
		if do(http.MethodGet, "/api/v1/nodes", "gantry-provisioner/v1 (linux)") == http.StatusServiceUnavailable {
			failed = append(failed, i)
		}
	}
	if len(failed) != 2 || failed[0] != 3 || failed[1] != 6 {
		t.Errorf("every third request of the component failed: got requests %v failed, want [3 6]", failed)
	}
	if got := do(http.MethodGet, "/api/v1/nodes", "kube-scheduler/v1"); got != http.StatusOK {
		t.Errorf("another component's request: %d, want 200", got)
	}

	p.Clear()
	p.Delay(http.MethodGet, "/slow", 50*time.Millisecond)
	start := time.Now()
	if got := do(http.MethodGet, "/slow", "x"); got != http.StatusOK {
		t.Errorf("delayed request: %d, want 200", got)
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("delayed request took %s, less than the 50ms delay", took)
	}

	if got := p.Injected(); got != 4 {
		t.Errorf("Injected() = %d, want 4 (1 failed binding, 2 failed node lists, 1 delay)", got)
	}
	if got := p.Count(http.MethodGet, "/api/v1/nodes"); got != 7 {
		t.Errorf("Count(GET /api/v1/nodes) = %d, want 7", got)
	}
	if got := p.Agents()["gantry-provisioner"]; got != 6 {
		t.Errorf("Agents()[gantry-provisioner] = %d, want 6", got)
	}
	if _, ok := p.First(http.MethodGet, "/slow"); !ok {
		t.Error("First(GET /slow) not recorded")
	}
}
