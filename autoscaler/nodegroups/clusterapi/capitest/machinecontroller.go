package capitest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// annotationNoNode marks a machine the controller never gives a node.
const annotationNoNode = "test.gantry.dev/no-node"

// MachineController plays Cluster API's MachineSet controller and an
// infrastructure provider in one namespace, for tests: it keeps as many
// Machines of each MachineDeployment as spec.replicas (named
// <deployment>-<random>, labelled cluster.x-k8s.io/deployment-name,
// deleting those annotated cluster.x-k8s.io/delete-machine first, then the
// newest), and gives each Machine a Node of the same name, annotated with
// the Machine (cluster.x-k8s.io/machine and
// cluster.x-k8s.io/cluster-namespace), and status.nodeRef. A Machine's
// Node goes with it. Nothing happens between steps: call Step, or Run.
type MachineController struct {
	dyn       dynamic.Interface
	kube      kubernetes.Interface
	namespace string

	mu sync.Mutex
	// noNode counts, per MachineDeployment, the next machines created
	// that never get a node.
	noNode map[string]int
	// machineSet names, per MachineDeployment, the MachineSet that owns
	// the machines created from now on (none: no owner reference).
	machineSet map[string]string
	// clock stamps machines for clients that do not (fakes); it moves a
	// second per machine, so that machines created in one step have an
	// order.
	clock time.Time
}

// NewMachineController is a controller of the MachineDeployments and
// Machines of namespace, through dyn, and of Nodes, through kube.
func NewMachineController(dyn dynamic.Interface, kube kubernetes.Interface, namespace string) *MachineController {
	return &MachineController{dyn: dyn, kube: kube, namespace: namespace, noNode: map[string]int{}, machineSet: map[string]string{},
		clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// SkipNodes makes the next n machines created for a MachineDeployment never
// get a node, like cloud machines that never boot.
func (c *MachineController) SkipNodes(deployment string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.noNode[deployment] += n
}

// CreateFrom makes the machines created for a MachineDeployment from now on
// controlled by MachineSet name (an owner reference), as after a rollout
// to a new MachineSet; "" for none (the default).
func (c *MachineController) CreateFrom(deployment, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.machineSet[deployment] = name
}

// Run calls Step every interval until ctx ends, reporting errors to logf
// (not those after ctx ended).
func (c *MachineController) Run(ctx context.Context, interval time.Duration, logf func(format string, args ...any)) {
	for {
		if err := c.Step(ctx); err != nil && ctx.Err() == nil {
			logf("machine controller: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// Step reconciles every MachineDeployment and Machine once: it scales each
// MachineDeployment to spec.replicas (see Scale), then gives each Machine
// without one a Node.
func (c *MachineController) Step(ctx context.Context) error {
	mds, err := c.dyn.Resource(machineDeploymentResource).Namespace(c.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var errs []error
	for i := range mds.Items {
		replicas, _, err := unstructured.NestedInt64(mds.Items[i].Object, "spec", "replicas")
		if err != nil {
			errs = append(errs, fmt.Errorf("MachineDeployment %s: %w", mds.Items[i].GetName(), err))
			continue
		}
		errs = append(errs, c.Scale(ctx, mds.Items[i].GetName(), int(replicas)))
	}
	machines, err := c.dyn.Resource(machineResource).Namespace(c.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range machines.Items {
		errs = append(errs, c.provision(ctx, &machines.Items[i]))
	}
	return errors.Join(errs...)
}

// Scale makes a MachineDeployment's live machines (those not being
// deleted) as many as replicas, whatever its spec.replicas, deleting
// machines and their nodes or creating machines without nodes (Step gives
// them nodes). Tests call it to stop the controller halfway, Step does it
// with spec.replicas.
func (c *MachineController) Scale(ctx context.Context, deployment string, replicas int) error {
	machines := c.dyn.Resource(machineResource).Namespace(c.namespace)
	list, err := machines.List(ctx, metav1.ListOptions{LabelSelector: labelDeploymentName + "=" + deployment})
	if err != nil {
		return err
	}
	var live []*unstructured.Unstructured
	for i := range list.Items {
		if list.Items[i].GetDeletionTimestamp() == nil {
			live = append(live, &list.Items[i])
		}
	}
	// Marked first, then newest.
	sort.SliceStable(live, func(i, j int) bool {
		_, mi := live[i].GetAnnotations()[annotationDeleteMachine]
		_, mj := live[j].GetAnnotations()[annotationDeleteMachine]
		if mi != mj {
			return mi
		}
		ti, tj := live[i].GetCreationTimestamp(), live[j].GetCreationTimestamp()
		if !ti.Equal(&tj) {
			return tj.Before(&ti)
		}
		return live[i].GetName() > live[j].GetName()
	})
	for i := 0; i < len(live)-replicas; i++ {
		m := live[i]
		if err := machines.Delete(ctx, m.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		if node, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name"); node != "" {
			if err := c.kube.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	for i := len(live); i < replicas; i++ {
		c.mu.Lock()
		noNode := c.noNode[deployment] > 0
		if noNode {
			c.noNode[deployment]--
		}
		c.clock = c.clock.Add(time.Second)
		created := c.clock
		machineSet := c.machineSet[deployment]
		c.mu.Unlock()
		name := deployment + "-" + utilrand.String(5)
		m := &unstructured.Unstructured{}
		m.SetAPIVersion(machineResource.GroupVersion().String())
		m.SetKind("Machine")
		m.SetName(name)
		m.SetNamespace(c.namespace)
		m.SetUID(types.UID("uid-" + name))
		m.SetCreationTimestamp(metav1.NewTime(created))
		m.SetLabels(map[string]string{labelDeploymentName: deployment})
		if machineSet != "" {
			m.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: machineSetResource.GroupVersion().String(), Kind: "MachineSet",
				Name: machineSet, UID: types.UID("uid-" + machineSet), Controller: ptr.To(true)}})
		}
		if noNode {
			m.SetAnnotations(map[string]string{annotationNoNode: "true"})
		}
		if err := unstructured.SetNestedField(m.Object, "test", "spec", "clusterName"); err != nil {
			return err
		}
		if _, err := machines.Create(ctx, m, metav1.CreateOptions{}); err != nil {
			if noNode {
				c.SkipNodes(deployment, 1)
			}
			return err
		}
	}
	return nil
}

// provision gives a machine a node and status.nodeRef.
func (c *MachineController) provision(ctx context.Context, m *unstructured.Unstructured) error {
	if m.GetDeletionTimestamp() != nil || m.GetAnnotations()[annotationNoNode] == "true" {
		return nil
	}
	if ref, _, _ := unstructured.NestedString(m.Object, "status", "nodeRef", "name"); ref != "" {
		return nil
	}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        m.GetName(),
		UID:         types.UID("node-uid-" + string(m.GetUID())),
		Labels:      map[string]string{v1.LabelHostname: m.GetName()},
		Annotations: map[string]string{annotationMachine: m.GetName(), annotationClusterNamespace: c.namespace},
	}}
	n, err := c.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		n, err = c.kube.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("node of machine %s: %w", m.GetName(), err)
	}
	m = m.DeepCopy()
	ref := map[string]any{"apiVersion": "v1", "kind": "Node", "name": n.Name, "uid": string(n.UID)}
	if err := unstructured.SetNestedMap(m.Object, ref, "status", "nodeRef"); err != nil {
		return err
	}
	_, err = c.dyn.Resource(machineResource).Namespace(c.namespace).UpdateStatus(ctx, m, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // deleted or changed meanwhile: next step
	}
	return err
}
