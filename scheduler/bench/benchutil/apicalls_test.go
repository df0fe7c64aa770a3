package benchutil

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResourceOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/default/pods/high-1/binding": "pods/binding",
		"/api/v1/namespaces/default/pods/high-1/status":  "pods/status",
		"/api/v1/namespaces/default/pods/low-1-2":        "pods",
		"/api/v1/pods":               "pods",
		"/api/v1/namespaces/default": "namespaces",
		"/apis/events.k8s.io/v1/namespaces/default/events":           "events",
		"/apis/scheduling.gantry.dev/v1alpha1/reservations/r/status": "reservations/status",
		"/healthz": "/healthz",
	} {
		if got := ResourceOf(path); got != want {
			t.Errorf("ResourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}

func TestCallsSinceAndPerPod(t *testing.T) {
	before := map[string]int{
		"PATCH /api/v1/namespaces/default/pods/high-0/status": 1,
		"GET /healthz": 5,
	}
	after := map[string]int{
		"PATCH /api/v1/namespaces/default/pods/high-0/status": 2,
		"PATCH /api/v1/namespaces/default/pods/high-1/status": 1,
		"POST /api/v1/namespaces/default/pods/high-0/binding": 1,
		"POST /api/v1/namespaces/default/pods/high-1/binding": 1,
		"DELETE /api/v1/namespaces/default/pods/low-0-0":      1,
		"GET /healthz": 5,
	}
	total, by := CallsSince(before, after)
	if total != 5 {
		t.Errorf("CallsSince total = %d, want 5", total)
	}
	want := map[string]int{"PATCH pods/status": 2, "POST pods/binding": 2, "DELETE pods": 1}
	if diff := cmp.Diff(want, by); diff != "" {
		t.Errorf("CallsSince by resource (-want +got):\n%s", diff)
	}
	if got, want := PerPod(by, 2), "PATCH pods/status 1, POST pods/binding 1, DELETE pods 0.5"; got != want {
		t.Errorf("PerPod = %q, want %q", got, want)
	}
}
