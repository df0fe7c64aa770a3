// Package integration runs Gantry's kube-scheduler in-process with
// AsyncPreemption against a real apiserver, through a proxy that fails or
// delays victim deletes, and checks the preemptor is never stuck, its
// nomination is cleared on failure, no victim is deleted twice, and the
// metrics tell the truth.
package integration
