// Package priority resolves the priority a ProvisioningRequest's pods will
// run at, as kube-apiserver's Priority admission resolves a pod's, so that
// their booking holds capacity at that priority. It is never taken from
// the PodTemplate: templates are not admitted as pods, and their
// spec.priority is whatever the tenant wrote.
//
//   - priorityClassName names a class: its value. A class that does not
//     exist is a Rejection (ClassNotFound): a pod naming it would be
//     refused.
//   - No name: the value of the globalDefault class (the lowest, should
//     there be several), else 0.
//   - spec.priority of the template is ignored.
//   - A system class (system-*, or any class above 1000000000) is allowed
//     only in kube-system or in a namespace a ResourceQuota lets use it (a
//     quota whose scopeSelector matches the class, which is what
//     kube-apiserver demands when its ResourceQuota admission limits the
//     critical classes, as hardened clusters configure it); else a
//     Rejection (ClassForbidden). kube-apiserver's Priority admission
//     itself has no namespace rule; the provisioner cannot read the
//     admission configuration, so it assumes the hardened one.
//
// A booking never preempts (PreemptNever whatever the class says); its
// priority decides only what may preempt it. The provisioner fails a
// request whose priority is rejected, with the reason its conditions.go
// names for the Cause.
package priority

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gantry-dev/gantry/autoscaler/simulator"
)

// systemPriorityClassPrefix starts the names of the system PriorityClasses
// (system-node-critical, system-cluster-critical); only they may have a
// value above HighestUserDefinablePriority, the highest any other class may
// have.
const (
	systemPriorityClassPrefix    = "system-"
	HighestUserDefinablePriority = int32(1000000000)
)

// systemPriorityNamespace may always use the system PriorityClasses.
const systemPriorityNamespace = "kube-system"

// Cause is why a pod set's priority was rejected.
type Cause int

const (
	// ClassNotFound: a template names a PriorityClass that does not exist.
	ClassNotFound Cause = iota
	// ClassForbidden: a template names a system PriorityClass in a
	// namespace that may not use it.
	ClassForbidden
)

// Rejection is why a pod set's priority could not be resolved: admission
// would refuse its pods.
type Rejection struct {
	Cause Cause
	msg   string
}

func (e *Rejection) Error() string { return e.msg }

// AsRejection returns err's rejection, if it is one.
func AsRejection(err error) (*Rejection, bool) {
	var rej *Rejection
	ok := errors.As(err, &rej)
	return rej, ok
}

// Resolve sets each pod set's spec.priority to the priority resolved for
// it in namespace, as admission sets a pod's, from classes (nil: no
// PriorityClass exists); quotas lists the namespace's ResourceQuotas when
// a set names a system class. A rejection is returned as a *Rejection.
func Resolve(ctx context.Context, classes schedulinglisters.PriorityClassLister, quotas client.Reader, namespace string, sets []simulator.PodSet) error {
	var list []v1.ResourceQuota
	listed := false
	for _, s := range sets {
		spec := &s.Pod.Spec
		prio, system, err := resolve(classes, spec.PriorityClassName)
		if err != nil {
			return fmt.Errorf("pod set %s: %w", s.Name, err)
		}
		if system && namespace != systemPriorityNamespace {
			if !listed {
				var l v1.ResourceQuotaList
				if err := quotas.List(ctx, &l, client.InNamespace(namespace)); err != nil {
					return fmt.Errorf("listing the ResourceQuotas of %s: %w", namespace, err)
				}
				list, listed = l.Items, true
			}
			if !quotaAllowsClass(list, spec.PriorityClassName) {
				return &Rejection{Cause: ClassForbidden, msg: fmt.Sprintf(
					"pod set %s: spec.priorityClassName %q is a system PriorityClass, which namespace %s may not use "+
						"(only %s, or a namespace with a ResourceQuota whose scopeSelector matches the class)",
					s.Name, spec.PriorityClassName, namespace, systemPriorityNamespace)}
			}
		}
		spec.Priority = &prio
	}
	return nil
}

// resolve is the priority of a pod naming class (empty: none), and
// whether it is a system priority.
func resolve(classes schedulinglisters.PriorityClassLister, class string) (int32, bool, error) {
	if class == "" {
		pc, err := defaultPriorityClass(classes)
		if err != nil || pc == nil {
			return 0, false, err
		}
		return pc.Value, isSystemPriority(pc), nil
	}
	var pc *schedulingv1.PriorityClass
	var err error = apierrors.NewNotFound(schedulingv1.Resource("priorityclasses"), class)
	if classes != nil {
		pc, err = classes.Get(class)
	}
	if apierrors.IsNotFound(err) {
		return 0, false, &Rejection{Cause: ClassNotFound,
			msg: fmt.Sprintf("spec.priorityClassName: no PriorityClass %q", class)}
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading PriorityClass %s: %w", class, err)
	}
	return pc.Value, isSystemPriority(pc), nil
}

// defaultPriorityClass is the globalDefault class; of several (a race
// admission lets happen) the lowest, as admission picks.
func defaultPriorityClass(classes schedulinglisters.PriorityClassLister) (*schedulingv1.PriorityClass, error) {
	if classes == nil {
		return nil, nil
	}
	all, err := classes.List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing PriorityClasses: %w", err)
	}
	var def *schedulingv1.PriorityClass
	for _, pc := range all {
		if pc.GlobalDefault && (def == nil || pc.Value < def.Value) {
			def = pc
		}
	}
	return def, nil
}

func isSystemPriority(pc *schedulingv1.PriorityClass) bool {
	return strings.HasPrefix(pc.Name, systemPriorityClassPrefix) || pc.Value > HighestUserDefinablePriority
}

// quotaAllowsClass reports whether one of quotas has a scopeSelector
// requirement on the PriorityClass scope that a pod of class matches.
func quotaAllowsClass(quotas []v1.ResourceQuota, class string) bool {
	for i := range quotas {
		sel := quotas[i].Spec.ScopeSelector
		if sel == nil {
			continue
		}
		for _, req := range sel.MatchExpressions {
			if req.ScopeName != v1.ResourceQuotaScopePriorityClass {
				continue
			}
			switch req.Operator {
			case v1.ScopeSelectorOpIn:
				if slices.Contains(req.Values, class) {
					return true
				}
			case v1.ScopeSelectorOpNotIn:
				if !slices.Contains(req.Values, class) {
					return true
				}
			case v1.ScopeSelectorOpExists:
				return true
			}
		}
	}
	return false
}
