// Package crdtest runs Gantry's CRDs on a real kube-apiserver for the
// crds/<group>/integration tests.
package crdtest

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	"github.com/gantry-dev/gantry/test/integration/framework"
)

// Start runs a control plane (etcd and kube-apiserver from _output/bin)
// with every CRD of crds/manifests installed (framework.StartWithCRDs),
// and returns the generated clientset and the control plane's REST config.
func Start(t *testing.T) (gantryclient.Interface, *rest.Config) {
	t.Helper()
	cp := framework.StartWithCRDs(t)
	return cp.Gantry, cp.Config
}

// CheckErr fails unless err is nil and want is "", or err is a 422 Invalid
// error containing want.
func CheckErr(t *testing.T, op string, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("%s rejected: %v", op, err)
		}
		return
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want %s rejected with a 422 Invalid error containing %q, got %v", op, want, err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%s error %q does not contain %q", op, err, want)
	}
	t.Logf("%s rejected: %v", op, err)
}
