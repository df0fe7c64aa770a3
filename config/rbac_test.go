package config_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gantry-dev/gantry/test/util"
)

// grants lists every right the rendered objects give, a line each: the rules
// of each role, as granted to each subject that a binding names, or to
// nobody yet ("unbound": roles users bind, such as the metrics readers, and
// the tenant roles Kubernetes aggregates into edit, admin and view); and the
// roles a binding refers to that are not rendered (Kubernetes' own, such
// as system:kube-scheduler), by name.
func grants(objs []runtime.Object) []string {
	type role struct {
		scope string // "cluster" or the Role's namespace
		rules []rbacv1.PolicyRule
		bound bool
	}
	roles := map[string]*role{} // "ClusterRole/name" or "Role/ns/name"
	for _, r := range util.OfType[*rbacv1.ClusterRole](objs) {
		roles["ClusterRole/"+r.Name] = &role{scope: "cluster", rules: r.Rules}
	}
	for _, r := range util.OfType[*rbacv1.Role](objs) {
		roles["Role/"+r.Namespace+"/"+r.Name] = &role{scope: "namespace " + r.Namespace, rules: r.Rules}
	}
	var out []string
	bind := func(namespace string, ref rbacv1.RoleRef, subjects []rbacv1.Subject) {
		key := "ClusterRole/" + ref.Name
		if ref.Kind == "Role" {
			key = "Role/" + namespace + "/" + ref.Name
		}
		scope := "cluster"
		if namespace != "" {
			scope = "namespace " + namespace
		}
		for _, s := range subjects {
			who := s.Kind + " " + s.Name
			if s.Kind == rbacv1.ServiceAccountKind {
				who = s.Kind + " " + s.Namespace + "/" + s.Name
			}
			r, ok := roles[key]
			if !ok {
				out = append(out, fmt.Sprintf("%s: %s: %s (not rendered)", who, scope, key))
				continue
			}
			r.bound = true
			for _, rule := range r.rules {
				out = append(out, fmt.Sprintf("%s: %s: %s", who, scope, ruleString(rule)))
			}
		}
	}
	for _, b := range util.OfType[*rbacv1.ClusterRoleBinding](objs) {
		bind("", b.RoleRef, b.Subjects)
	}
	for _, b := range util.OfType[*rbacv1.RoleBinding](objs) {
		bind(b.Namespace, b.RoleRef, b.Subjects)
	}
	for _, key := range slices.Sorted(maps.Keys(roles)) {
		if r := roles[key]; !r.bound {
			for _, rule := range r.rules {
				out = append(out, fmt.Sprintf("unbound %s: %s", key, ruleString(rule)))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func ruleString(r rbacv1.PolicyRule) string {
	var parts []string
	if len(r.NonResourceURLs) > 0 {
		parts = append(parts, "urls "+strings.Join(r.NonResourceURLs, ","))
	} else {
		groups := slices.Clone(r.APIGroups)
		for i, g := range groups {
			if g == "" {
				groups[i] = "core"
			}
		}
		parts = append(parts, strings.Join(groups, ",")+" "+strings.Join(r.Resources, ","))
	}
	if len(r.ResourceNames) > 0 {
		parts = append(parts, "named "+strings.Join(r.ResourceNames, ","))
	}
	return strings.Join(parts, " ") + ": " + strings.Join(r.Verbs, ",")
}

// reviewed is every right Gantry's install grants, with the reason for it.
// A rule added to a role (or a role bound to a new subject) fails
// TestGrantsAreReviewed until it is added here, with its reason; one
// removed fails it until it is removed here.
var reviewed = []struct{ grant, why string }{
	// gantry-provisioner
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: apps replicasets,statefulsets: get,list,watch", "the simulation's default pod spreading reads its pods' owners' selectors, as kube-scheduler does"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: authentication.k8s.io tokenreviews: create", "/metrics authenticates its scrapers' tokens"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: authorization.k8s.io subjectaccessreviews: create", "/metrics authorizes its scrapers"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: autoscaling.gantry.dev provisioningclasses: get,list,watch", "the classes that say how requests are served"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: autoscaling.x-k8s.io provisioningrequests/status: update,patch", "the requests' conditions and the attempts' record"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: autoscaling.x-k8s.io provisioningrequests: get,list,watch,update,patch,delete", "the requests it serves: its finalizer (update, patch), and deleting finished ones after --delete-finished-requests-after"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: core nodes: create,update,patch,delete", "kwok node groups only (components/kwok): the provider adds and removes the nodes kwok plays"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: core nodes: update,patch", "Cluster API node groups only (components/clusterapi): labels a Machine's Node, and scale-down taints and annotates the nodes it removes"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: autoscaling.x-k8s.io provisioningrequests: create", "PodGroup requests only (components/pod-group-requests): a request for an unschedulable gang"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: core podtemplates: create,update,delete", "PodGroup requests only (components/pod-group-requests): the templates of a gang's request, made from its members' specs (again, when a request is made again) and deleted with it"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: scheduling.k8s.io podgroups: get,list,watch", "PodGroup requests only (components/pod-group-requests): which gangs the scheduler could not place"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: core pods: create", "dry-run creates of a booking's pods, so a booking passes the admission its pods would; the ValidatingAdmissionPolicy gantry-provisioner-dry-run-pods refuses any create that is not a dry run"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: core podtemplates,resourcequotas,pods,nodes,namespaces,services,replicationcontrollers,persistentvolumeclaims,persistentvolumes: get,list,watch", "the requests' PodTemplates, the namespaces' quotas, and what the simulation's plugins read, as kube-scheduler does"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: core,events.k8s.io events: create,patch,update", "events on requests"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: kueue.x-k8s.io workloads,workloadpriorityclasses: get,list,watch", "a Kueue request's Workload: its gated pods, its eviction, its priority"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: resource.k8s.io deviceclasses,resourceslices,resourceclaims,resourceclaimtemplates: get,list,watch", "pods with resource claims are simulated with the DynamicResources plugin"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: scheduling.gantry.dev reservations: get,list,watch,create,delete", "the bookings it makes and releases"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: scheduling.k8s.io priorityclasses: get,list,watch", "a booking's priority, as the Priority admission plugin would give its pods"},
	{"ServiceAccount gantry-system/gantry-provisioner: cluster: storage.k8s.io storageclasses,csinodes,csidrivers,csistoragecapacities,volumeattachments: get,list,watch", "the simulation's volume plugins read them, as kube-scheduler does"},
	{"ServiceAccount gantry-system/gantry-provisioner: namespace default: cluster.x-k8s.io machinedeployments: get,update", "Cluster API node groups only, in the MachineDeployments' namespace: reads and scales them"},
	{"ServiceAccount gantry-system/gantry-provisioner: namespace default: cluster.x-k8s.io machines: get,list,patch", "Cluster API node groups only: finds a node's Machine and marks the Machines to remove"},
	{"ServiceAccount gantry-system/gantry-provisioner: namespace default: cluster.x-k8s.io machinesets: list", "Cluster API node groups only: an attempt records its MachineDeployment's MachineSets"},
	{"ServiceAccount gantry-system/gantry-provisioner: namespace gantry-system: coordination.k8s.io leases: get,list,watch,create,update,patch", "leader election"},
	// gantry-scheduler, the second scheduler of the managed overlay
	{"ServiceAccount gantry-system/gantry-scheduler: cluster: ClusterRole/system:auth-delegator (not rendered)", "delegated authentication and authorization of its secure port, as any kube-scheduler"},
	{"ServiceAccount gantry-system/gantry-scheduler: cluster: ClusterRole/system:kube-scheduler (not rendered)", "scheduling pods, as upstream's kube-scheduler (pods delete and bindings included)"},
	{"ServiceAccount gantry-system/gantry-scheduler: cluster: ClusterRole/system:volume-scheduler (not rendered)", "volume binding, as upstream's kube-scheduler"},
	{"ServiceAccount gantry-system/gantry-scheduler: cluster: scheduling.gantry.dev reservations/status: update", "the Reservation plugin writes where a reservation is placed and what it holds; no other identity may"},
	{"ServiceAccount gantry-system/gantry-scheduler: cluster: scheduling.gantry.dev reservations: get,list,watch,delete", "the Reservation plugin reads reservations and deletes expired ones"},
	{"ServiceAccount gantry-system/gantry-scheduler: namespace gantry-system: coordination.k8s.io leases named gantry-scheduler: get,update", "its leader-election lease"},
	{"ServiceAccount gantry-system/gantry-scheduler: namespace gantry-system: coordination.k8s.io leases: create", "creating its lease (create cannot be limited by name)"},
	{"ServiceAccount gantry-system/gantry-scheduler: namespace kube-system: Role/kube-system/extension-apiserver-authentication-reader (not rendered)", "reading the client CA for its secure port, as any kube-scheduler"},
	// gantry-webhook
	{"ServiceAccount gantry-system/gantry-webhook: cluster: admissionregistration.k8s.io mutatingwebhookconfigurations,validatingwebhookconfigurations named gantry-webhook: get,list,watch,update", "keeps the CA bundle of its own two configurations"},
	{"ServiceAccount gantry-system/gantry-webhook: cluster: apiextensions.k8s.io customresourcedefinitions named metadatapolicies.policy.gantry.dev: get", "whether the policy API is installed (fail closed while discovery lags)"},
	{"ServiceAccount gantry-system/gantry-webhook: cluster: authentication.k8s.io tokenreviews: create", "/metrics authenticates its scrapers' tokens"},
	{"ServiceAccount gantry-system/gantry-webhook: cluster: authorization.k8s.io subjectaccessreviews: create", "/metrics authorizes its scrapers"},
	{"ServiceAccount gantry-system/gantry-webhook: cluster: core namespaces: get,list,watch", "policies' namespace selectors, and judging a Namespace as itself"},
	{"ServiceAccount gantry-system/gantry-webhook: cluster: core,events.k8s.io events: create,patch", "events on policies"},
	{"ServiceAccount gantry-system/gantry-webhook: cluster: policy.gantry.dev metadatapolicies,clustermetadatapolicies: get,list,watch", "the policies it applies"},
	{"ServiceAccount gantry-system/gantry-webhook: cluster: policy.gantry.dev metadatapolicies/status,clustermetadatapolicies/status: patch", "the policies' Ready condition"},
	{"ServiceAccount gantry-system/gantry-webhook: namespace gantry-system: core secrets named gantry-webhook-cert: get,list,watch,update", "its serving certificate, rotated in place"},
	{"ServiceAccount gantry-system/gantry-webhook: namespace gantry-system: core secrets: create", "creating its certificate Secret; the ValidatingAdmissionPolicy gantry-webhook-secret-create refuses any other name or type"},
	// kube-scheduler of the full overlay (Gantry's, as the cluster's)
	{"User system:kube-scheduler: cluster: scheduling.gantry.dev reservations/status: update", "the Reservation plugin in the cluster's scheduler"},
	{"User system:kube-scheduler: cluster: scheduling.gantry.dev reservations: get,list,watch,delete", "the Reservation plugin in the cluster's scheduler"},
	// Roles for users to bind, and the tenant roles aggregated into edit,
	// admin and view.
	{"unbound ClusterRole/gantry-provisioner-metrics-reader: urls /metrics: get", "bound by the operator to its scraper"},
	{"unbound ClusterRole/gantry-webhook-metrics-reader: urls /metrics: get", "bound by the operator to its scraper"},
	{"unbound ClusterRole/gantry:aggregate-to-edit: autoscaling.x-k8s.io provisioningrequests: create,delete,deletecollection,get,list,patch,update,watch", "tenants (edit, admin) make ProvisioningRequests; no status"},
	{"unbound ClusterRole/gantry:aggregate-to-edit: core podtemplates: create,delete,deletecollection,get,list,patch,update,watch", "the PodTemplates a ProvisioningRequest names, which edit leaves out"},
	{"unbound ClusterRole/gantry:aggregate-to-edit: policy.gantry.dev metadatapolicies: create,delete,deletecollection,get,list,patch,update,watch", "tenants write their namespace's MetadataPolicies; no status, no ClusterMetadataPolicies"},
	{"unbound ClusterRole/gantry:aggregate-to-view: autoscaling.x-k8s.io provisioningrequests,provisioningrequests/status: get,list,watch", "view reads requests"},
	{"unbound ClusterRole/gantry:aggregate-to-view: core podtemplates: get,list,watch", "view reads PodTemplates"},
	{"unbound ClusterRole/gantry:aggregate-to-view: policy.gantry.dev metadatapolicies,metadatapolicies/status: get,list,watch", "view reads policies"},
	{"unbound ClusterRole/gantry:scheduler-score-debugger: urls /debug/flags/s: put", "bound by the operator to whoever may turn on score debugging"},
	{"unbound ClusterRole/gantry:scheduler-services-viewer: urls /gantry/v1/*: get", "bound by the operator to whoever may read the scheduler's REST services"},
}

// installs are the renderings whose grants are reviewed: each overlay with
// each node-group provider, and one with the PodGroup requests' component.
var installs = [][]string{
	{"overlays/managed", "../autoscaler/config/components/kwok"},
	{"overlays/managed", "../autoscaler/config/components/clusterapi"},
	{"overlays/full", "../autoscaler/config/components/kwok"},
	{"overlays/full", "../autoscaler/config/components/clusterapi"},
	{"overlays/managed", "../autoscaler/config/components/kwok", "../autoscaler/config/components/pod-group-requests"},
}

// unreviewed compares the grants of the rendered installs with reviewed:
// the grants not in it, and its entries no install grants.
func unreviewed(rendered [][]runtime.Object) (extra, stale []string) {
	want := map[string]bool{}
	for _, r := range reviewed {
		want[r.grant] = true
	}
	seen := map[string]bool{}
	for _, objs := range rendered {
		for _, g := range grants(objs) {
			seen[g] = true
			if !want[g] && !slices.Contains(extra, g) {
				extra = append(extra, g)
			}
		}
	}
	for _, r := range reviewed {
		if !seen[r.grant] {
			stale = append(stale, r.grant)
		}
	}
	slices.Sort(extra)
	return extra, stale
}

// TestGrantsAreReviewed: every right the install grants, to each of
// Gantry's identities, is one of reviewed, with a reason; and a planted
// extra rule is caught.
func TestGrantsAreReviewed(t *testing.T) {
	var rendered [][]runtime.Object
	for _, in := range installs {
		rendered = append(rendered, renderWith(t, in[0], in[1:]...))
	}
	for _, r := range reviewed {
		if strings.TrimSpace(r.why) == "" {
			t.Errorf("%s: no reason given", r.grant)
		}
	}
	extra, stale := unreviewed(rendered)
	for _, g := range extra {
		t.Errorf("granted, not reviewed (add it to reviewed with its reason, or take it away): %s", g)
	}
	for _, g := range stale {
		t.Errorf("reviewed, no longer granted (remove it from reviewed): %s", g)
	}

	t.Run("a planted rule is caught", func(t *testing.T) {
		planted := slices.Clone(rendered[0])
		for i, o := range planted {
			if r, ok := o.(*rbacv1.ClusterRole); ok && r.Name == "gantry-webhook" {
				r = r.DeepCopy()
				r.Rules = append(r.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}})
				planted[i] = r
			}
		}
		extra, _ := unreviewed([][]runtime.Object{planted})
		want := "ServiceAccount gantry-system/gantry-webhook: cluster: core secrets: get,list"
		if !slices.Equal(extra, []string{want}) {
			t.Errorf("with a rule planted in ClusterRole gantry-webhook: unreviewed %q, want %q", extra, want)
		}
	})
}
