package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gantry-dev/gantry/scheduler/apis/config"
)

func TestValidateReservationArgs(t *testing.T) {
	path := field.NewPath("args")
	if err := ValidateReservationArgs(path, &config.ReservationArgs{}); err != nil {
		t.Errorf("zero TTL (delete at once): %v", err)
	}
	err := ValidateReservationArgs(path, &config.ReservationArgs{TerminalReservationTTL: metav1.Duration{Duration: -time.Second}})
	if err == nil || !strings.Contains(err.Error(), `args.terminalReservationTTL: Invalid value: "-1s": must not be negative`) {
		t.Errorf("negative TTL: %v", err)
	}
}

func TestValidateAsyncPreemptionArgsReportsEveryField(t *testing.T) {
	err := ValidateAsyncPreemptionArgs(field.NewPath("args"), &config.AsyncPreemptionArgs{
		MaxConcurrentDeletes: MaxConcurrentDeletesLimit + 1, MinCandidateNodesPercentage: -1, MinCandidateNodesAbsolute: -1,
	})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"args.maxConcurrentDeletes", "args.preemptionTimeout", "args.minCandidateNodesPercentage", "args.minCandidateNodesAbsolute"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
