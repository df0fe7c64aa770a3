package provisioning

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	provv1 "github.com/gantry-dev/gantry/crds/provisioning/v1"
	schedv1alpha1 "github.com/gantry-dev/gantry/crds/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/test/wrappers"
)

// laggingCache is the API behind c as a cache that shows no Reservation
// yet.
func laggingCache(c client.WithWatch) client.Client {
	return interceptor.NewClient(c, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if _, ok := list.(*schedv1alpha1.ReservationList); ok {
				return nil
			}
			return c.List(ctx, list, opts...)
		},
	})
}

func booking(name string, pr *provv1.ProvisioningRequest) *schedv1alpha1.Reservation {
	res := wrappers.MakeReservation(name).Obj()
	res.Labels = map[string]string{LabelRequestUID: string(pr.UID)}
	res.Annotations = map[string]string{AnnotationRequest: pr.Namespace + "/" + pr.Name}
	return res
}

// TestReleaseReadsThroughTheAPI: a request deleted right after its booking
// was created, before the cache shows the booking, has the booking
// released before its finalizer goes: nothing is left behind. Before the
// fix release listed the cache only, and both Reservations stayed.
func TestReleaseReadsThroughTheAPI(t *testing.T) {
	ctx := context.Background()
	pr := wrappers.MakeProvisioningRequest("fast", "ns", provv1.ClassCheckCapacity).Obj()
	pr.UID = "uid-1"
	pr.Finalizers = []string{Finalizer}
	now := metav1.Now()
	pr.DeletionTimestamp = &now
	// One booking the API server has, and one this process is still
	// creating (assumed).
	created := booking(bookingName(pr.UID, 0, 0), pr)
	_, c := fakeReconciler(t, time.Now(), pr, created)
	r, _ := fakeReconciler(t, time.Now())
	r.Client, r.APIReader = laggingCache(c.(client.WithWatch)), c
	inFlight := booking(bookingName(pr.UID, 0, 1), pr)
	r.assume([]*schedv1alpha1.Reservation{inFlight})
	if err := c.Create(ctx, inFlight.DeepCopy()); err != nil {
		t.Fatal(err)
	}

	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pr)}); err != nil {
		t.Fatal(err)
	}
	var left schedv1alpha1.ReservationList
	if err := c.List(ctx, &left); err != nil {
		t.Fatal(err)
	}
	if len(left.Items) != 0 {
		t.Errorf("%d Reservations left behind by the deleted request, want 0", len(left.Items))
	}
}

// TestOrphanedBookingsOfAnEarlierRequest: the bookings of a request that
// is gone (its finalizer removed by hand) are deleted when a request of the
// same name is reconciled, or when its name is, so the new request's pods
// (which name the request, not its UID) do not consume them; the new
// request's own bookings stay, and so does a booking the cache shows of a
// request the API server still has.
func TestOrphanedBookingsOfAnEarlierRequest(t *testing.T) {
	ctx := context.Background()
	old := wrappers.MakeProvisioningRequest("reused", "ns", provv1.ClassCheckCapacity).Obj()
	old.UID = "uid-old"
	cur := old.DeepCopy()
	cur.UID = "uid-new"
	orphan, own := booking("orphan", old), booking("own", cur)
	gone := wrappers.MakeProvisioningRequest("gone", "ns", provv1.ClassCheckCapacity).Obj()
	gone.UID = "uid-gone"
	goneBooking := booking("gone-booking", gone)
	r, c := fakeReconciler(t, time.Now(), cur, orphan, own, goneBooking)

	for _, name := range []string{"reused", "gone"} {
		if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "ns", Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	var left schedv1alpha1.ReservationList
	if err := c.List(ctx, &left); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, res := range left.Items {
		names = append(names, res.Name)
	}
	if len(names) != 1 || names[0] != "own" {
		t.Errorf("Reservations left: %v, want only the current request's (own)", names)
	}
}

// TestRefusedBookingIsNotAssumed: a booking is assumed before it is created
// (outside bookMu); a Reservation the API server refuses is forgotten, so
// that no later simulation counts room nobody holds, while the others stay
// assumed until the cache shows them.
func TestRefusedBookingIsNotAssumed(t *testing.T) {
	ctx := context.Background()
	pr := wrappers.MakeProvisioningRequest("job", "ns", provv1.ClassCheckCapacity).UID("uid-1").Obj()
	r, c := fakeReconciler(t, time.Now())
	r.Client = interceptor.NewClient(c.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if obj.GetName() == "refused" {
				return apierrors.NewInvalid(schedv1alpha1.SchemeGroupVersion.WithKind("Reservation").GroupKind(), obj.GetName(), nil)
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	todo := []*schedv1alpha1.Reservation{booking("accepted", pr), booking("refused", pr)}
	r.assume(todo)
	if err := r.createAssumed(ctx, todo); err == nil || !apierrors.IsInvalid(errors.Unwrap(err)) {
		t.Fatalf("createAssumed: %v, want the refusal", err)
	}
	var assumed []string
	for _, res := range r.withAssumed(nil) {
		assumed = append(assumed, res.Name)
	}
	if len(assumed) != 1 || assumed[0] != "accepted" {
		t.Errorf("assumed after the refusal: %v, want [accepted]", assumed)
	}
}
