// Command crdversion adds a served, deprecated version to a CRD that
// controller-gen generated, as a copy of one of its versions: the same
// schema (validation rules included), subresources and printer columns,
// served but never stored. hack/lib.sh (gantry::generate_crds) runs it
// after controller-gen, so `make update` writes the result and `make
// verify` checks it.
//
// It exists for ProvisioningRequest: cluster-autoscaler's CRD still serves
// autoscaling.x-k8s.io/v1beta1, deprecated, with v1's schema and no
// conversion (strategy None), and clusters that once stored v1beta1 keep it
// in status.storedVersions; the API server refuses a CRD that drops a
// stored version. controller-gen cannot emit one Go type under two
// versions, and a v1beta1 types package would be a second copy of every
// type (or of the root type's markers) that Gantry's own code never uses.
// Copying the generated v1 keeps the types the one source of truth and
// the two schemas identical by construction.
//
//	crdversion -crd FILE -from v1 -version v1beta1 -deprecation-warning TEXT
//
// FILE is rewritten in place. The YAML is decoded and encoded the way
// controller-gen encodes it (JSON-compatible values through go-yaml v2,
// keys sorted), so nothing but the added version changes.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"

	"sigs.k8s.io/yaml"
)

type options struct {
	file, from, version, warning string
}

func main() {
	var o options
	flag.StringVar(&o.file, "crd", "", "the CRD YAML file, as controller-gen wrote it; rewritten in place")
	flag.StringVar(&o.from, "from", "", "the version whose schema, subresources and printer columns are copied")
	flag.StringVar(&o.version, "version", "", "the version to add, served and deprecated, never the storage version")
	flag.StringVar(&o.warning, "deprecation-warning", "", "the warning the API server returns to clients of the added version")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "crdversion: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.file == "" || o.from == "" || o.version == "" || o.warning == "" {
		return errors.New("-crd, -from, -version and -deprecation-warning are all required")
	}
	data, err := os.ReadFile(o.file)
	if err != nil {
		return err
	}
	out, err := addDeprecatedVersion(data, o.from, o.version, o.warning)
	if err != nil {
		return fmt.Errorf("%s: %w", o.file, err)
	}
	return os.WriteFile(o.file, out, 0o644)
}

// docStart begins every file controller-gen writes.
const docStart = "---\n"

// addDeprecatedVersion returns the CRD in data with version added right
// after from, as a copy of from that is served, not stored, and deprecated
// with warning.
func addDeprecatedVersion(data []byte, from, version, warning string) ([]byte, error) {
	if from == version {
		return nil, fmt.Errorf("version %s cannot be added as a copy of itself", version)
	}
	crd, err := decode(data)
	if err != nil {
		return nil, err
	}
	spec, _ := crd["spec"].(map[string]any)
	versions, _ := spec["versions"].([]any)
	at := -1
	for i, v := range versions {
		m, _ := v.(map[string]any)
		switch m["name"] {
		case from:
			at = i
		case version:
			return nil, fmt.Errorf("CRD %v already has version %s: generate it from types or from a copy, not both", name(crd), version)
		}
	}
	if at < 0 {
		return nil, fmt.Errorf("CRD %v has no version %s to copy", name(crd), from)
	}
	added, err := deepCopy(versions[at].(map[string]any))
	if err != nil {
		return nil, err
	}
	added["name"] = version
	added["served"] = true
	added["storage"] = false
	added["deprecated"] = true
	added["deprecationWarning"] = warning
	spec["versions"] = slices.Insert(versions, at+1, any(added))
	return encode(crd)
}

// decode reads the one CustomResourceDefinition of a file controller-gen
// wrote.
func decode(data []byte) (map[string]any, error) {
	body, ok := bytes.CutPrefix(data, []byte(docStart))
	if !ok {
		return nil, errors.New("not a file controller-gen wrote: it does not start with ---")
	}
	var crd map[string]any
	if err := yaml.Unmarshal(body, &crd); err != nil {
		return nil, err
	}
	if crd["kind"] != "CustomResourceDefinition" {
		return nil, fmt.Errorf("kind %v, want a CustomResourceDefinition", crd["kind"])
	}
	spec, _ := crd["spec"].(map[string]any)
	if _, ok := spec["versions"].([]any); !ok {
		return nil, fmt.Errorf("CRD %v has no spec.versions", name(crd))
	}
	return crd, nil
}

// encode writes crd as controller-gen does: sigs.k8s.io/yaml's encoding is
// the same JSON-to-go-yaml-v2 path, so keys come out sorted and long
// strings folded alike.
func encode(crd map[string]any) ([]byte, error) {
	out, err := yaml.Marshal(crd)
	if err != nil {
		return nil, err
	}
	return append([]byte(docStart), out...), nil
}

func name(crd map[string]any) any {
	meta, _ := crd["metadata"].(map[string]any)
	return meta["name"]
}

func deepCopy(m map[string]any) (map[string]any, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, json.Unmarshal(data, &out)
}
