// Package integration runs the Cluster API node-group provider against
// etcd and kube-apiserver from _output/bin (`make integration`, build tag
// integration), with minimal Cluster API CRDs and capitest's machine
// controller playing Cluster API.
package integration
