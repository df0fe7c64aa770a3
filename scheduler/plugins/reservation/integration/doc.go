// Package integration runs Gantry's kube-scheduler in-process (upstream's
// Setup, Gantry's extension layer and Run) against a real etcd and
// kube-apiserver, and checks that reservations are never leaked or counted
// twice: under churn (reservations deleted while they are being placed or
// consumed) and across a scheduler restart.
package integration
