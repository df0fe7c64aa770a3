// Command kube-apiserver is Gantry's kube-apiserver: upstream's server with
// Gantry's admission plugins registered and Gantry's patches applied.
package main

import (
	"fmt"
	"os"
	_ "time/tzdata" // CronJob time zones, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	"github.com/gantry-dev/gantry/admission/qos"
	"github.com/gantry-dev/gantry/apiserver-patches/app"
	"github.com/gantry-dev/gantry/apiserver-patches/narrowing/install"
)

// Gantry's admission plugins run before the admission policy and webhook
// plugins: QoSAnnotator first, so MetadataPolicies can select on its
// annotation.
const gantryPluginsBefore = "MutatingAdmissionPolicy"

func main() {
	if err := install.Install(); err != nil {
		fmt.Fprintln(os.Stderr, "kube-apiserver:", err)
		os.Exit(1)
	}
	cmd, err := app.NewAPIServerCommand(
		app.WithAdmissionPlugin(app.AdmissionPlugin{Name: qos.PluginName, Factory: qos.New, Before: gantryPluginsBefore}),
		app.WithAdmissionPlugin(app.AdmissionPlugin{Name: metadatapolicy.PluginName, Factory: metadatapolicy.New, Before: gantryPluginsBefore}),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(cli.Run(cmd))
}
