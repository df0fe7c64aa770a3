// Command gantry-provisioner serves ProvisioningRequests
// (autoscaling.x-k8s.io/v1) of check-capacity and atomic scale-up classes:
// it simulates their pods with the cluster scheduler's filters, adds nodes
// all at once through a node-group provider when needed, and books the
// capacity with Reservations that Gantry's kube-scheduler honours.
package main

import (
	"context"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/gantry-dev/gantry/autoscaler/app"
	"github.com/gantry-dev/gantry/internal/bootstrap"
)

func main() {
	o := app.NewOptions()
	o.AddFlags(pflag.CommandLine)
	bootstrap.Main("gantry-provisioner", pflag.CommandLine, func(ctx context.Context, cfg *rest.Config) error {
		mgr, err := app.New(ctx, cfg, *o)
		if err != nil {
			return err
		}
		return mgr.Start(ctx)
	})
}
