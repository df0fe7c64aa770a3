// Package integration dry-runs Gantry's manifests, as the release renders
// them (every image pinned by digest), against a real API server: every
// object must pass validation and admission, and the pods of every
// Deployment must meet the Pod Security Standard gantry-system enforces.
// Its tests need the build tag integration and `make build`.
package integration
