package reservation

import (
	"os"
	"testing"

	"k8s.io/kubernetes/pkg/scheduler/metrics"
)

func TestMain(m *testing.M) {
	metrics.Register() // the scheduler cache reports metrics
	os.Exit(m.Run())
}
