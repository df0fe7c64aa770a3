package narrowing

import (
	"strings"
	"testing"
)

func TestEqual(t *testing.T) {
	base := "abcdefghijklmnopqrstuvwxyz0123456789"
	for n := 0; n <= len(base); n++ {
		a := base[:n]
		b := strings.Clone(a)
		if !equal(a, b) {
			t.Errorf("equal(%q, copy) = false", a)
		}
		for i := range n {
			c := []byte(b)
			c[i] ^= 1
			if equal(a, string(c)) {
				t.Errorf("equal(%q, %q) = true", a, c)
			}
		}
		if n > 0 && equal(a, a[:n-1]) {
			t.Errorf("equal of different lengths")
		}
	}
}

func TestIsSubsequence(t *testing.T) {
	list := []string{"value-0-1", "value-0-2", "value-0-3", "value-0-4"}
	for _, tc := range []struct {
		sub  []string
		want bool
	}{
		{nil, true},
		{[]string{"value-0-1", "value-0-4"}, true},
		{list, true},
		{[]string{"value-0-4", "value-0-1"}, false}, // out of order: the caller falls back to membership
		{[]string{"value-0-5"}, false},
		{append(list, "value-0-1"), false},
	} {
		if got := isSubsequence(tc.sub, list); got != tc.want {
			t.Errorf("isSubsequence(%v) = %v, want %v", tc.sub, got, tc.want)
		}
	}
}
