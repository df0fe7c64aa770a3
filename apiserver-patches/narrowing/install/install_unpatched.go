//go:build !gantry_patched

package install

import "errors"

// Patched reports whether this binary was built against the patched
// k8s.io/kubernetes tree.
const Patched = false

// Install fails: without the patch there are no hooks to install, and a
// Gantry kube-apiserver must not silently run with upstream's rules.
func Install() error {
	return errors.New("this kube-apiserver was built without Gantry's patches to k8s.io/kubernetes, so gated placement narrowing is unavailable: build it with `make build` (hack/build.sh applies apiserver-patches/patches)")
}
