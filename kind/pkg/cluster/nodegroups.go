package cluster

import "time"

// NodeGroups is the kwok node-group configuration gantry-provisioner scales
// the clusters of both runtimes with: a general group, and a group one node
// of every scale-up never comes up in, for rollback tests. Only pods that tolerate
// its taint (gantry.dev/failure-injection) can land on the latter, so
// ordinary requests never use it.
const NodeGroups = `nodeGroups:
- name: general
  minSize: 0
  maxSize: 200
  labels: {node.kubernetes.io/instance-type: gantry.general}
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
- name: flaky
  minSize: 0
  maxSize: 20
  labels: {node.kubernetes.io/instance-type: gantry.flaky}
  taints: [{key: gantry.dev/failure-injection, value: "true", effect: NoSchedule}]
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
  failureInjection: {neverReady: 1}
`

// ScaleDownUnneededTime is how long a node gantry-provisioner created must
// be unneeded before a development cluster removes it (production's default
// is 10m; these clusters are for trying things out and for e2e tests).
const ScaleDownUnneededTime = 20 * time.Second

// NodeGroupBackoff is how long gantry-provisioner of a development cluster
// leaves a node group out of its plans after a scale-up of it failed
// (production's default is 5m, doubling up to 30m): long enough for a
// client's next attempt to go elsewhere, short enough for the next test
// to use the group again.
const NodeGroupBackoff = 10 * time.Second
