package clusterapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
)

// sync loads the group, brings its bookkeeping and labels up to date, and
// returns the view and the nodes of its machines by name.
func (g *Group) sync(ctx context.Context) (*view, map[string]*v1.Node, error) {
	v, err := g.load(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := g.reconcile(ctx, v); err != nil {
		return nil, nil, err
	}
	nodes, err := g.labelNodes(ctx, v)
	if err != nil {
		return nil, nil, err
	}
	return v, nodes, nil
}

// reconcile labels the machines of pending attempts, finishes complete
// attempts, forgets deleted machines and takes back deletion requests that
// did not go through or that the MachineSet controller will not act on.
func (g *Group) reconcile(ctx context.Context, v *view) error {
	old, err := json.Marshal(v.state)
	if err != nil {
		return err
	}
	st := &v.state
	present := map[string]*machine{}
	live := 0
	for _, m := range v.machines {
		present[m.name] = m
		if !m.deleting {
			live++
		}
	}

	// Deletion requests: forget machines that are gone; take back marks of
	// ours that never made it into the state, and those the MachineSet
	// controller will keep because it has no machine too many.
	st.Deleting = slices.DeleteFunc(st.Deleting, func(name string) bool { return present[name] == nil })
	var takeBack []*machine
	absorbed := v.deletingLive() > 0 && live <= v.replicas
	for _, m := range v.machines {
		if m.deleting || !m.ours {
			continue
		}
		if !st.isDeleting(m.name) || absorbed {
			takeBack = append(takeBack, m)
		}
	}
	if len(takeBack) > 0 {
		g.unmark(ctx, takeBack)
		for _, m := range takeBack {
			if !m.marked {
				st.Deleting = slices.DeleteFunc(st.Deleting, func(name string) bool { return name == m.name })
			}
		}
	}

	// Attempts: hand machines without an attempt to the oldest pending
	// attempt that lacks machines, did not see them before and knew their
	// MachineSet (admits): the machines of a rollout's new MachineSet
	// replace others, they are not the attempt's.
	counts := map[string]int{}
	for _, m := range v.machines {
		if m.attempt != "" {
			counts[m.attempt]++
		}
	}
	var done []string
	for i := range st.Pending {
		p := &st.Pending[i]
		p.Labelled = max(p.Labelled, counts[p.ID])
		for _, m := range v.machines {
			if p.Labelled >= p.Delta {
				break
			}
			if m.attempt != "" || m.deleting || m.marked || st.isDeleting(m.name) || !p.admits(m) {
				continue
			}
			patch := metadataPatch(m.uid, "labels", map[string]any{nodegroups.LabelAttempt: p.ID, nodegroups.LabelNodeGroup: g.cfg.Name})
			if err := g.patchMachine(ctx, m.name, patch); err != nil {
				return fmt.Errorf("node group %s: labelling machine %s of attempt %s: %w", g.cfg.Name, m.name, p.ID, err)
			}
			m.attempt = p.ID
			p.Labelled++
		}
		if p.Labelled >= p.Delta {
			done = append(done, p.ID)
		}
	}
	for _, id := range done {
		st.finish(id, false)
	}

	now, err := json.Marshal(v.state)
	if err != nil {
		return err
	}
	if string(now) == string(old) && v.obj.GetAnnotations()[AnnotationState] != "" {
		return nil
	}
	if len(st.Pending) == 0 && len(st.Finished) == 0 && len(st.Deleting) == 0 && v.obj.GetAnnotations()[AnnotationState] == "" {
		// Nothing to remember yet: leave the MachineDeployment alone.
		return nil
	}
	return g.update(ctx, v, v.replicas)
}

// labelNodes gives the nodes of the group's machines the group label, and
// those of attempt machines the attempt label, and returns them by name.
func (g *Group) labelNodes(ctx context.Context, v *view) (map[string]*v1.Node, error) {
	list, err := g.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: nodegroups.LabelNodeGroup + "=" + g.cfg.Name})
	if err != nil {
		return nil, fmt.Errorf("node group %s: listing nodes: %w", g.cfg.Name, err)
	}
	labelled := map[string]*v1.Node{}
	for i := range list.Items {
		labelled[list.Items[i].Name] = &list.Items[i]
	}
	out := map[string]*v1.Node{}
	var errs []error
	for _, m := range v.machines {
		if m.nodeName == "" {
			continue
		}
		n := labelled[m.nodeName]
		if n == nil {
			n, err = g.kube.CoreV1().Nodes().Get(ctx, m.nodeName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if m.nodeUID != "" && string(n.UID) != m.nodeUID {
			continue // the node of that name is not the machine's
		}
		want := map[string]any{nodegroups.LabelNodeGroup: g.cfg.Name}
		if m.attempt != "" {
			want[nodegroups.LabelAttempt] = m.attempt
		}
		var patch map[string]any
		for k, value := range want {
			if n.Labels[k] != value {
				patch = metadataPatch(string(n.UID), "labels", want)
			}
		}
		if patch != nil {
			data, err := json.Marshal(patch)
			if err != nil {
				return nil, err
			}
			n, err = g.kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, data, metav1.PatchOptions{})
			if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				// Gone, or replaced by a node of the same name.
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("labelling node %s: %w", m.nodeName, err))
				continue
			}
		}
		out[n.Name] = n
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("node group %s: %w", g.cfg.Name, err)
	}
	return out, nil
}
