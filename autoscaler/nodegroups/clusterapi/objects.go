package clusterapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
)

// Cluster API names the provider reads and writes.
const (
	// AnnotationMinSize and AnnotationMaxSize on a MachineDeployment bound
	// its group when the configuration does not.
	AnnotationMinSize = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size"
	AnnotationMaxSize = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size"
	// AnnotationDeleteMachine on a Machine makes the MachineSet controller
	// delete it first when it scales down.
	AnnotationDeleteMachine = "cluster.x-k8s.io/delete-machine"
	// AnnotationMachine and AnnotationClusterNamespace on a Node name its
	// Machine and the Machine's namespace (Cluster API sets them).
	AnnotationMachine          = "cluster.x-k8s.io/machine"
	AnnotationClusterNamespace = "cluster.x-k8s.io/cluster-namespace"
	// LabelDeploymentName on a Machine names its MachineDeployment.
	LabelDeploymentName = "cluster.x-k8s.io/deployment-name"
)

// Resources of Cluster API.
var (
	MachineDeploymentResource = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machinedeployments"}
	MachineResource           = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machines"}
	MachineSetResource        = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta1", Resource: "machinesets"}
)

// deployment is a MachineDeployment as read.
type deployment struct {
	obj              *unstructured.Unstructured
	replicas         int
	minSize, maxSize int
	state            state
}

// view is a MachineDeployment and its machines as read.
type view struct {
	deployment
	// machines, oldest first.
	machines []*machine
}

type machine struct {
	name, uid string
	// attempt is the machine's nodegroups.LabelAttempt.
	attempt string
	// nodeName and nodeUID are status.nodeRef's.
	nodeName, nodeUID string
	deleting          bool
	// marked: AnnotationDeleteMachine; ours: AnnotationDeleteRequested.
	marked, ours bool
	created      time.Time
	// machineSet names the MachineSet that controls the machine (its
	// controller owner reference), "" for none.
	machineSet string
}

func newMachine(obj *unstructured.Unstructured) *machine {
	nodeName, _, _ := unstructured.NestedString(obj.Object, "status", "nodeRef", "name")
	nodeUID, _, _ := unstructured.NestedString(obj.Object, "status", "nodeRef", "uid")
	_, marked := obj.GetAnnotations()[AnnotationDeleteMachine]
	_, ours := obj.GetAnnotations()[AnnotationDeleteRequested]
	var machineSet string
	if ref := metav1.GetControllerOfNoCopy(obj); ref != nil && ref.Kind == "MachineSet" {
		machineSet = ref.Name
	}
	return &machine{
		machineSet: machineSet,
		name:       obj.GetName(),
		uid:        string(obj.GetUID()),
		attempt:    obj.GetLabels()[nodegroups.LabelAttempt],
		nodeName:   nodeName,
		nodeUID:    nodeUID,
		deleting:   obj.GetDeletionTimestamp() != nil,
		marked:     marked,
		ours:       ours,
		created:    obj.GetCreationTimestamp().Time,
	}
}

// attempt reports an attempt from the view; nodes are the group's nodes
// by name, or nil.
func (v *view) attempt(id string, nodes map[string]*v1.Node) AttemptStatus {
	var s AttemptStatus
	for _, m := range v.machines {
		if m.attempt != id {
			continue
		}
		s.Known = true
		s.Machines = append(s.Machines, m.name)
		if n := nodes[m.nodeName]; n != nil {
			s.Nodes = append(s.Nodes, n.Name)
		}
	}
	if v.state.pending(id) != nil {
		s.Known = true
		s.Waiting = v.waiting(id)
	}
	if f := v.state.finished(id); f != nil {
		s.Known, s.RolledBack = true, f.RolledBack
	}
	sort.Strings(s.Machines)
	sort.Strings(s.Nodes)
	return s
}

// deletingLive counts the machines whose replica the group took off but
// that the MachineSet controller has not started deleting.
func (v *view) deletingLive() int {
	n := 0
	for _, m := range v.machines {
		if !m.deleting && v.state.isDeleting(m.name) {
			n++
		}
	}
	return n
}

// waiting is how many machines a pending attempt still lacks.
func (v *view) waiting(id string) int {
	p := v.state.pending(id)
	if p == nil {
		return 0
	}
	return max(0, p.Delta-p.Labelled)
}

// getDeployment reads the MachineDeployment and its size bounds.
func (g *Group) getDeployment(ctx context.Context) (*deployment, error) {
	obj, err := g.dyn.Resource(MachineDeploymentResource).Namespace(g.cfg.Namespace).Get(ctx, g.cfg.MachineDeployment, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading MachineDeployment %s/%s: %w", g.cfg.Namespace, g.cfg.MachineDeployment, err)
	}
	return g.parseDeployment(obj)
}

func (g *Group) parseDeployment(obj *unstructured.Unstructured) (*deployment, error) {
	d := &deployment{obj: obj}
	what := fmt.Sprintf("MachineDeployment %s/%s", g.cfg.Namespace, g.cfg.MachineDeployment)
	replicas, found, err := unstructured.NestedInt64(obj.Object, "spec", "replicas")
	if err != nil || !found || replicas < 0 {
		return nil, fmt.Errorf("%s: no valid spec.replicas (found %v, error %w)", what, found, err)
	}
	d.replicas = int(replicas)
	annotations := obj.GetAnnotations()
	bound := func(configured *int, annotation string) (int, error) {
		if configured != nil {
			return *configured, nil
		}
		s, ok := annotations[annotation]
		if !ok {
			return 0, fmt.Errorf("%s: the configuration has no bound and the annotation %s is missing", what, annotation)
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > maxGroupSize {
			return 0, fmt.Errorf("%s: annotation %s=%q is not an integer between 0 and %d", what, annotation, s, maxGroupSize)
		}
		return n, nil
	}
	minSize, err1 := bound(g.cfg.MinSize, AnnotationMinSize)
	maxSize, err2 := bound(g.cfg.MaxSize, AnnotationMaxSize)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	if minSize > maxSize {
		return nil, fmt.Errorf("%s: minimum size %d is above maximum size %d", what, minSize, maxSize)
	}
	d.minSize, d.maxSize = minSize, maxSize
	g.minSize.Store(int64(minSize))
	g.maxSize.Store(int64(maxSize))
	if s, ok := annotations[AnnotationState]; ok {
		if err := json.Unmarshal([]byte(s), &d.state); err != nil {
			return nil, fmt.Errorf("%s: annotation %s: %w", what, AnnotationState, err)
		}
		if d.state.Group != g.cfg.Name {
			return nil, fmt.Errorf("%s is managed by node group %q, not %q (annotation %s)", what, d.state.Group, g.cfg.Name, AnnotationState)
		}
	}
	d.state.Group = g.cfg.Name
	return d, nil
}

// load reads the MachineDeployment and then its machines.
func (g *Group) load(ctx context.Context) (*view, error) {
	d, err := g.getDeployment(ctx)
	if err != nil {
		return nil, err
	}
	list, err := g.dyn.Resource(MachineResource).Namespace(g.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelDeploymentName + "=" + g.cfg.MachineDeployment})
	if err != nil {
		return nil, fmt.Errorf("listing the machines of MachineDeployment %s/%s: %w", g.cfg.Namespace, g.cfg.MachineDeployment, err)
	}
	v := &view{deployment: *d}
	nodes := map[string]string{}
	for i := range list.Items {
		m := newMachine(&list.Items[i])
		v.machines = append(v.machines, m)
		nodes[m.name] = m.nodeName
	}
	sort.Slice(v.machines, func(i, j int) bool {
		a, b := v.machines[i], v.machines[j]
		if !a.created.Equal(b.created) {
			return a.created.Before(b.created)
		}
		return a.name < b.name
	})
	g.machinesMu.Lock()
	g.machineNodes = nodes
	g.machinesMu.Unlock()
	return v, nil
}

// machineSets names the MachineSets of the group's MachineDeployment (the
// label LabelDeploymentName). Without the MachineSet resource (a test
// control plane that has only MachineDeployments and Machines) there are
// none.
func (g *Group) machineSets(ctx context.Context) ([]string, error) {
	list, err := g.dyn.Resource(MachineSetResource).Namespace(g.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelDeploymentName + "=" + g.cfg.MachineDeployment})
	if apierrors.IsNotFound(err) {
		return []string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the MachineSets of MachineDeployment %s/%s: %w", g.cfg.Namespace, g.cfg.MachineDeployment, err)
	}
	names := make([]string, 0, len(list.Items))
	for i := range list.Items {
		names = append(names, list.Items[i].GetName())
	}
	sort.Strings(names)
	return names, nil
}

// knownMachineNode is the node of a machine of the group as last listed.
func (g *Group) knownMachineNode(machine string) string {
	g.machinesMu.Lock()
	defer g.machinesMu.Unlock()
	return g.machineNodes[machine]
}

// update writes v's state and replicas, guarded by the resourceVersion
// read, and keeps the written object in v.
func (g *Group) update(ctx context.Context, v *view, replicas int) error {
	obj := v.obj.DeepCopy()
	data, err := json.Marshal(v.state)
	if err != nil {
		return err
	}
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationState] = string(data)
	obj.SetAnnotations(annotations)
	if err := unstructured.SetNestedField(obj.Object, int64(replicas), "spec", "replicas"); err != nil {
		return err
	}
	out, err := g.dyn.Resource(MachineDeploymentResource).Namespace(g.cfg.Namespace).Update(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("updating MachineDeployment %s/%s: %w", g.cfg.Namespace, g.cfg.MachineDeployment, err)
	}
	v.obj, v.replicas = out, replicas
	return nil
}

// metadataPatch is a merge patch of the labels or annotations of an
// object, which fails if the object's UID is not uid (unless uid is empty).
func metadataPatch(uid, field string, values map[string]any) map[string]any {
	meta := map[string]any{field: values}
	if uid != "" {
		meta["uid"] = uid
	}
	return map[string]any{"metadata": meta}
}

// patchMachine applies a merge patch to a machine of the group.
func (g *Group) patchMachine(ctx context.Context, name string, patch map[string]any) error {
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = g.dyn.Resource(MachineResource).Namespace(g.cfg.Namespace).Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{})
	return err
}
