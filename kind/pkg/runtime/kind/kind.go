// Package kind is the runtime for machines with a Docker engine and the
// kindest/node image: the same Gantry binaries on a kind cluster. It is not
// built yet; selecting it fails with a clear message instead of half-working.
package kind

import (
	"os/exec"

	"github.com/gantry-dev/gantry/kind/pkg/cluster"
)

// Name is the runtime's name.
const Name = "kind"

func init() {
	cluster.RegisterRuntime(Name, func(o *cluster.Options) (cluster.Runtime, error) {
		reason := "Gantry images are not built yet; use --runtime local"
		if _, err := exec.LookPath("docker"); err != nil {
			reason = "it needs a Docker engine, and none is on PATH; use --runtime local"
		}
		return nil, &cluster.NotSupportedError{Runtime: Name, Reason: reason}
	})
}
