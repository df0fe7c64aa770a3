// Package install wires the narrowing package into upstream's validation
// hooks. The hooks exist only in the k8s.io/kubernetes tree patched with
// apiserver-patches/patches, which hack/build.sh builds with the
// gantry_patched build tag; without the tag Install reports that the binary
// is unpatched.
package install
