package qos

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	api "k8s.io/kubernetes/pkg/apis/core"
)

func container(req, lim api.ResourceList) api.Container {
	return api.Container{Name: "c", Resources: api.ResourceRequirements{Requests: req, Limits: lim}}
}

func rl(cpu, mem string) api.ResourceList {
	out := api.ResourceList{}
	if cpu != "" {
		out[api.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		out[api.ResourceMemory] = resource.MustParse(mem)
	}
	return out
}

func TestAdmitSetsTheClass(t *testing.T) {
	for name, tc := range map[string]struct {
		containers []api.Container
		existing   string
		op         admission.Operation
		want       string
	}{
		"best effort":        {[]api.Container{container(nil, nil)}, "", admission.Create, "BestEffort"},
		"burstable":          {[]api.Container{container(rl("100m", ""), nil)}, "", admission.Create, "Burstable"},
		"guaranteed":         {[]api.Container{container(rl("1", "1Gi"), rl("1", "1Gi"))}, "", admission.Create, "Guaranteed"},
		"mixed is burstable": {[]api.Container{container(rl("1", "1Gi"), rl("1", "1Gi")), container(nil, nil)}, "", admission.Create, "Burstable"},
		"lie corrected":      {[]api.Container{container(nil, nil)}, "Guaranteed", admission.Update, "BestEffort"},
	} {
		t.Run(name, func(t *testing.T) {
			pod := &api.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Spec: api.PodSpec{Containers: tc.containers}}
			if tc.existing != "" {
				pod.Annotations = map[string]string{Annotation: tc.existing}
			}
			plugin, _ := New(nil)
			attrs := admission.NewAttributesRecord(pod, nil, api.Kind("Pod").WithVersion("version"), "ns", "p",
				api.Resource("pods").WithVersion("version"), "", tc.op, &metav1.CreateOptions{}, false, nil)
			if err := plugin.(admission.MutationInterface).Admit(context.Background(), attrs, nil); err != nil {
				t.Fatal(err)
			}
			if got := pod.Annotations[Annotation]; got != tc.want {
				t.Errorf("annotation = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAdmitIgnoresOtherResources(t *testing.T) {
	plugin, _ := New(nil)
	attrs := admission.NewAttributesRecord(&api.Pod{}, nil, api.Kind("Pod").WithVersion("version"), "ns", "p",
		api.Resource("pods").WithVersion("version"), "status", admission.Update, &metav1.UpdateOptions{}, false, nil)
	if err := plugin.(admission.MutationInterface).Admit(context.Background(), attrs, nil); err != nil {
		t.Fatal(err)
	}
	cm := admission.NewAttributesRecord(&api.ConfigMap{}, nil, api.Kind("ConfigMap").WithVersion("version"), "ns", "c",
		api.Resource("configmaps").WithVersion("version"), "", admission.Create, &metav1.CreateOptions{}, false, nil)
	if err := plugin.(admission.MutationInterface).Admit(context.Background(), cm, nil); err != nil {
		t.Fatal(err)
	}
}
