package provisioning

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestAdmissionRefusalKinds: only the built-in plugins' own wording makes a
// dry-run refusal a quota refusal (booked on the provisioner's own quota
// check) or a missing ServiceAccount (retried); a tenant's policy that
// words its message alike is a refusal.
func TestAdmissionRefusalKinds(t *testing.T) {
	pods := schema.GroupResource{Resource: "pods"}
	forbidden := func(msg string) error {
		return apierrors.NewForbidden(pods, "gantry-booking-check-x7k2p", errors.New(msg))
	}
	for _, tc := range []struct {
		err           error
		quota, sa     bool
		notAuthorized bool
	}{
		{err: forbidden("exceeded quota: cpu, requested: requests.cpu=1, used: requests.cpu=4, limited: requests.cpu=4"), quota: true},
		{err: forbidden(`error looking up service account team-a/default: serviceaccount "default" not found`), sa: true},
		{err: forbidden("rejected by team-a/p: exceeded quota: cpu")},
		{err: forbidden(`admission webhook "w.example.com" denied the request: exceeded quota: cpu`)},
		{err: apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "x", nil)},
		{err: apierrors.NewForbidden(pods, "", errors.New(`User "system:serviceaccount:gantry-system:gantry-provisioner" cannot create resource "pods" in API group "" in the namespace "team-a"`)), notAuthorized: true},
		{err: errors.New("exceeded quota: not an API error")},
	} {
		if got := forbiddenFor(tc.err, "exceeded quota: "); got != tc.quota {
			t.Errorf("%v: quota refusal %v, want %v", tc.err, got, tc.quota)
		}
		if got := forbiddenFor(tc.err, "error looking up service account "); got != tc.sa {
			t.Errorf("%v: ServiceAccount missing %v, want %v", tc.err, got, tc.sa)
		}
		if got := notAuthorized(tc.err); got != tc.notAuthorized {
			t.Errorf("%v: not authorized %v, want %v", tc.err, got, tc.notAuthorized)
		}
	}
}
