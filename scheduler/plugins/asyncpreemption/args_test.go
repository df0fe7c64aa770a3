package asyncpreemption

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
)

func TestDecodeArgs(t *testing.T) {
	tests := map[string]struct {
		raw     string
		wantErr string
		check   func(*Args) bool
	}{
		"defaults": {raw: `{}`, check: func(a *Args) bool {
			return *a.MaxConcurrentDeletes == 8 && a.PreemptionTimeout.Duration.Seconds() == 30 &&
				*a.MinCandidateNodesPercentage == 10 && *a.MinCandidateNodesAbsolute == 100
		}},
		"set":               {raw: `{"maxConcurrentDeletes": 2, "preemptionTimeout": "5s"}`, check: func(a *Args) bool { return *a.MaxConcurrentDeletes == 2 && a.PreemptionTimeout.Duration.Seconds() == 5 }},
		"zero concurrency":  {raw: `{"maxConcurrentDeletes": 0}`, wantErr: "maxConcurrentDeletes must be in [1, 1000], got 0"},
		"negative timeout":  {raw: `{"preemptionTimeout": "-1s"}`, wantErr: "preemptionTimeout must be positive"},
		"percentage > 100":  {raw: `{"minCandidateNodesPercentage": 101}`, wantErr: "minCandidateNodesPercentage must be in [0, 100]"},
		"both zero":         {raw: `{"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0}`, wantErr: "must not both be zero"},
		"unknown field":     {raw: `{"maxConcurentDeletes": 2}`, wantErr: "unknown field"},
		"not a duration":    {raw: `{"preemptionTimeout": "soon"}`, wantErr: "decoding AsyncPreemption args"},
		"wrong type":        {raw: `{"maxConcurrentDeletes": "many"}`, wantErr: "decoding AsyncPreemption args"},
		"negative absolute": {raw: `{"minCandidateNodesAbsolute": -1}`, wantErr: "must not be negative"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args, err := DecodeArgs(&runtime.Unknown{Raw: []byte(tc.raw), ContentType: runtime.ContentTypeJSON})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(args) {
				t.Errorf("args %+v", args)
			}
		})
	}
}

func FuzzDecodeArgs(f *testing.F) {
	f.Add(`{}`)
	f.Add(`{"maxConcurrentDeletes": 3, "preemptionTimeout": "1m"}`)
	f.Add(`{"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0}`)
	f.Fuzz(func(t *testing.T, raw string) {
		args, err := DecodeArgs(&runtime.Unknown{Raw: []byte(raw), ContentType: runtime.ContentTypeJSON})
		if err != nil {
			return
		}
		// Whatever decodes must be usable: validated and defaulted.
		if err := Validate(args); err != nil {
			t.Fatalf("decoded args fail validation: %v", err)
		}
	})
}
