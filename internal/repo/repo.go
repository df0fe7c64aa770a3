// Package repo locates the Gantry checkout that a program or test runs from,
// so that the cluster program (kind/), the integration-test control plane
// (test/integration/framework) and the e2e suites find the built binaries,
// the CRD manifests and the configuration files the same way.
package repo

import (
	"errors"
	"os"
	"path/filepath"
)

// Marker is the file that marks the root of the checkout.
const Marker = "WORKSPACE"

// ErrNotFound is returned by Root when no directory at or above the working
// directory holds Marker.
var ErrNotFound = errors.New("cannot find the Gantry checkout (no " + Marker + " file above the working directory)")

// Root returns the repository checkout: BUILD_WORKSPACE_DIRECTORY when run by
// `bazel run`, else the nearest directory at or above the working directory
// holding a WORKSPACE file. It returns ErrNotFound when there is none.
func Root() (string, error) {
	if d := os.Getenv("BUILD_WORKSPACE_DIRECTORY"); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, Marker)); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", ErrNotFound
		}
		dir = parent
	}
}
