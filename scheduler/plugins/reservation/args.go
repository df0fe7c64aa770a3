package reservation

import (
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	kjson "sigs.k8s.io/json"
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
	if err := decodeStrict(obj, args); err != nil {
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

// decodeStrict decodes the args of the scheduler configuration, refusing
// unknown fields: a misspelt option must not silently keep its default.
func decodeStrict(obj runtime.Object, into any) error {
	switch o := obj.(type) {
	case nil:
		return nil
	case *runtime.Unknown:
		strict, err := kjson.UnmarshalStrict(o.Raw, into)
		if err != nil {
			return err
		}
		if len(strict) > 0 {
			return errors.Join(strict...)
		}
		return nil
	}
	return frameworkruntime.DecodeInto(obj, into)
}
