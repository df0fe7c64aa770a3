// Command gantry-webhook serves Gantry's QoS annotator and MetadataPolicy as
// admission webhooks, for clusters whose kube-apiserver cannot be replaced.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/admission/webhook"
)

func main() {
	o := webhook.Options{}
	kubeconfig := pflag.String("kubeconfig", "", "kubeconfig of the cluster (default: in-cluster)")
	pflag.IntVar(&o.Port, "port", 9443, "HTTPS port of the webhook server")
	pflag.StringVar(&o.BindAddress, "bind-address", "", "address the webhook server listens on (default all)")
	pflag.StringVar(&o.CertDir, "cert-dir", "/tmp/gantry-webhook-certs", "directory with tls.crt and tls.key; a self-signed pair is written there when absent")
	pflag.StringSliceVar(&o.TLSSANs, "tls-san", []string{"gantry-webhook.gantry-system.svc", "localhost", "127.0.0.1"}, "host names and IPs of a self-signed certificate")
	pflag.StringVar(&o.MutatingWebhookConfiguration, "mutating-webhook-configuration", "gantry-webhook", "MutatingWebhookConfiguration to inject a self-signed CA into (\"\" skips)")
	pflag.StringVar(&o.ValidatingWebhookConfiguration, "validating-webhook-configuration", "gantry-webhook", "ValidatingWebhookConfiguration to inject a self-signed CA into (\"\" skips)")
	pflag.StringVar(&o.MetricsAddress, "metrics-bind-address", ":8080", "address of /metrics, /healthz and /readyz (\"\" off)")
	klog.InitFlags(nil)
	pflag.CommandLine.AddGoFlagSet(flag.CommandLine)
	pflag.Parse()

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gantry-webhook:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := webhook.Run(klog.NewContext(ctx, klog.Background()), cfg, o); err != nil {
		fmt.Fprintln(os.Stderr, "gantry-webhook:", err)
		os.Exit(1)
	}
}
