package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gantry-dev/gantry/test/util"
)

func TestOptionsDefaults(t *testing.T) {
	want := &Options{
		Port:                           9443,
		CertDir:                        "/tmp/gantry-webhook-certs",
		TLSSANs:                        []string{"gantry-webhook.gantry-system.svc", "localhost", "127.0.0.1"},
		MutatingWebhookConfiguration:   "gantry-webhook",
		ValidatingWebhookConfiguration: "gantry-webhook",
		MetricsAddress:                 ":8080",
	}
	if diff := cmp.Diff(want, NewOptions()); diff != "" {
		t.Errorf("NewOptions (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, util.ParseFlags(t, NewOptions)); diff != "" {
		t.Errorf("after parsing no flags (-want +got):\n%s", diff)
	}
}

func TestOptionsFlags(t *testing.T) {
	o := util.ParseFlags(t, NewOptions,
		"--port=8443",
		"--bind-address=127.0.0.1",
		"--cert-dir=/certs",
		"--tls-san=a.example,10.0.0.1",
		"--mutating-webhook-configuration=",
		"--validating-webhook-configuration=v",
		"--metrics-bind-address=",
	)
	want := &Options{
		Port:                           8443,
		BindAddress:                    "127.0.0.1",
		CertDir:                        "/certs",
		TLSSANs:                        []string{"a.example", "10.0.0.1"},
		MutatingWebhookConfiguration:   "",
		ValidatingWebhookConfiguration: "v",
		MetricsAddress:                 "",
	}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("parsed options (-want +got):\n%s", diff)
	}
}
