// Package app builds Gantry's kube-scheduler command: upstream's
// NewSchedulerCommand with Gantry's out-of-tree plugins in its registry.
// Plugins are added to Plugins as they are written; the command and every
// scheduling decision not made by a Gantry plugin are upstream's.
package app
