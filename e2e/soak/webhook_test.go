//go:build soak

package soak

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	"github.com/gantry-dev/gantry/test/soak/invariants"
)

// The webhook's faults on the stock shape, where gantry-webhook's two
// replicas serve kube-apiserver's calls: one replica killed (the newest),
// or both at once.
const (
	webhookComponent = "gantry-webhook"
	webhookOne       = "kill -9 one gantry-webhook replica"
	webhookBoth      = "kill -9 both gantry-webhook replicas"
)

// resultRefusedWebhook is how an operation ended whose write admission
// refused for gantry-webhook's sake (it could not be called, or had not
// loaded its policies): not a failure of the run by itself, for the
// checker's RefusedWhileWebhookReady judges whether a replica should
// have served it.
const resultRefusedWebhook = "refused while gantry-webhook was unavailable"

// gantryWebhookCall is kube-apiserver's message when it could not call one
// of gantry-webhook's webhooks (admission/config/webhooks.yaml names them
// all *.gantry.dev).
var gantryWebhookCall = regexp.MustCompile(`failed calling webhook "[^"]*\.gantry\.dev"`)

// isWebhookRefusal reports whether an API error's message is admission's
// refusal for gantry-webhook's sake.
func isWebhookRefusal(message string) bool {
	return gantryWebhookCall.MatchString(message) || strings.Contains(message, metadatapolicy.ErrNotReady.Error())
}

// webhookRefused reports whether err is such a refusal.
func webhookRefused(err error) bool {
	var se apierrors.APIStatus
	return errors.As(err, &se) && isWebhookRefusal(se.Status().Message)
}

// refusals records every write of the tenants' client that admission
// refused for gantry-webhook's sake, for the checker (Snapshot.Refusals).
type refusals struct {
	mu   sync.Mutex
	list []invariants.Refusal
}

// wrap is a rest.Config's WrapTransport: it reads the Status of every
// write answered with an error and records the refusals among them.
func (r *refusals) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode < 400 || req.Method == http.MethodGet || req.Method == http.MethodDelete {
			return resp, err
		}
		// A Status is small; more than this is no Status of admission's.
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if err != nil {
			return resp, nil
		}
		var st metav1.Status
		if json.Unmarshal(body, &st) != nil || !isWebhookRefusal(st.Message) {
			return resp, nil
		}
		verb := map[string]string{http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch"}[req.Method]
		r.mu.Lock()
		r.list = append(r.list, invariants.Refusal{At: time.Now(), Verb: verb, Object: writtenObject(req.URL.Path), Message: st.Message})
		r.mu.Unlock()
		return resp, nil
	})
}

// drain returns the refusals recorded since the last call.
func (r *refusals) drain() []invariants.Refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.list
	r.list = nil
	return out
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// kinds are the kinds of the resources the run writes that gantry-webhook
// admits.
var kinds = map[string]string{"pods": "Pod", "metadatapolicies": "MetadataPolicy"}

// writtenObject names the object of a write's path,
// /api/v1/namespaces/{ns}/{resource}[/{name}[/{subresource}]] or its /apis
// form; Name is empty for a create.
func writtenObject(path string) invariants.ObjectRef {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i+2 < len(parts); i++ {
		if parts[i] != "namespaces" {
			continue
		}
		ref := invariants.ObjectRef{Namespace: parts[i+1], Kind: parts[i+2]}
		if k, ok := kinds[ref.Kind]; ok {
			ref.Kind = k
		}
		if i+3 < len(parts) {
			ref.Name = parts[i+3]
		}
		return ref
	}
	return invariants.ObjectRef{Kind: path}
}

func TestRefusals(t *testing.T) {
	refusedCall := `Internal error occurred: failed calling webhook "mutate.gantry.dev": failed to call webhook: Post "https://gantry-webhook.gantry-system.svc:443/mutate": dial tcp 10.96.0.12:443: connect: connection refused`
	answers := map[string]struct {
		code    int
		message string
	}{
		"/api/v1/namespaces/team/pods":                                      {http.StatusInternalServerError, refusedCall},
		"/api/v1/namespaces/team/pods/p":                                    {http.StatusForbidden, metadatapolicy.ErrNotReady.Error()},
		"/api/v1/namespaces/team/pods/q":                                    {http.StatusForbidden, `admission webhook "validate.gantry.dev" denied the request: rejected by MetadataPolicy team/gov`},
		"/apis/batch/v1/namespaces/team/jobs":                               {http.StatusInternalServerError, `Internal error occurred: failed calling webhook "mjob.kb.io": connection refused`},
		"/apis/policy.gantry.dev/v1alpha1/namespaces/team/metadatapolicies": {http.StatusInternalServerError, strings.Replace(refusedCall, "mutate", "validate-policy", 1)},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		a, ok := answers[req.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.code)
		_ = json.NewEncoder(w).Encode(metav1.Status{Status: metav1.StatusFailure, Code: int32(a.code), Message: a.message})
	}))
	defer srv.Close()
	r := &refusals{}
	client := &http.Client{Transport: r.wrap(http.DefaultTransport)}
	for _, w := range []struct{ method, path string }{
		{http.MethodPost, "/api/v1/namespaces/team/pods"},
		{http.MethodPut, "/api/v1/namespaces/team/pods/p"},
		{http.MethodPut, "/api/v1/namespaces/team/pods/q"},
		{http.MethodPost, "/apis/batch/v1/namespaces/team/jobs"},
		{http.MethodPost, "/apis/policy.gantry.dev/v1alpha1/namespaces/team/metadatapolicies"},
		{http.MethodGet, "/api/v1/namespaces/team/pods"},
		{http.MethodPost, "/api/v1/namespaces/team/configmaps"},
	} {
		req, err := http.NewRequest(w.method, srv.URL+w.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var st metav1.Status
		err = json.NewDecoder(resp.Body).Decode(&st)
		_ = resp.Body.Close()
		if a, ok := answers[w.path]; ok && w.method != http.MethodGet && (err != nil || st.Message != a.message) {
			t.Errorf("%s %s: the client read %+v (%v), not the Status", w.method, w.path, st, err)
		}
	}
	var got []string
	for _, f := range r.drain() {
		got = append(got, f.Verb+" "+f.Object.String())
	}
	want := []string{"create Pod team/", "update Pod team/p", "create MetadataPolicy team/"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("refusals (-want +got):\n%s", diff)
	}
	if left := r.drain(); len(left) != 0 {
		t.Errorf("drained twice: %v", left)
	}
}
