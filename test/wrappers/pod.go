package wrappers

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// PauseImage is the image of the containers the wrappers make.
const PauseImage = "registry.k8s.io/pause:3.10"

// DefaultSchedulerName, when set, is the scheduler the pods, pod templates
// and reservations the wrappers make name (e2e suites on a cluster where
// Gantry's scheduler runs beside another); empty leaves it to the API
// server's default.
var DefaultSchedulerName string

// PodWrapper wraps a Pod.
type PodWrapper struct{ v1.Pod }

// MakePod returns a pod with one pause container, named "work", without
// requests.
func MakePod(name, namespace string) *PodWrapper {
	return &PodWrapper{v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       podSpec(),
	}}
}

func podSpec() v1.PodSpec {
	return v1.PodSpec{SchedulerName: DefaultSchedulerName, Containers: []v1.Container{{Name: "work", Image: PauseImage}}}
}

// Obj returns the pod.
func (p *PodWrapper) Obj() *v1.Pod { return &p.Pod }

// UID sets the pod's UID (for tests without an API server).
func (p *PodWrapper) UID(uid string) *PodWrapper {
	p.ObjectMeta.UID = types.UID(uid)
	return p
}

// Label sets a label.
func (p *PodWrapper) Label(k, v string) *PodWrapper {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[k] = v
	return p
}

// Annotation sets an annotation.
func (p *PodWrapper) Annotation(k, v string) *PodWrapper {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[k] = v
	return p
}

// Controller makes the pod controlled by kind/name of apiVersion, as a
// ReplicaSet's pods are.
func (p *PodWrapper) Controller(apiVersion, kind, name string) *PodWrapper {
	p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{
		APIVersion: apiVersion, Kind: kind, Name: name, Controller: ptr.To(true),
	})
	return p
}

// Gated adds a scheduling gate.
func (p *PodWrapper) Gated(gate string) *PodWrapper {
	p.Spec.SchedulingGates = append(p.Spec.SchedulingGates, v1.PodSchedulingGate{Name: gate})
	return p
}

// Toleration adds an Exists toleration of key.
func (p *PodWrapper) Toleration(key string) *PodWrapper {
	p.Spec.Tolerations = append(p.Spec.Tolerations, existsToleration(key))
	return p
}

func existsToleration(key string) v1.Toleration {
	return v1.Toleration{Key: key, Operator: v1.TolerationOpExists}
}

// NodeSelector adds a node selector label.
func (p *PodWrapper) NodeSelector(key, value string) *PodWrapper {
	if p.Spec.NodeSelector == nil {
		p.Spec.NodeSelector = map[string]string{}
	}
	p.Spec.NodeSelector[key] = value
	return p
}

// RequiredTerms sets the required node affinity to the OR of terms.
func (p *PodWrapper) RequiredTerms(terms ...v1.NodeSelectorTerm) *PodWrapper {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &v1.Affinity{}
	}
	if p.Spec.Affinity.NodeAffinity == nil {
		p.Spec.Affinity.NodeAffinity = &v1.NodeAffinity{}
	}
	p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &v1.NodeSelector{NodeSelectorTerms: terms}
	return p
}

// SetRequiredTerms replaces the required node affinity terms of p, which
// must have a required node affinity.
func SetRequiredTerms(p *v1.Pod, terms ...v1.NodeSelectorTerm) {
	p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = terms
}

// Term is a nodeSelectorTerm of label requirements.
func Term(reqs ...v1.NodeSelectorRequirement) v1.NodeSelectorTerm {
	return v1.NodeSelectorTerm{MatchExpressions: reqs}
}

// Req is a label requirement.
func Req(key string, op v1.NodeSelectorOperator, values ...string) v1.NodeSelectorRequirement {
	return v1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

// In is a label In requirement.
func In(key string, values ...string) v1.NodeSelectorRequirement {
	return Req(key, v1.NodeSelectorOpIn, values...)
}

// Requests sets the requests of the pod's container, e.g.
// Requests("cpu", "500m", "memory", "1Gi").
func (p *PodWrapper) Requests(nameValues ...string) *PodWrapper {
	p.Spec.Containers[0].Resources.Requests = ResourceList(nameValues...)
	return p
}

// Limits sets the limits of the pod's container, as name, quantity pairs.
func (p *PodWrapper) Limits(nameValues ...string) *PodWrapper {
	p.Spec.Containers[0].Resources.Limits = ResourceList(nameValues...)
	return p
}

// OnNode sets a required node affinity to the node of that hostname (the
// scheduler still decides whether the pod fits there, unlike NodeName).
func (p *PodWrapper) OnNode(node string) *PodWrapper {
	return p.RequiredTerms(Term(In(v1.LabelHostname, node)))
}

// NodeName binds the pod to node (spec.nodeName), as the scheduler does.
func (p *PodWrapper) NodeName(node string) *PodWrapper {
	p.Spec.NodeName = node
	return p
}

// NominatedNodeName sets status.nominatedNodeName, as preemption does.
func (p *PodWrapper) NominatedNodeName(node string) *PodWrapper {
	p.Status.NominatedNodeName = node
	return p
}

// PriorityClass sets the pod's priorityClassName; admission fills in its
// priority and preemptionPolicy from the class.
func (p *PodWrapper) PriorityClass(name string) *PodWrapper {
	p.Spec.PriorityClassName = name
	return p
}

// Priority sets spec.priority, as admission does from the priority class
// (for tests without an API server).
func (p *PodWrapper) Priority(prio int32) *PodWrapper {
	p.Spec.Priority = ptr.To(prio)
	return p
}

// NoGrace makes the pod go away at once when deleted.
func (p *PodWrapper) NoGrace() *PodWrapper {
	p.Spec.TerminationGracePeriodSeconds = ptr.To[int64](0)
	return p
}

// ResourceList parses name, quantity pairs.
func ResourceList(nameValues ...string) v1.ResourceList {
	if len(nameValues)%2 != 0 {
		panic("ResourceList takes name, quantity pairs")
	}
	l := v1.ResourceList{}
	for i := 0; i < len(nameValues); i += 2 {
		l[v1.ResourceName(nameValues[i])] = resource.MustParse(nameValues[i+1])
	}
	return l
}

// SchedulerName sets the scheduler (profile) that schedules the pod.
func (p *PodWrapper) SchedulerName(name string) *PodWrapper {
	p.Spec.SchedulerName = name
	return p
}

// PodGroup makes the pod a member of the PodGroup name of its namespace
// (spec.schedulingGroup, with the GenericWorkload gate).
func (p *PodWrapper) PodGroup(name string) *PodWrapper {
	p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: &name}
	return p
}

// Phase sets status.phase, as the kubelet does (for tests without one).
func (p *PodWrapper) Phase(phase v1.PodPhase) *PodWrapper {
	p.Status.Phase = phase
	return p
}

// Ports adds ports to the pod's container, e.g. a host port that only one
// pod per node can hold.
func (p *PodWrapper) Ports(ports ...v1.ContainerPort) *PodWrapper {
	p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, ports...)
	return p
}

// AntiAffinityExists adds a required pod anti-affinity to the pods that
// carry a labelKey label: the pod is not scheduled into a topologyKey domain
// (a node, for v1.LabelHostname) that already runs one.
func (p *PodWrapper) AntiAffinityExists(labelKey, topologyKey string) *PodWrapper {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &v1.Affinity{}
	}
	if p.Spec.Affinity.PodAntiAffinity == nil {
		p.Spec.Affinity.PodAntiAffinity = &v1.PodAntiAffinity{}
	}
	anti := p.Spec.Affinity.PodAntiAffinity
	anti.RequiredDuringSchedulingIgnoredDuringExecution = append(anti.RequiredDuringSchedulingIgnoredDuringExecution, v1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: labelKey, Operator: metav1.LabelSelectorOpExists,
		}}},
		TopologyKey: topologyKey,
	})
	return p
}

// ResourceClaims adds resource claims (dynamic resource allocation) to the
// pod's spec.resourceClaims.
func (p *PodWrapper) ResourceClaims(claims ...v1.PodResourceClaim) *PodWrapper {
	p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, claims...)
	return p
}
