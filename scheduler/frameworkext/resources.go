package frameworkext

import (
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

func resourceList(milliCPU, memory int64, pods int) v1.ResourceList {
	l := v1.ResourceList{
		v1.ResourceCPU:    *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
		v1.ResourceMemory: *resource.NewQuantity(memory, resource.BinarySI),
	}
	if pods > 0 {
		l[v1.ResourcePods] = *resource.NewQuantity(int64(pods), resource.DecimalSI)
	}
	return l
}

func podRequests(p *v1.Pod) v1.ResourceList {
	return resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
}
