package framework

import (
	"context"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CreatePriorityClass creates PriorityClass <namespace>-<short> of value,
// with preemption policy policy unless it is empty, labelled with
// NamespaceLabel and deleted after the spec; it returns the name.
// PriorityClasses are cluster-scoped, so the name is unique to the spec.
func (f *Framework) CreatePriorityClass(ctx context.Context, short string, value int32, policy v1.PreemptionPolicy) string {
	ginkgo.GinkgoHelper()
	pc := &schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:   f.Namespace + "-" + short,
			Labels: map[string]string{NamespaceLabel: f.Namespace},
		},
		Value:       value,
		Description: "Gantry e2e spec " + f.Namespace,
	}
	if policy != "" {
		pc.PreemptionPolicy = &policy
	}
	_, err := f.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "creating PriorityClass %s", pc.Name)
	ginkgo.DeferCleanup(func(ctx context.Context) {
		err := f.Client.SchedulingV1().PriorityClasses().Delete(ctx, pc.Name, metav1.DeleteOptions{})
		if !apierrors.IsNotFound(err) {
			gomega.Expect(err).NotTo(gomega.HaveOccurred(), "deleting PriorityClass %s", pc.Name)
		}
	})
	return pc.Name
}
