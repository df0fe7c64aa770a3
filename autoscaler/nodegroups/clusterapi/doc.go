// Package clusterapi is a node-group provider of Cluster API machines: each
// group is one MachineDeployment (cluster.x-k8s.io/v1beta1), named in a
// configuration file. Objects are read and written as unstructured objects
// through the dynamic client, so no Cluster API Go module is needed.
//
// # Sizes
//
// TargetSize is the MachineDeployment's spec.replicas. MinSize and MaxSize
// come from the configuration; a bound the configuration leaves out is read
// from the MachineDeployment's annotation AnnotationMinSize or
// AnnotationMaxSize (the ones cluster-autoscaler reads). The configuration
// wins where both are set. Annotations are read again on every call that
// reads the MachineDeployment, so MinSize and MaxSize report the last value
// read.
//
// # Attempts
//
// Cluster API names machines at random when its MachineSet controller
// creates them, after the provider has raised spec.replicas. The provider
// therefore records each scale-up attempt in the MachineDeployment's
// annotation AnnotationState, written in the same optimistic-concurrency
// update (resourceVersion) as the new replica count: the attempt's name, its
// size, and the names of the machines that had no attempt yet when it began.
// The state also names the MachineDeployment's MachineSets at that time
// (listed by the label LabelDeploymentName). A machine of the
// MachineDeployment that appears later without the label
// nodegroups.LabelAttempt belongs to the oldest pending attempt that still
// lacks machines, did not see it before, and knew its MachineSet (the
// machine's controller owner reference). Machines of a MachineSet created
// since, by a rollout to a new template, replace others: they are never an
// attempt's, so rolling the attempt back does not delete them. (A
// MachineHealthCheck's replacement of a machine comes from a known
// MachineSet and can still be taken for an attempt's.) Sync labels it with
// nodegroups.LabelAttempt and nodegroups.LabelNodeGroup and counts it; an
// attempt with all its machines labelled is finished, and from then on the
// machine labels alone say which machines it made.
//
// Cluster API copies only a few label domains from a Machine to its Node,
// and not autoscaling.gantry.dev. So Sync also labels the Nodes itself: once
// a machine has status.nodeRef, its Node gets nodegroups.LabelNodeGroup and,
// for a machine of an attempt, nodegroups.LabelAttempt. Nodes of machines
// that predate the provider get only the group label. Sync runs within
// Nodes, IncreaseSize, DeleteNodes, RollBack and Attempt; a caller that
// waits for the nodes of an attempt by their labels should call
// Provider.Refresh (which the provisioner does before it looks for them),
// or Nodes or Sync, periodically.
//
// IncreaseSize returns the names of the attempt's Nodes that exist when it
// returns, which right after the scale-up is usually none: Cluster API
// creates machines and nodes later. Calling IncreaseSize again with the same
// attempt and size scales nothing more and returns the nodes that exist
// by then; Attempt reports the machines, nodes and machines still to come.
//
// # Removing machines
//
// DeleteNodes finds each node's Machine by status.nodeRef, annotates it
// AnnotationDeleteMachine (the MachineSet controller deletes annotated
// machines first when it has more machines than replicas) and lowers
// spec.replicas by the number of machines in one optimistic-concurrency
// update, which also lists them in AnnotationState so that a retried call
// does not lower it twice. It refuses, changing nothing, a node of another
// group, a size below MinSize, and a removal while the MachineSet controller
// has fewer machines than replicas (it would then create fewer machines
// rather than delete the annotated ones). RollBack removes an attempt's
// machines the same way whether or not they have nodes, and lowers
// spec.replicas as well by the machines of the attempt not created yet.
//
// The provider must be the only writer of spec.replicas of its
// MachineDeployments (not cluster-autoscaler as well), and one process at a
// time should run it (leader election): a group serializes its own calls,
// and the MachineDeployment's resourceVersion guards every replica change,
// but machine labelling is not guarded across processes.
package clusterapi
