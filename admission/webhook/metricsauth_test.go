package webhook

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// TestDelegatedAuth: /metrics answers 401 without a token the API server
// authenticates, 403 to a user it does not authorize for GET /metrics, and
// serves an authorized one.
func TestDelegatedAuth(t *testing.T) {
	users := map[string]string{"reader-token": "reader", "tenant-token": "tenant"}
	// A stand-in for kube-apiserver's review APIs (the delegating
	// authenticator and authorizer post through the REST client, which a
	// fake clientset lacks).
	apiserver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var out any
		switch req.URL.Path {
		case "/apis/authentication.k8s.io/v1/tokenreviews":
			var tr authenticationv1.TokenReview
			if err := json.NewDecoder(req.Body).Decode(&tr); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if user, ok := users[tr.Spec.Token]; ok {
				tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: user}}
			} else {
				tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
			}
			out = &tr
		case "/apis/authorization.k8s.io/v1/subjectaccessreviews":
			var sar authorizationv1.SubjectAccessReview
			if err := json.NewDecoder(req.Body).Decode(&sar); err != nil || sar.Spec.NonResourceAttributes == nil {
				http.Error(w, "want a non-resource review", http.StatusBadRequest)
				return
			}
			attrs := sar.Spec.NonResourceAttributes
			sar.Status.Allowed = sar.Spec.User == "reader" && attrs.Path == "/metrics" && attrs.Verb == "get"
			out = &sar
		default:
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	}))
	defer apiserver.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: apiserver.URL})
	if err != nil {
		t.Fatal(err)
	}
	served := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("metrics")) })
	handler, err := withDelegatedAuth(client, klog.Background(), served)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		token string
		want  int
	}{
		"no token":          {want: http.StatusUnauthorized},
		"forged token":      {token: "forged", want: http.StatusUnauthorized},
		"user without RBAC": {token: "tenant-token", want: http.StatusForbidden},
		"metrics reader":    {token: "reader-token", want: http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("status %d (%s), want %d", rec.Code, rec.Body, tc.want)
			}
		})
	}
}
