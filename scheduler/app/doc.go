// Package app builds Gantry's kube-scheduler command over upstream's
// cmd/kube-scheduler/app: upstream's options, flags and Setup build the
// scheduler with Gantry's plugins in its registry; this package then attaches
// Gantry's extension layer (scheduler/frameworkext) to the built scheduler and
// runs it. Every scheduling decision not made by a Gantry plugin is upstream's.
//
// Run is Gantry's counterpart of upstream's app.Run: upstream serves a fixed
// set of endpoints on the secure port, and Gantry needs to add its own
// (plugin REST services, the score-debug flag) behind the same authentication
// and authorization, and to start plugin controllers with leadership.
package app
