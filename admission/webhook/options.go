package webhook

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// Options configure gantry-webhook.
type Options struct {
	// Port is the HTTPS port of the webhook server.
	Port int
	// BindAddress is the address it listens on ("" for all: the API server
	// reaches it through the Service, at the pod IP).
	BindAddress string
	// CertSecret ("namespace/name") holds the serving certificate all
	// replicas share: a self-signed CA and certificate for TLSSANs, created
	// by the first replica and replaced before it expires, whose CA is kept
	// injected into the named webhook configurations. "" uses the files
	// tls.crt and tls.key in CertDir instead, managed by someone else (e.g.
	// cert-manager, whose CA injector then keeps the configurations' CA
	// bundle).
	CertSecret string
	// CertDir holds tls.crt and tls.key when CertSecret is "".
	CertDir string
	// TLSSANs are the host names and IPs of the self-signed certificate.
	TLSSANs []string
	// CertValidity is how long a self-signed CA and certificate are valid;
	// they are replaced when a third of it is left.
	CertValidity time.Duration
	// MutatingWebhookConfiguration and ValidatingWebhookConfiguration name
	// the configurations whose CA bundles are kept (CertSecret) or checked
	// for readiness (CertDir); "" skips one.
	MutatingWebhookConfiguration, ValidatingWebhookConfiguration string
	// MetricsAddress serves /metrics over HTTPS with the serving
	// certificate, to clients authenticated by a TokenReview and authorized
	// by a SubjectAccessReview for GET on the non-resource URL /metrics
	// ("" off).
	MetricsAddress string
	// HealthProbeAddress serves /healthz and /readyz over plain HTTP for the
	// kubelet ("" off). They answer only ok or why not ready.
	HealthProbeAddress string
	// EnableHTTP2 lets the webhook and metrics servers speak HTTP/2 (off:
	// HTTP/1.1 only, against HTTP/2 stream-reset floods such as
	// CVE-2023-44487).
	EnableHTTP2 bool
	// ShutdownDelay is how long the webhook server goes on serving after it
	// is told to stop (SIGTERM), while /readyz already fails: time for the
	// pod's endpoint to leave the Service and for every node's proxy to
	// stop sending it requests, so that a rolling update refuses none.
	ShutdownDelay time.Duration
	// QPS and Burst of the client, when the rest config sets none: policy
	// status is one write per policy.
	QPS   float32
	Burst int
}

// NewOptions are gantry-webhook's options with the defaults of its flags.
func NewOptions() *Options {
	return &Options{
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
}

// AddFlags registers gantry-webhook's flags in fs, with o's values as
// defaults.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Port, "port", o.Port, "HTTPS port of the webhook server")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "address the webhook server listens on (default all)")
	fs.StringVar(&o.CertSecret, "cert-secret", o.CertSecret, "namespace/name of the Secret with the serving certificate all replicas share; created and rotated by the webhook, its CA kept injected into the webhook configurations. \"\" uses --cert-dir")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir, "directory with tls.crt and tls.key managed by someone else (e.g. cert-manager), when --cert-secret is \"\"")
	fs.StringSliceVar(&o.TLSSANs, "tls-san", o.TLSSANs, "host names and IPs of the self-signed certificate")
	fs.DurationVar(&o.CertValidity, "cert-validity", o.CertValidity, "validity of a self-signed CA and certificate; they are replaced when a third of it is left")
	fs.StringVar(&o.MutatingWebhookConfiguration, "mutating-webhook-configuration", o.MutatingWebhookConfiguration, "MutatingWebhookConfiguration whose CA bundles are kept injected (\"\" skips)")
	fs.StringVar(&o.ValidatingWebhookConfiguration, "validating-webhook-configuration", o.ValidatingWebhookConfiguration, "ValidatingWebhookConfiguration whose CA bundles are kept injected (\"\" skips)")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, "address of /metrics over HTTPS, for clients allowed GET on the non-resource URL /metrics (\"\" off)")
	fs.StringVar(&o.HealthProbeAddress, "health-probe-bind-address", o.HealthProbeAddress, "address of /healthz and /readyz over plain HTTP (\"\" off)")
	fs.DurationVar(&o.ShutdownDelay, "shutdown-delay", o.ShutdownDelay, "how long to go on serving admission requests after SIGTERM, not ready, so that a rolling update refuses none (keep it below the pod's terminationGracePeriodSeconds)")
	fs.Float32Var(&o.QPS, "kube-api-qps", o.QPS, "client QPS to kube-apiserver (policy status is one write per policy)")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "client burst to kube-apiserver")
	fs.BoolVar(&o.EnableHTTP2, "enable-http2", o.EnableHTTP2, "serve HTTP/2 as well as HTTP/1.1 (off against HTTP/2 stream-reset floods)")
}

// Validate reports options that cannot work.
func (o *Options) Validate() error {
	if o.QPS <= 0 || o.Burst <= 0 {
		return fmt.Errorf("--kube-api-qps=%v and --kube-api-burst=%d must be positive", o.QPS, o.Burst)
	}
	if o.ShutdownDelay < 0 || o.ShutdownDelay > 5*time.Minute {
		return fmt.Errorf("--shutdown-delay=%s: want 0 to 5m", o.ShutdownDelay)
	}
	if o.CertSecret != "" {
		ns, name, ok := strings.Cut(o.CertSecret, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("--cert-secret=%q: want namespace/name", o.CertSecret)
		}
		if len(o.TLSSANs) == 0 {
			return fmt.Errorf("--cert-secret needs at least one --tls-san")
		}
		if o.CertValidity < time.Hour {
			return fmt.Errorf("--cert-validity=%s: want at least 1h", o.CertValidity)
		}
	} else if o.CertDir == "" {
		return fmt.Errorf("give --cert-secret or --cert-dir")
	}
	return nil
}
