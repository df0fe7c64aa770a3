package benchutil

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// CallsSince is how many requests a schedtest.Faults proxy saw between two
// of its counts (Faults.Counts: "METHOD path" to count), in all and by
// method and resource ("PATCH pods/status").
func CallsSince(before, after map[string]int) (int, map[string]int) {
	total, by := 0, map[string]int{}
	for k, n := range after {
		if d := n - before[k]; d > 0 {
			method, path, _ := strings.Cut(k, " ")
			by[method+" "+ResourceOf(path)] += d
			total += d
		}
	}
	return total, by
}

// ResourceOf is the resource, with its subresource, that a request path
// names: "pods/binding" for /api/v1/namespaces/default/pods/p/binding.
func ResourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return path
	}
	if len(parts) > 2 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return path
	case 1, 2:
		return parts[0]
	default:
		return parts[0] + "/" + parts[2]
	}
}

// PerPod lists counts divided by n, the most frequent first:
// "PATCH pods/status 1.02, POST pods/binding 1".
func PerPod(counts map[string]int, n int) string {
	keys := slices.Collect(maps.Keys(counts))
	slices.SortFunc(keys, func(a, b string) int {
		if c := cmp.Compare(counts[b], counts[a]); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.3g", k, float64(counts[k])/float64(n)))
	}
	return strings.Join(parts, ", ")
}
