package reservation

import (
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gantry-dev/gantry/scheduler/apis/config"
	"github.com/gantry-dev/gantry/scheduler/apis/config/scheme"
	"github.com/gantry-dev/gantry/scheduler/apis/config/validation"
)

// DecodeArgs turns the plugin's args, as the framework hands them (see
// scheme.DecodeInto), into defaulted, validated ReservationArgs.
func DecodeArgs(obj runtime.Object) (*config.ReservationArgs, error) {
	return scheme.DecodePluginArgs(Name, obj, &config.ReservationArgs{}, validation.ValidateReservationArgs)
}
