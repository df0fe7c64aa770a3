package provisioning

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestHoldsNode(t *testing.T) {
	plain := cpuPod("1")
	done := cpuPod("1")
	done.Status.Phase = v1.PodSucceeded
	ds := cpuPod("1")
	ds.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent", Controller: ptr.To(true)}}
	mirror := cpuPod("1")
	mirror.Annotations = map[string]string{v1.MirrorPodAnnotationKey: "x"}
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want bool
	}{{"running pod", plain, true}, {"succeeded pod", done, false}, {"DaemonSet pod", ds, false}, {"mirror pod", mirror, false}} {
		if got := HoldsNode(tc.pod); got != tc.want {
			t.Errorf("%s: HoldsNode = %v, want %v", tc.name, got, tc.want)
		}
	}
}
