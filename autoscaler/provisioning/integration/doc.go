// Package integration runs gantry-provisioner's controller in-process
// against etcd and kube-apiserver from _output/bin, with Gantry's
// kube-scheduler (schedtest) placing the bookings.
package integration
