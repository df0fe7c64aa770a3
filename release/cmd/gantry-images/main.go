// Command gantry-images assembles Gantry's OCI images from binaries already
// built per platform (hack/images.sh builds them, then runs this), and pushes
// what it assembled. No Docker daemon is involved.
package main

import (
	"fmt"
	"os"

	"github.com/gantry-dev/gantry/release/cmd/gantry-images/app"
)

func main() {
	// Under `bazel run` the working directory is the runfiles tree; the
	// default paths (_output/...) are the workspace's.
	if ws := os.Getenv("BUILD_WORKSPACE_DIRECTORY"); ws != "" {
		if err := os.Chdir(ws); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := app.NewCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
