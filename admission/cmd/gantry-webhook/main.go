// Command gantry-webhook serves Gantry's QoS annotator and MetadataPolicy as
// admission webhooks, for clusters whose kube-apiserver cannot be replaced.
package main

import (
	"context"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/gantry-dev/gantry/admission/webhook"
	"github.com/gantry-dev/gantry/internal/bootstrap"
)

func main() {
	o := webhook.NewOptions()
	o.AddFlags(pflag.CommandLine)
	bootstrap.Main("gantry-webhook", pflag.CommandLine, func(ctx context.Context, cfg *rest.Config) error {
		return webhook.Run(ctx, cfg, *o)
	})
}
