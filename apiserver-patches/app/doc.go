// Package app builds Gantry's kube-apiserver command over upstream's
// options and app.Run.
//
// Upstream's NewAPIServerCommand creates its ServerRunOptions internally, which
// leaves no place to register admission plugins that are not compiled into
// k8s.io/kubernetes. This package owns only that wiring: it creates the same
// options, lets callers register Gantry admission plugins into them through
// Options, and then hands control to upstream's app.Run. Everything the server
// does at run time is upstream's.
package app
