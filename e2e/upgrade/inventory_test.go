//go:build upgrade

package upgrade

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gantry-dev/gantry/admission/metadatapolicy"
	gantryclient "github.com/gantry-dev/gantry/crds/client/clientset/versioned"
	policyv1alpha1 "github.com/gantry-dev/gantry/crds/policy/v1alpha1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/soak/invariants"
)

// The kinds an inventory holds, in the order reports list them.
var kinds = []string{"ProvisioningClass", "PodTemplate", "MetadataPolicy", "Reservation", "ProvisioningRequest", "Pod", "Node"}

// item is one object as an inventory records it: its UID, and what of its
// state must survive an upgrade.
type item struct {
	UID   types.UID `json:"uid"`
	State string    `json:"state"`
}

// inventory is what the cluster serves of every kind, by kind and name:
// the suite's namespace for namespaced kinds, the whole cluster for the
// others (the cluster is the suite's own).
type inventory map[string]map[string]item

// reader lists what an inventory and the invariant checker read.
type reader struct {
	client kubernetes.Interface
	gantry gantryclient.Interface
	dyn    dynamic.Interface
	ns     string
}

// take lists every kind; it fails on the first error (kube-apiserver
// restarting): the caller retries.
func (r *reader) take(ctx context.Context) (inventory, *invariants.Snapshot, error) {
	inv := inventory{}
	for _, k := range kinds {
		inv[k] = map[string]item{}
	}
	s := &invariants.Snapshot{Time: time.Now()}
	add := func(kind string, m metav1.Object, state string) {
		inv[kind][m.GetName()] = item{UID: m.GetUID(), State: state}
	}
	classes, err := r.gantry.AutoscalingV1alpha1().ProvisioningClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	for i := range classes.Items {
		c := &classes.Items[i]
		add("ProvisioningClass", c, fmt.Sprintf("generation=%d", c.Generation))
	}
	templates, err := r.client.CoreV1().PodTemplates(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	for i := range templates.Items {
		t := &templates.Items[i]
		add("PodTemplate", t, "resourceVersion="+t.ResourceVersion)
	}
	policies, err := r.dyn.Resource(metadatapolicy.MetadataPoliciesResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	for _, u := range policies.Items {
		p := &policyv1alpha1.MetadataPolicy{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
			return nil, nil, err
		}
		s.MetadataPolicies = append(s.MetadataPolicies, p)
		if p.Namespace == r.ns {
			add("MetadataPolicy", p, fmt.Sprintf("generation=%d %s", p.Generation, conditions(p.Status.Conditions)))
		}
	}
	rs, err := r.gantry.SchedulingV1alpha1().Reservations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	for i := range rs.Items {
		res := &rs.Items[i]
		s.Reservations = append(s.Reservations, res)
		add("Reservation", res, reservationState(res))
	}
	prs, err := r.gantry.AutoscalingXV1().ProvisioningRequests(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	for i := range prs.Items {
		pr := &prs.Items[i]
		s.ProvisioningRequests = append(s.ProvisioningRequests, pr)
		if pr.Namespace == r.ns {
			add("ProvisioningRequest", pr, conditions(pr.Status.Conditions))
		}
	}
	pods, err := r.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		s.Pods = append(s.Pods, p)
		if p.Namespace == r.ns {
			add("Pod", p, fmt.Sprintf("node=%q gates=%d phase=%s labels=%v", p.Spec.NodeName, len(p.Spec.SchedulingGates), p.Status.Phase, p.Labels))
		}
	}
	nodes, err := r.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		s.Nodes = append(s.Nodes, n)
		add("Node", n, fmt.Sprintf("ready=%t unschedulable=%t", nodeReady(n), n.Spec.Unschedulable))
	}
	quotas, err := r.client.CoreV1().ResourceQuotas(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	for i := range quotas.Items {
		s.ResourceQuotas = append(s.ResourceQuotas, &quotas.Items[i])
	}
	return inv, s, nil
}

// conditions is a condition list as type=status/reason, sorted: what must
// not change while no one acts on the object (times and messages may).
func conditions(cs []metav1.Condition) string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, fmt.Sprintf("%s=%s/%s", c.Type, c.Status, c.Reason))
	}
	sort.Strings(out)
	return "[" + strings.Join(out, " ") + "]"
}

func reservationState(r *schedv1alpha1.Reservation) string {
	owners := make([]string, 0, len(r.Status.CurrentOwners))
	for _, o := range r.Status.CurrentOwners {
		owners = append(owners, o.Namespace+"/"+o.Name)
	}
	sort.Strings(owners)
	allocated := make([]string, 0, len(r.Status.Allocated))
	for _, name := range slices.Sorted(maps.Keys(r.Status.Allocated)) {
		q := r.Status.Allocated[name]
		allocated = append(allocated, string(name)+"="+q.String())
	}
	return fmt.Sprintf("phase=%s node=%q allocated=%v owners=%v", r.Status.Phase, r.Status.NodeName, allocated, owners)
}

func nodeReady(n *v1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// kept is what became of the objects of base in inv: per kind, how many
// are served unchanged, and a line for each one lost (gone, or replaced
// by another of its name) or changed.
func kept(base, inv inventory) (unchanged map[string]int, problems []string) {
	unchanged = map[string]int{}
	for _, k := range kinds {
		for _, name := range slices.Sorted(maps.Keys(base[k])) {
			was := base[k][name]
			now, ok := inv[k][name]
			switch {
			case !ok:
				problems = append(problems, fmt.Sprintf("%s %s lost (uid %s, was %s)", k, name, was.UID, was.State))
			case now.UID != was.UID:
				problems = append(problems, fmt.Sprintf("%s %s replaced: uid %s, was %s", k, name, now.UID, was.UID))
			case now.State != was.State:
				problems = append(problems, fmt.Sprintf("%s %s changed: %s, was %s", k, name, now.State, was.State))
			default:
				unchanged[k]++
			}
		}
	}
	return unchanged, problems
}

// stage is one row of the report: after which step, what the control
// plane ran, and per kind the objects of the earlier release served
// unchanged (and all the kind's objects served).
type stage struct {
	After      string         `json:"after"`
	Components string         `json:"components"`
	Unchanged  map[string]int `json:"unchanged"`
	Served     map[string]int `json:"served"`
	Problems   []string       `json:"problems,omitempty"`
}

// table is the report as text: a row per stage, a column per kind
// (unchanged/served).
func table(base inventory, stages []stage) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "after\t")
	for _, k := range kinds {
		fmt.Fprintf(w, "%s\t", k)
	}
	fmt.Fprintf(w, "control plane\n")
	fmt.Fprintf(w, "(seeded)\t")
	for _, k := range kinds {
		fmt.Fprintf(w, "%d\t", len(base[k]))
	}
	fmt.Fprintf(w, "\n")
	for _, s := range stages {
		fmt.Fprintf(w, "%s\t", s.After)
		for _, k := range kinds {
			fmt.Fprintf(w, "%d/%d\t", s.Unchanged[k], s.Served[k])
		}
		fmt.Fprintf(w, "%s\n", s.Components)
	}
	_ = w.Flush()
	return b.String()
}
