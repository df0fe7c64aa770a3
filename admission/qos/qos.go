// Package qos is the QoSAnnotator admission plugin: it sets the
// scheduler.alpha.kubernetes.io/qos annotation of every pod to the pod's QoS
// class (Guaranteed, Burstable or BestEffort), as Kubernetes itself computes
// it, so MetadataPolicies (which run after it) can select on it: the seed use
// case routes pods to a scheduler by QoS.
package qos

import (
	"context"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"
	api "k8s.io/kubernetes/pkg/apis/core"
	qoshelper "k8s.io/kubernetes/pkg/apis/core/helper/qos"
)

const (
	// PluginName is the plugin's name for --enable-admission-plugins.
	PluginName = "QoSAnnotator"
	// Annotation carries the pod's QoS class.
	Annotation = "scheduler.alpha.kubernetes.io/qos"
)

// Plugin annotates pods with their QoS class.
type Plugin struct {
	*admission.Handler
}

var _ admission.MutationInterface = &Plugin{}

// New returns the plugin.
func New(io.Reader) (admission.Interface, error) {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}, nil
}

// Class returns the QoS class Kubernetes computes for pod, from its
// resources (never from its status, which is empty at creation).
func Class(pod *api.Pod) string { return string(qoshelper.ComputePodQOS(pod)) }

// Admit sets the annotation on pods, keeping it true on updates.
func (p *Plugin) Admit(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != api.Resource("pods") || a.GetSubresource() != "" {
		return nil
	}
	pod, ok := a.GetObject().(*api.Pod)
	if !ok {
		return apierrors.NewBadRequest(fmt.Sprintf("expected a Pod, got %T", a.GetObject()))
	}
	class := Class(pod)
	if pod.Annotations[Annotation] == class {
		return nil
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[Annotation] = class
	return nil
}
