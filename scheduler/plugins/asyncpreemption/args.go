package asyncpreemption

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gantry-dev/gantry/scheduler/apis/config"
	"github.com/gantry-dev/gantry/scheduler/apis/config/scheme"
	"github.com/gantry-dev/gantry/scheduler/apis/config/validation"
)

// DecodeArgs turns the plugin's args, as the framework hands them (see
// scheme.DecodeInto), into defaulted, validated AsyncPreemptionArgs.
func DecodeArgs(obj runtime.Object) (*config.AsyncPreemptionArgs, error) {
	args := &config.AsyncPreemptionArgs{}
	if err := scheme.DecodeInto(obj, args); err != nil {
		return nil, fmt.Errorf("decoding %s args: %w", Name, err)
	}
	if err := validation.ValidateAsyncPreemptionArgs(field.NewPath("pluginConfig", Name, "args"), args); err != nil {
		return nil, fmt.Errorf("%s args: %w", Name, err)
	}
	return args, nil
}
