package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
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
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	"github.com/gantry-dev/gantry/admission/metrics"
)

// Run serves the webhooks until ctx ends.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	logger := klog.FromContext(ctx)
	metrics.Register()
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := ensureCertificates(ctx, client, o); err != nil {
		return err
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

	server := webhook.NewServer(webhook.Options{Host: o.BindAddress, Port: o.Port, CertDir: o.CertDir, CertName: CertFile, KeyName: KeyFile})
	server.Register(MutatePath, &webhook.Admission{Handler: &Mutator{Reviewer: reviewer}})
	server.Register(ValidatePolicyPath, &webhook.Admission{Handler: PolicyValidator{}})

	if o.MetricsAddress != "" {
		go serveMetrics(ctx, logger, o.MetricsAddress, source)
	}
	logger.Info("Serving Gantry admission webhooks", "port", o.Port, "paths", []string{MutatePath, ValidatePolicyPath})
	return server.Start(ctx)
}

// ensureCertificates uses the certificate in CertDir, or writes a
// self-signed one and injects its CA.
func ensureCertificates(ctx context.Context, client kubernetes.Interface, o Options) error {
	if _, err := os.Stat(filepath.Join(o.CertDir, CertFile)); err == nil {
		return nil
	}
	ca, err := BootstrapCertificates(o.CertDir, o.TLSSANs, 365*24*time.Hour)
	if err != nil {
		return fmt.Errorf("writing a self-signed certificate into %s: %w", o.CertDir, err)
	}
	klog.FromContext(ctx).Info("Wrote a self-signed serving certificate", "dir", o.CertDir, "hosts", o.TLSSANs)
	if o.MutatingWebhookConfiguration != "" || o.ValidatingWebhookConfiguration != "" {
		go func() {
			if err := InjectCABundle(ctx, client, o.MutatingWebhookConfiguration, o.ValidatingWebhookConfiguration, ca); err != nil && !errors.Is(err, context.Canceled) {
				klog.FromContext(ctx).Error(err, "Injecting the CA bundle")
			}
		}()
	}
	return nil
}

func serveMetrics(ctx context.Context, logger klog.Logger, addr string, source *metadatapolicy.Source) {
	mux := http.NewServeMux()
	mux.Handle("/metrics", legacyregistry.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !source.Ready() {
			http.Error(w, "policies are still being loaded", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error(err, "Serving metrics", "address", addr)
	}
}

// HostPort joins a host and port for URLs.
func HostPort(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }
