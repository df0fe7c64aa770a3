package clusterapi

import (
	"errors"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gantry-dev/gantry/autoscaler/nodegroups"
)

// maxGroupSize bounds minSize and maxSize, configured or annotated.
const maxGroupSize = 10000

// Config is the provider's configuration file.
type Config struct {
	NodeGroups []GroupConfig `json:"nodeGroups"`
}

// GroupConfig is one node group: one MachineDeployment.
type GroupConfig struct {
	// Name of the group, the value of nodegroups.LabelNodeGroup on its
	// nodes.
	Name string `json:"name"`
	// Namespace and MachineDeployment name the MachineDeployment.
	Namespace         string `json:"namespace"`
	MachineDeployment string `json:"machineDeployment"`
	// MinSize and MaxSize bound the group. One left out is read from the
	// MachineDeployment's annotation AnnotationMinSize or AnnotationMaxSize;
	// one set here wins over the annotation.
	MinSize *int `json:"minSize,omitempty"`
	MaxSize *int `json:"maxSize,omitempty"`
	// TemplateNode describes the nodes the MachineDeployment makes, for
	// simulation.
	TemplateNode TemplateNodeConfig `json:"templateNode"`
}

// TemplateNodeConfig is what the simulation assumes of every node of a
// group.
type TemplateNodeConfig struct {
	// Labels of the nodes, on top of the group label, the hostname and
	// kubernetes.io/os=linux, kubernetes.io/arch=amd64 (which these may
	// override).
	Labels map[string]string `json:"labels,omitempty"`
	// Taints of the nodes.
	Taints []v1.Taint `json:"taints,omitempty"`
	// Capacity of a node (cpu, memory and pods required, extended resources
	// allowed); allocatable is taken to be the same.
	Capacity v1.ResourceList `json:"capacity"`
}

// LoadConfig reads and validates a configuration file.
func LoadConfig(path string) (*Config, error) {
	return nodegroups.LoadConfig[Config](path, "cluster-api node groups")
}

// ParseConfig parses and validates a configuration (YAML or JSON, unknown
// fields rejected). On a validation error it returns the parsed
// configuration as well as the error.
func ParseConfig(data []byte) (*Config, error) {
	return nodegroups.ParseConfig[Config](data, "cluster-api node groups")
}

// Validate reports every problem of the configuration. Sizes left to the
// MachineDeployment's annotations are checked when the provider reads them.
func (c *Config) Validate() error {
	var errs []error
	names := map[string]bool{}
	deployments := map[string]string{}
	for i, g := range c.NodeGroups {
		at := fmt.Sprintf("nodeGroups[%d]", i)
		if msgs := validation.IsDNS1123Label(g.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.name %q: %s", at, g.Name, strings.Join(msgs, "; ")))
		} else if names[g.Name] {
			errs = append(errs, fmt.Errorf("%s.name %q: duplicate", at, g.Name))
		}
		names[g.Name] = true
		if msgs := validation.IsDNS1123Label(g.Namespace); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.namespace %q: %s", at, g.Namespace, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsDNS1123Subdomain(g.MachineDeployment); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.machineDeployment %q: %s", at, g.MachineDeployment, strings.Join(msgs, "; ")))
		}
		key := g.Namespace + "/" + g.MachineDeployment
		if other, ok := deployments[key]; ok {
			errs = append(errs, fmt.Errorf("%s: MachineDeployment %s is already node group %q", at, key, other))
		} else {
			deployments[key] = g.Name
		}
		errs = append(errs, validateSizes(at, g.MinSize, g.MaxSize)...)
		errs = append(errs, validateTemplate(at+".templateNode", &g.TemplateNode)...)
	}
	return errors.Join(errs...)
}

func validateSizes(at string, minSize, maxSize *int) []error {
	var errs []error
	for _, s := range []struct {
		field string
		value *int
	}{{"minSize", minSize}, {"maxSize", maxSize}} {
		if s.value != nil && (*s.value < 0 || *s.value > maxGroupSize) {
			errs = append(errs, fmt.Errorf("%s.%s must be between 0 and %d, got %d", at, s.field, maxGroupSize, *s.value))
		}
	}
	if minSize != nil && maxSize != nil && *minSize > *maxSize {
		errs = append(errs, fmt.Errorf("%s: minSize %d is above maxSize %d", at, *minSize, *maxSize))
	}
	return errs
}

func validateTemplate(at string, t *TemplateNodeConfig) []error {
	var errs []error
	for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourcePods} {
		if q, ok := t.Capacity[r]; !ok || q.Sign() <= 0 {
			errs = append(errs, fmt.Errorf("%s.capacity.%s must be positive", at, r))
		}
	}
	for r, q := range t.Capacity {
		if msgs := validation.IsQualifiedName(string(r)); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.capacity: resource name %q: %s", at, r, strings.Join(msgs, "; ")))
		}
		if q.Sign() < 0 {
			errs = append(errs, fmt.Errorf("%s.capacity.%s must not be negative", at, r))
		}
	}
	for k, v := range t.Labels {
		switch k {
		case nodegroups.LabelNodeGroup, nodegroups.LabelAttempt, v1.LabelHostname:
			errs = append(errs, fmt.Errorf("%s.labels: %s is set by the provider", at, k))
			continue
		}
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.labels: key %q: %s", at, k, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.labels[%s]: value %q: %s", at, k, v, strings.Join(msgs, "; ")))
		}
	}
	seen := map[string]bool{}
	for i, taint := range t.Taints {
		tat := fmt.Sprintf("%s.taints[%d]", at, i)
		if msgs := validation.IsQualifiedName(taint.Key); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.key %q: %s", tat, taint.Key, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(taint.Value); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.value %q: %s", tat, taint.Value, strings.Join(msgs, "; ")))
		}
		switch taint.Effect {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			errs = append(errs, fmt.Errorf("%s.effect %q: must be NoSchedule, PreferNoSchedule or NoExecute", tat, taint.Effect))
		}
		if taint.TimeAdded != nil {
			errs = append(errs, fmt.Errorf("%s.timeAdded: not for a template", tat))
		}
		if k := taint.Key + ":" + string(taint.Effect); seen[k] {
			errs = append(errs, fmt.Errorf("%s: duplicate key %q and effect %q", tat, taint.Key, taint.Effect))
		} else {
			seen[k] = true
		}
	}
	return errs
}
