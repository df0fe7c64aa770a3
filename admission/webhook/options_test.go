package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
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
	o := NewOptions()
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("NewOptions (-want +got):\n%s", diff)
	}
	// Parsing no flags keeps the defaults.
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("after parsing no flags (-want +got):\n%s", diff)
	}
}

func TestOptionsFlags(t *testing.T) {
	o := NewOptions()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	err := fs.Parse([]string{
		"--port=8443",
		"--bind-address=127.0.0.1",
		"--cert-dir=/certs",
		"--tls-san=a.example,10.0.0.1",
		"--mutating-webhook-configuration=",
		"--validating-webhook-configuration=v",
		"--metrics-bind-address=",
	})
	if err != nil {
		t.Fatal(err)
	}
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
