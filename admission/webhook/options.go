package webhook

import "github.com/spf13/pflag"

// Options configure gantry-webhook.
type Options struct {
	// Port is the HTTPS port of the webhook server.
	Port int
	// BindAddress is the address it listens on ("" for all).
	BindAddress string
	// CertDir holds tls.crt and tls.key. When it has none, a self-signed CA
	// and serving certificate for TLSSANs are written there, and the CA is
	// injected into the named webhook configurations.
	CertDir string
	// TLSSANs are the host names and IPs of a self-signed certificate.
	TLSSANs []string
	// MutatingWebhookConfiguration and ValidatingWebhookConfiguration name
	// the configurations a self-signed CA is injected into.
	MutatingWebhookConfiguration, ValidatingWebhookConfiguration string
	// MetricsAddress serves /metrics, /healthz and /readyz over HTTP ("" off).
	MetricsAddress string
}

// NewOptions are gantry-webhook's options with the defaults of its flags.
func NewOptions() *Options {
	return &Options{
		Port:                           9443,
		CertDir:                        "/tmp/gantry-webhook-certs",
		TLSSANs:                        []string{"gantry-webhook.gantry-system.svc", "localhost", "127.0.0.1"},
		MutatingWebhookConfiguration:   "gantry-webhook",
		ValidatingWebhookConfiguration: "gantry-webhook",
		MetricsAddress:                 ":8080",
	}
}

// AddFlags registers gantry-webhook's flags in fs, with o's values as
// defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Port, "port", o.Port, "HTTPS port of the webhook server")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "address the webhook server listens on (default all)")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir, "directory with tls.crt and tls.key; a self-signed pair is written there when absent")
	fs.StringSliceVar(&o.TLSSANs, "tls-san", o.TLSSANs, "host names and IPs of a self-signed certificate")
	fs.StringVar(&o.MutatingWebhookConfiguration, "mutating-webhook-configuration", o.MutatingWebhookConfiguration, "MutatingWebhookConfiguration to inject a self-signed CA into (\"\" skips)")
	fs.StringVar(&o.ValidatingWebhookConfiguration, "validating-webhook-configuration", o.ValidatingWebhookConfiguration, "ValidatingWebhookConfiguration to inject a self-signed CA into (\"\" skips)")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, "address of /metrics, /healthz and /readyz (\"\" off)")
}
