// Package frameworkext is Gantry's extension layer over kube-scheduler's
// scheduling framework. It forks nothing: it wraps the plugin factories of
// Gantry's out-of-tree plugins and, once upstream's Setup has built the
// scheduler, the profiles' Framework instances.
//
// What plugins get:
//   - ExtendedHandle: the framework handle plus Gantry's typed clientset and
//     shared informers for Gantry's CRDs.
//   - Phase hooks (PreFilterTransformer, FilterTransformer, ScoreTransformer):
//     run before PreFilter, Filter and Score of the profiles that enable the
//     plugin, in the order of the plugin in that extension point's list, and
//     may hand adjusted copies of the pod, NodeInfo or node list to every
//     plugin after them. Hooks must never modify what they are given: it is
//     the scheduler's cache.
//   - NodeHinter: one node for the scheduler to try before its sample of
//     the cluster, for pods whose best node may lie outside it.
//   - SchedulerAttacher: access to the built scheduler (cache, queue, failure
//     handler), for plugins that place objects other than pods.
//   - APIServiceProvider: HTTP endpoints under /gantry/v1/plugins/<Plugin>/,
//     served on the scheduler's secure port with its authn/authz; built-ins
//     /gantry/v1/__services__ and /gantry/v1/nodes/{node}.
//   - ControllerProvider: controllers run only while this scheduler leads.
//   - Score debugging: a table of the top N nodes per scheduled pod.
//   - SharedKey: typed state that lives as long as one scheduler, shared by
//     a plugin's instances (one per profile), or between two plugins through
//     a key declared in a contract package that both import and neither
//     owns: one plugin Sets the value, the other Looks it up. So no plugin
//     imports another, and this layer names none.
package frameworkext
