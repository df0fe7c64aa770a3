package kueue

import (
	"context"
	"slices"
	"sync"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gantry-dev/gantry/autoscaler/provisioning"
	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
)

// bookingLog records, from a watch, every Reservation created for the
// spec's requests: how many pods each request had booked, summed over
// the Reservations created for it.
type bookingLog struct {
	mu     sync.Mutex
	booked map[string]int
	names  map[string]int
}

func (e *env) watchBookings(ctx context.Context) *bookingLog {
	ginkgo.GinkgoHelper()
	l := &bookingLog{booked: map[string]int{}, names: map[string]int{}}
	w, err := e.f.Gantry.SchedulingV1alpha1().Reservations().Watch(ctx, metav1.ListOptions{LabelSelector: provisioning.LabelRequestUID})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(w.Stop)
	go func() {
		defer ginkgo.GinkgoRecover()
		for ev := range w.ResultChan() {
			r, ok := ev.Object.(*schedv1alpha1.Reservation)
			if !ok || ev.Type != watch.Added || !e.books(r) {
				continue
			}
			l.mu.Lock()
			l.booked[r.Annotations[provisioning.AnnotationRequest]] += provisioning.BookedPods(r)
			l.names[r.Name]++
			l.mu.Unlock()
		}
	}()
	return l
}

// expect checks that every request booked want pods and that no
// Reservation was created twice.
func (l *bookingLog) expect(requests, want int) {
	ginkgo.GinkgoHelper()
	l.mu.Lock()
	defer l.mu.Unlock()
	gomega.Expect(l.booked).To(gomega.HaveLen(requests), "requests that booked")
	for pr, n := range l.booked {
		gomega.Expect(n).To(gomega.Equal(want), "pods booked for %s", pr)
	}
	for name, n := range l.names {
		gomega.Expect(n).To(gomega.Equal(1), "Reservation %s created %d times", name, n)
	}
}

// failureLog records, from a watch, the Failed conditions of the spec's
// requests (Kueue deletes a failed attempt's request once it retries).
type failureLog struct {
	mu       sync.Mutex
	messages []string
}

func (l *failureLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.messages)
}

func (e *env) watchFailures(ctx context.Context) *failureLog {
	ginkgo.GinkgoHelper()
	l := &failureLog{}
	w, err := e.f.Gantry.AutoscalingXV1().ProvisioningRequests(e.f.Namespace).Watch(ctx, metav1.ListOptions{})
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	ginkgo.DeferCleanup(w.Stop)
	seen := map[string]bool{}
	go func() {
		defer ginkgo.GinkgoRecover()
		for ev := range w.ResultChan() {
			pr, ok := ev.Object.(*provv1.ProvisioningRequest)
			if !ok || seen[pr.Name] {
				continue
			}
			if c := meta.FindStatusCondition(pr.Status.Conditions, provv1.ConditionFailed); c != nil && c.Status == metav1.ConditionTrue {
				seen[pr.Name] = true
				l.mu.Lock()
				l.messages = append(l.messages, pr.Name+": "+c.Message)
				l.mu.Unlock()
			}
		}
	}()
	return l
}
