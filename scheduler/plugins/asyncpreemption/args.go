package asyncpreemption

import (
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gantry-dev/gantry/scheduler/apis/config"
	"github.com/gantry-dev/gantry/scheduler/apis/config/scheme"
	"github.com/gantry-dev/gantry/scheduler/apis/config/validation"
)

// DecodeArgs turns the plugin's args, as the framework hands them (see
// scheme.DecodeInto), into defaulted, validated AsyncPreemptionArgs.
func DecodeArgs(obj runtime.Object) (*config.AsyncPreemptionArgs, error) {
	return scheme.DecodePluginArgs(Name, obj, &config.AsyncPreemptionArgs{}, validation.ValidateAsyncPreemptionArgs)
}
