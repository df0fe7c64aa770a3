package framework

import (
	"context"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// NamespaceLabel marks the cluster-scoped objects of a spec (reservations,
// priority classes, admission policies) with the spec's namespace, so that
// they are found and removed after it.
const NamespaceLabel = "e2e.gantry.dev/namespace"

// ReservationName makes a reservation name unique to the spec
// (reservations are cluster-scoped).
func (f *Framework) ReservationName(short string) string { return f.Namespace + "-" + short }

// CreateReservation creates r under a name unique to the spec, labelled
// with NamespaceLabel so that EndSpec deletes it.
func (f *Framework) CreateReservation(ctx context.Context, r *wrappers.ReservationWrapper) *schedv1alpha1.Reservation {
	ginkgo.GinkgoHelper()
	r.Name = f.ReservationName(r.Name)
	r.Label(NamespaceLabel, f.Namespace)
	created, err := f.Gantry.SchedulingV1alpha1().Reservations().Create(ctx, r.Obj(), metav1.CreateOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "creating reservation %s", r.Name)
	return created
}

// DeleteReservations deletes the reservations labelled with the spec's
// namespace.
func (f *Framework) DeleteReservations(ctx context.Context) {
	ginkgo.GinkgoHelper()
	err := f.Gantry.SchedulingV1alpha1().Reservations().DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: NamespaceLabel + "=" + f.Namespace})
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "deleting the spec's reservations")
}
