package reservation

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gantry-dev/gantry/scheduler/frameworkext"
)

// Args configure the Reservation plugin (pluginConfig name: Reservation).
type Args struct {
	metav1.TypeMeta `json:",inline"`
	// TerminalReservationTTL is how long a Succeeded or Failed reservation is
	// kept before it is deleted. Default 10m; 0 deletes at once.
	TerminalReservationTTL *metav1.Duration `json:"terminalReservationTTL,omitempty"`
}

// DefaultTerminalReservationTTL is TerminalReservationTTL's default.
const DefaultTerminalReservationTTL = 10 * time.Minute

// DecodeArgs decodes, defaults and validates the plugin's args.
func DecodeArgs(obj runtime.Object) (*Args, error) {
	args := &Args{}
	if err := frameworkext.DecodeArgs(obj, args); err != nil {
		return nil, fmt.Errorf("decoding %s args: %w", Name, err)
	}
	if args.TerminalReservationTTL == nil {
		args.TerminalReservationTTL = &metav1.Duration{Duration: DefaultTerminalReservationTTL}
	}
	if args.TerminalReservationTTL.Duration < 0 {
		return nil, fmt.Errorf("%s args: terminalReservationTTL must not be negative, got %v", Name, args.TerminalReservationTTL.Duration)
	}
	return args, nil
}
