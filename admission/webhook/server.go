package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	"github.com/gantry-dev/gantry/admission/metrics"
)

// Reconcile intervals: events (the Secret or a configuration changed)
// trigger at once; these catch expiry, which comes without one.
const (
	certCheckInterval     = 10 * time.Minute
	caBundleCheckInterval = time.Minute
)

// Run serves the webhooks until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	logger := klog.FromContext(ctx)
	if err := o.Validate(); err != nil {
		return err
	}
	metrics.Register()
	if cfg.QPS == 0 {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = o.QPS, o.Burst
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}

	injector := &CAInjector{Client: client, Mutating: o.MutatingWebhookConfiguration, Validating: o.ValidatingWebhookConfiguration}
	var certs certificateSource
	var rotator *CertRotator
	if o.CertSecret != "" {
		ns, name, _ := strings.Cut(o.CertSecret, "/")
		rotator = &CertRotator{
			Client: client, Namespace: ns, Name: name, Hosts: o.TLSSANs,
			Validity: o.CertValidity, RenewBefore: o.CertValidity / 3, OnChange: injector.Poke,
		}
		injector.Inject, injector.Bundle = true, rotator.caBundle
		certs = rotator
		go rotator.Run(ctx, certCheckInterval)
	} else {
		watcher, err := certwatcher.New(filepath.Join(o.CertDir, CertFile), filepath.Join(o.CertDir, KeyFile))
		if err != nil {
			return fmt.Errorf("reading the serving certificate from --cert-dir=%s (or give --cert-secret): %w", o.CertDir, err)
		}
		go func() {
			if err := watcher.Start(ctx); err != nil {
				logger.Error(err, "Watching the serving certificate", "dir", o.CertDir)
			}
		}()
		certs = watcher
	}
	if injector.Mutating != "" || injector.Validating != "" {
		go injector.Run(ctx, caBundleCheckInterval)
	}

	source := metadatapolicy.NewSource(dyn, client.Discovery())
	factory := informers.NewSharedInformerFactory(client, 0)
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	namespaces := metadatapolicy.NamespaceLabelReader{Lister: factory.Core().V1().Namespaces().Lister(), Client: client}
	reviewer := &metadatapolicy.Reviewer{
		Source:          source,
		NamespaceLabels: namespaces.Labels,
		Recorder:        broadcaster.NewRecorder(nil, v1.EventSource{Component: "gantry-webhook"}),
		Deployment:      metrics.Webhook,
	}
	go source.Run(ctx)
	go source.RunStatus(ctx, namespaces.Cached)
	factory.Start(ctx.Done())

	tlsOpts := func(c *tls.Config) {
		c.GetCertificate = certs.GetCertificate
		c.MinVersion = tls.VersionTLS12
		if !o.EnableHTTP2 {
			c.NextProtos = []string{"http/1.1"}
		}
	}
	// The servers stop ShutdownDelay after ctx ends; /readyz fails at once.
	serving := afterDelay(ctx, o.ShutdownDelay, func() {
		logger.Info("Stopping: not ready, serving admission requests a while longer", "shutdownDelay", o.ShutdownDelay)
	})
	server := webhook.NewServer(webhook.Options{Host: o.BindAddress, Port: o.Port, TLSOpts: []func(*tls.Config){tlsOpts}})
	server.Register(MutatePath, closeWhenStopping(ctx.Done(), &webhook.Admission{Handler: &Mutator{Reviewer: reviewer}}))
	server.Register(ValidatePath, closeWhenStopping(ctx.Done(), &webhook.Admission{Handler: &Validator{Reviewer: reviewer}}))
	server.Register(ValidatePolicyPath, closeWhenStopping(ctx.Done(), &webhook.Admission{Handler: PolicyValidator{}}))

	if o.MetricsAddress != "" {
		handler, err := authorizedMetrics(client, logger)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, TLSConfig: &tls.Config{}}
		tlsOpts(srv.TLSConfig)
		if o.EnableHTTP2 {
			srv.TLSConfig.NextProtos = []string{"h2", "http/1.1"}
		}
		ln, err := net.Listen("tcp", o.MetricsAddress)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		go serve(serving, logger, "metrics", srv, tls.NewListener(ln, srv.TLSConfig))
	}
	if o.HealthProbeAddress != "" {
		r := &readiness{source: source, certs: certs, rotator: rotator, injector: injector, stopping: ctx.Done()}
		ln, err := net.Listen("tcp", o.HealthProbeAddress)
		if err != nil {
			return fmt.Errorf("health probes: %w", err)
		}
		go serve(serving, logger, "health probes", &http.Server{Handler: r.mux(), ReadHeaderTimeout: 10 * time.Second}, ln)
	}
	logger.Info("Serving Gantry admission webhooks", "port", o.Port, "paths", []string{MutatePath, ValidatePath, ValidatePolicyPath},
		"metrics", o.MetricsAddress, "healthProbes", o.HealthProbeAddress)
	return server.Start(serving)
}

// afterDelay returns a context that ends delay after ctx does; started is
// called when ctx ends. The webhook server serves on for delay while the
// readiness check (which watches ctx) already fails.
func afterDelay(ctx context.Context, delay time.Duration, started func()) context.Context {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		<-ctx.Done()
		started()
		t := time.NewTimer(delay)
		defer t.Stop()
		<-t.C
		cancel()
	}()
	return out
}

// closeWhenStopping makes every response of the shutdown delay close its
// connection. The API server's next request then opens a new connection,
// which the Service sends to a ready replica, instead of reusing a
// keep-alive connection that this replica closes when the delay ends: a
// POST sent on a connection the server is closing fails, and neither Go's
// transport nor the API server retries it, so failurePolicy Fail would
// refuse the object.
func closeWhenStopping(stopping <-chan struct{}, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-stopping:
			w.Header().Set("Connection", "close")
		default:
		}
		h.ServeHTTP(w, r)
	})
}

// certificateSource serves the current serving certificate.
type certificateSource interface {
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
}

// caBundle is the CA bundle of the served certificate.
func (r *CertRotator) caBundle() ([]byte, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.current == nil {
		return nil, errNoCertificate
	}
	return r.current.pair.CABundle, nil
}

// authorizedMetrics serves the legacy registry's metrics to clients that
// authenticate with a bearer token and may GET /metrics (withDelegatedAuth).
func authorizedMetrics(client kubernetes.Interface, logger klog.Logger) (http.Handler, error) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", legacyregistry.Handler())
	return withDelegatedAuth(client, logger.WithName("metrics"), mux)
}

// readiness is ready when the policies are loaded, a serving certificate is
// there, and every webhook of the named configurations has a CA bundle that
// verifies it: only then can the API server call this replica.
type readiness struct {
	source   *metadatapolicy.Source
	certs    certificateSource
	rotator  *CertRotator // nil with --cert-dir
	injector *CAInjector
	// stopping is closed once the process is told to stop.
	stopping <-chan struct{}
}

func (r *readiness) check() error {
	select {
	case <-r.stopping:
		return errors.New("shutting down")
	default:
	}
	if !r.source.Ready() {
		return errors.New("policies are still being loaded")
	}
	if r.rotator != nil {
		if err := r.rotator.Err(); err != nil {
			return err
		}
	}
	cert, err := r.certs.GetCertificate(nil)
	if err != nil {
		return err
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return err
		}
	}
	if r.injector.Mutating == "" && r.injector.Validating == "" {
		return nil
	}
	return r.injector.Trusts(leaf, time.Now())
}

func (r *readiness) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := r.check(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	return mux
}

// serve runs srv on ln until ctx ends.
func serve(ctx context.Context, logger klog.Logger, what string, srv *http.Server, ln net.Listener) {
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error(err, "Serving", "what", what, "address", ln.Addr().String())
	}
}

// HostPort joins a host and port for URLs.
func HostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
