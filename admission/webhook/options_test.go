package webhook

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gantry-dev/gantry/test/util"
)

func TestOptionsDefaults(t *testing.T) {
	want := &Options{
		Port:                           9443,
		CertSecret:                     "gantry-system/gantry-webhook-cert",
		TLSSANs:                        []string{"gantry-webhook.gantry-system.svc", "localhost", "127.0.0.1"},
		CertValidity:                   365 * 24 * time.Hour,
		MutatingWebhookConfiguration:   "gantry-webhook",
		ValidatingWebhookConfiguration: "gantry-webhook",
		MetricsAddress:                 ":8443",
		HealthProbeAddress:             ":8081",
		ShutdownDelay:                  15 * time.Second,
		QPS:                            50,
		Burst:                          100,
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
		"--cert-secret=",
		"--cert-dir=/certs",
		"--tls-san=a.example,10.0.0.1",
		"--cert-validity=48h",
		"--mutating-webhook-configuration=",
		"--validating-webhook-configuration=v",
		"--metrics-bind-address=",
		"--health-probe-bind-address=127.0.0.1:8081",
		"--enable-http2",
		"--shutdown-delay=12s",
		"--kube-api-qps=7.5",
		"--kube-api-burst=9",
	)
	want := &Options{
		Port:                           8443,
		BindAddress:                    "127.0.0.1",
		CertDir:                        "/certs",
		TLSSANs:                        []string{"a.example", "10.0.0.1"},
		CertValidity:                   48 * time.Hour,
		MutatingWebhookConfiguration:   "",
		ValidatingWebhookConfiguration: "v",
		MetricsAddress:                 "",
		HealthProbeAddress:             "127.0.0.1:8081",
		EnableHTTP2:                    true,
		ShutdownDelay:                  12 * time.Second,
		QPS:                            7.5,
		Burst:                          9,
	}
	if diff := cmp.Diff(want, o); diff != "" {
		t.Errorf("parsed options (-want +got):\n%s", diff)
	}
}

func TestOptionsValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		mutate  func(*Options)
		wantErr bool
	}{
		"defaults":              {mutate: func(*Options) {}},
		"cert dir":              {mutate: func(o *Options) { o.CertSecret, o.CertDir = "", "/certs" }},
		"neither":               {mutate: func(o *Options) { o.CertSecret = "" }, wantErr: true},
		"secret without ns":     {mutate: func(o *Options) { o.CertSecret = "gantry-webhook-cert" }, wantErr: true},
		"secret with two /":     {mutate: func(o *Options) { o.CertSecret = "a/b/c" }, wantErr: true},
		"no SANs":               {mutate: func(o *Options) { o.TLSSANs = nil }, wantErr: true},
		"validity below 1h":     {mutate: func(o *Options) { o.CertValidity = time.Minute }, wantErr: true},
		"no SANs with cert dir": {mutate: func(o *Options) { o.CertSecret, o.CertDir, o.TLSSANs = "", "/certs", nil }},
	} {
		t.Run(name, func(t *testing.T) {
			o := NewOptions()
			tc.mutate(o)
			if err := o.Validate(); (err != nil) != tc.wantErr {
				t.Errorf("Validate() = %v, want error %v", err, tc.wantErr)
			}
		})
	}
}
